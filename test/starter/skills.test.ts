import test from "ava";
import { parseVerbArgs } from "../../cli/parse-verb-args.js";
import { resolveVerb } from "../../cli/resolve-verb.js";
import { VERBS } from "../../cli/verbs.js";
import { acceptedOn, CAPABILITIES, capability } from "../../proto/catalogue.js";
import { validateInput } from "../../proto/codec.js";
import type { CapabilityName } from "../../proto/inputs.js";
import { refineInput } from "../../proto/refine.js";
import { renderStarter, type StarterFile } from "../../starter/mod.js";

/**
 * The skills the starter ships (spec 1.4): three SKILL.md files with their
 * actions.json. Every capability of spec 1.2 has exactly one action across the
 * three; each action is one call that the real client parser (or, for the
 * capabilities the client has no verb for, the capability's input schema)
 * accepts.
 */

const APP = "shop";
const SKILLS = ["provision-app", "add-a-feature", "frontend-design"] as const;
const CLIENT = "node bin/slipway.mjs";

interface HttpCall {
  method: string;
  plane: "control" | "data";
  path: string;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}
interface Action {
  action: string;
  capability: string;
  planned: boolean;
  when: string;
  call: string;
  http?: HttpCall;
}
interface Read {
  read: string;
  when: string;
  call: string;
}
interface ActionsFile {
  skill: string;
  client: string;
  actions: Action[];
  reads: Read[];
}

/** What each `<placeholder>` of a call stands for in these tests. */
const SAMPLES: Record<string, string> = {
  resource_id: "bld_01J0000000000000000000000",
  type: "app",
  SECRET_NAME: "STRIPE_KEY",
  ENV_VAR: "STRIPE_KEY_VALUE",
  host_name: "shop.example.com",
  base_url: "https://shop.example.com",
  dir: "monitoring",
  goal: "let users export their orders as CSV",
  job_name: "cleanup",
  cron_path: "/cron/cleanup",
  interval: "1h",
  address: "ada@example.com",
  template_name: "welcome",
  suite_path: "evals/suite.json",
  mcp_url: "https://shop.example.com/mcp",
  usd: "2",
  otlp_url: "https://otel.example.com:4318",
  repo_name: "shop",
  owner: "ada@example.com",
  input: "Summarize the last order",
  provider: "google",
  subject: "Your order",
  body: "It shipped today.",
};
const ENV = { STRIPE_KEY_VALUE: "sk_test_not_a_secret", SLIPWAY_TOKEN: "slw_not_a_token" };

const files: StarterFile[] = renderStarter({ app: APP, platform: "node", framework: "node-http" });
const fileText = (path: string): string => {
  const f = files.find((x) => x.path === path);
  if (!f) throw new Error(`the rendered starter has no ${path}`);
  return f.content;
};
const skillMd = (name: string) => fileText(`.claude/skills/${name}/SKILL.md`);
const actionsOf = (name: string) =>
  JSON.parse(fileText(`.claude/skills/${name}/actions.json`)) as ActionsFile;
const allActions = SKILLS.flatMap((s) => actionsOf(s).actions.map((a) => ({ skill: s, ...a })));

function fill(text: string): string {
  return text.replace(/<([A-Za-z_]+)>/g, (whole, name: string) => {
    const v = SAMPLES[name];
    if (v === undefined) throw new Error(`no sample value for placeholder ${whole}`);
    return v;
  });
}

function fillDeep(v: unknown): unknown {
  if (typeof v === "string") return fill(v);
  if (Array.isArray(v)) return v.map(fillDeep);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fillDeep(x)]));
  }
  return v;
}

/** Splits a shell command line: words separated by spaces, "double quoted" words kept whole. */
function shellWords(line: string): string[] {
  const words: string[] = [];
  const re = /"([^"]*)"|(\S+)/g;
  for (let m = re.exec(line); m; m = re.exec(line)) words.push(m[1] ?? m[2] ?? "");
  return words;
}

/** Parses a client call with the client's own parser: the verb and its invocation, no HTTP. */
function parseClientCall(call: string) {
  if (!call.startsWith(`${CLIENT} `)) throw new Error(`not a call of the shipped client: ${call}`);
  const argv = shellWords(fill(call.slice(CLIENT.length + 1)));
  const r = resolveVerb(argv);
  if (r.kind !== "verb") throw new Error(`no verb in ${call} (${r.kind})`);
  return parseVerbArgs(r.verb, r.rest, ENV);
}

/** The frontmatter's keys and values; throws unless it is the plain `key: value` YAML a skill needs. */
function frontmatter(md: string): Record<string, string> {
  const m = /^---\n([\s\S]*?)\n---\n/.exec(md);
  if (!m) throw new Error("no frontmatter");
  const out: Record<string, string> = {};
  for (const line of (m[1] ?? "").split("\n")) {
    const kv = /^([a-z][a-z-]*): (.+)$/.exec(line);
    if (!kv) throw new Error(`not a key: value line: ${JSON.stringify(line)}`);
    const [, key = "", value = ""] = kv;
    // A plain YAML scalar: no indicator first, no ": " or " #" inside.
    if (/^[-?:,[\]{}#&*!|>'"%@`]/.test(value) || value.includes(": ") || value.includes(" #")) {
      throw new Error(`${key}: value needs quoting in YAML: ${value}`);
    }
    if (Object.hasOwn(out, key)) throw new Error(`${key} given twice`);
    out[key] = value.trim();
  }
  return out;
}

/** Rows of the markdown table under `## <section>`, cells with their backticks removed. */
function tableRows(md: string, section: string): string[][] {
  const start = md.indexOf(`\n## ${section}\n`);
  if (start < 0) throw new Error(`no section ${section}`);
  const rest = md.slice(start + section.length + 5);
  const end = rest.indexOf("\n## ");
  const lines = (end < 0 ? rest : rest.slice(0, end)).split("\n").filter((l) => l.startsWith("| "));
  return lines.slice(2).map((l) =>
    l
      .slice(2, -2)
      .split(" | ")
      .map((c) => c.trim().replace(/^`(.*)`$/, "$1")),
  );
}

/** Capabilities that no verb of the client calls (spec 1.3: agent-run, send-message, setup-observability, delivery-check). */
const HTTP_ONLY = new Set(
  CAPABILITIES.map((c) => c.name).filter((name) => !VERBS.some((v) => v.capability === name)),
);

test("skills: the three skills of spec 1.4 are shipped, with valid frontmatter", (t) => {
  const shipped = files
    .map((f) => /^\.claude\/skills\/([^/]+)\/SKILL\.md$/.exec(f.path)?.[1])
    .filter((x): x is string => x !== undefined)
    .sort();
  t.deepEqual(shipped, [...SKILLS].sort());
  for (const name of SKILLS) {
    const fm = frontmatter(skillMd(name));
    t.deepEqual(Object.keys(fm).sort(), ["description", "name"], name);
    t.is(fm.name, name);
    t.true((fm.description?.length ?? 0) >= 40 && (fm.description?.length ?? 0) <= 1024, name);
    t.true(fm.description?.includes(APP), `${name}: the description names the app`);
    t.is(actionsOf(name).skill, name);
    t.is(actionsOf(name).client, "bin/slipway.mjs");
  }
});

test("skills: every skill states the rules of spec 1.4", (t) => {
  for (const name of SKILLS) {
    const md = skillMd(name);
    for (const rule of [
      "Never assume a global install.",
      "Never run container, package-manager or runtime tools directly",
      "Run the client shipped in the starter",
      "Branch on the JSON status",
      "Never read application source to check state.",
    ]) {
      t.true(md.includes(rule), `${name}: ${rule}`);
    }
    t.true(md.includes("node bin/slipway.mjs"), name);
  }
});

test("skills: each skill drives what spec 1.4 says it drives", (t) => {
  const caps = (name: string) => new Set(actionsOf(name).actions.map((a) => a.capability));
  const provision = caps("provision-app");
  for (const c of [
    "initialize-app",
    "provision-environment",
    "install-dependencies",
    "build",
    "test",
    "lint",
    "explain-failure",
  ]) {
    t.true(provision.has(c), `provision-app drives ${c}`);
  }
  const feature = skillMd("add-a-feature");
  for (const step of ["Spec", "Design", "Implement", "Validate", "Verify"]) {
    t.regex(feature, new RegExp(`\\*\\*${step}\\*\\*`), `add-a-feature runs ${step}`);
  }
  t.true(caps("add-a-feature").has("generate-feature-plan"));
  t.regex(skillMd("frontend-design"), /reading as a template/);
});

test("skills: every capability of spec 1.2 has exactly one skill action", (t) => {
  t.is(CAPABILITIES.length, 24);
  t.is(allActions.length, 24);
  const names = CAPABILITIES.map((c) => c.name).sort();
  t.deepEqual(allActions.map((a) => a.capability).sort(), names);
  t.is(new Set(allActions.map((a) => a.action)).size, 24, "action names are unique");
  for (const a of allActions) t.truthy(capability(a.capability), a.capability);
});

test("skills: exactly the 14 actions marked Y in spec 1.2 are flagged planned", (t) => {
  const planned = allActions.filter((a) => a.planned).map((a) => a.capability);
  const expected = CAPABILITIES.filter((c) => c.skill_action_planned).map((c) => c.name);
  t.is(expected.length, 14);
  t.deepEqual(planned.sort(), expected.sort());
  for (const a of allActions) t.is(typeof a.planned, "boolean", a.action);
});

test("skills: every client call parses with the client's parser and makes a valid input", (t) => {
  const clientActions = allActions.filter((a) => a.http === undefined);
  t.is(clientActions.length, 20);
  for (const a of clientActions) {
    t.false(HTTP_ONLY.has(a.capability), `${a.capability} has no client verb`);
    t.true(a.call.endsWith(" --json"), `${a.action}: --json`);
    const inv = parseClientCall(a.call);
    t.is(inv.verb.capability as string | undefined, a.capability, a.action);
    t.is(inv.verb.method, "POST", a.action);
    t.is(inv.globals.mode, "json", a.action);
    const name = a.capability as CapabilityName;
    t.notThrows(
      () => {
        const input = validateInput(name, inv.values);
        refineInput(name, input);
      },
      `${a.action}: ${JSON.stringify(inv.values)}`,
    );
    if (a.capability !== "initialize-app" && Object.hasOwn(inv.values, "app")) {
      t.is(inv.values.app, APP, `${a.action} acts on this app`);
    }
  }
});

test("skills: the capabilities without a client verb are one HTTP call the catalogue accepts", (t) => {
  t.deepEqual(
    [...HTTP_ONLY].sort(),
    ["agent-run", "delivery-check", "send-message", "setup-observability"],
    "spec 1.3: HTTP-only capabilities",
  );
  const httpActions = allActions.filter((a) => a.http !== undefined);
  t.deepEqual(httpActions.map((a) => a.capability).sort(), [...HTTP_ONLY].sort());
  for (const a of httpActions) {
    const http = a.http!;
    const info = capability(a.capability)!;
    t.is(http.method, "POST", a.action);
    t.is(http.path, `/capabilities/${a.capability}`, a.action);
    t.true(acceptedOn(info, http.plane), `${a.action} is accepted on the ${http.plane} plane`);
    const base = http.plane === "data" ? "$SLIPWAY_DATA_URL" : "$SLIPWAY_CONTROL_URL";
    t.is(a.call, `POST ${base}${http.path}`, a.action);
    t.is(http.headers["content-type"], "application/json");
    t.is(
      http.headers.authorization,
      "Bearer $SLIPWAY_TOKEN",
      `${a.action}: the token comes from the environment`,
    );
    t.true(["builder", "app"].includes(http.headers["x-platform-actor-type"] ?? ""), a.action);
    t.truthy(http.headers["x-platform-actor-id"], a.action);
    t.notThrows(() => validateInput(a.capability as CapabilityName, fillDeep(http.body)), a.action);
  }
});

test("skills: the reads are resources, events, logs, app-events and inspect health, each one client call", (t) => {
  for (const name of SKILLS) {
    const reads = actionsOf(name).reads;
    t.deepEqual(
      reads.map((r) => r.read),
      ["resources", "events", "logs", "app-events", "health"],
      name,
    );
    const inv = Object.fromEntries(reads.map((r) => [r.read, parseClientCall(r.call)]));
    for (const r of reads) t.is(inv[r.read]?.globals.mode, "json", `${name} ${r.read}`);
    t.is(inv.resources?.verb.path, "/resources");
    t.is(inv.resources?.values.app_id, APP);
    t.is(inv.events?.verb.path, "/events");
    t.is(inv.events?.values.app_id, APP);
    t.is(inv.logs?.path, `/logs/${SAMPLES.resource_id}`);
    for (const [read, type] of [
      ["app-events", "app-events"],
      ["health", "health"],
    ] as const) {
      t.is(inv[read]?.verb.capability, "inspect");
      t.notThrows(() => validateInput("inspect", inv[read]?.values));
      t.is(inv[read]?.values.type, type);
    }
  }
});

test("skills: the tables in SKILL.md say what actions.json says", (t) => {
  for (const name of SKILLS) {
    const md = skillMd(name);
    const { actions, reads } = actionsOf(name);
    t.deepEqual(
      tableRows(md, "Actions"),
      actions.map((a) => [a.action, a.when, a.planned ? "planned" : "no", a.call]),
      `${name}: actions`,
    );
    t.deepEqual(
      tableRows(md, "Reads"),
      reads.map((r) => [r.read, r.when, r.call]),
      `${name}: reads`,
    );
    const bodies = [...md.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => JSON.parse(m[1] ?? ""));
    t.deepEqual(
      bodies,
      actions.filter((a) => a.http).map((a) => a.http!.body),
      `${name}: bodies of the POST calls`,
    );
  }
});
