import { DEFAULT_DATA_DIR, DEFAULT_URLS, ENV_VARS } from "./config.js";
import { alignRows } from "./format-values.js";
import { GLOBAL_FLAGS, type GlobalFlagSpec } from "./globals.js";
import { type FlagSpec, FlagKind, type VerbSpec, transportOf } from "./verb-types.js";
import { VERBS } from "./verbs.js";
import { WAIT_FLAGS } from "./wait-flags.js";

/** The help texts are generated from the verb table (cli/verbs.ts) and the input schemas (proto/inputs.ts). */
const GENERATED = "generated from cli/verbs.ts and proto/inputs.ts";

function metavar(f: FlagSpec): string {
  switch (f.kind) {
    case FlagKind.boolean:
    case FlagKind.constant:
    case FlagKind.preference:
      return "";
    case FlagKind.preferenceValue:
      return " [<id>]";
    case FlagKind.integer:
      return " <n>";
    case FlagKind.number:
      return " <number>";
    case FlagKind.list:
      return " <a,b,...>";
    case FlagKind.json:
      return " <json>";
    case FlagKind.env:
      return " <VAR>";
    default:
      return f.choices && f.choices.join("|").length <= 30 ? ` <${f.choices.join("|")}>` : ` <${f.field}>`;
  }
}

function planeText(verb: VerbSpec): string {
  if (verb.plane === "none") return "none: runs on this machine, calls no platform route";
  if (verb.plane === "control") return `control plane (${ENV_VARS.controlUrl})`;
  if (verb.plane === "data") return `data plane (${ENV_VARS.dataUrl})`;
  return `either plane: control (${ENV_VARS.controlUrl}) unless --plane data (${ENV_VARS.dataUrl})`;
}

function columns(rows: readonly (readonly string[])[]): string[] {
  return alignRows(rows, 2);
}

/** The route column of a verb's row: `GET /resources`, `GET|POST /mcp/proactive`, or `local (no HTTP)`. */
function routeText(verb: VerbSpec): string {
  if (verb.method === undefined) return "local (no HTTP)";
  const methods = verb.alternate ? `${verb.method}|${verb.alternate.method}` : verb.method;
  return `${methods} ${verb.path}`;
}

/** The Route line of a verb's help. */
function routeLine(verb: VerbSpec): string {
  if (verb.local) return `Runs: ${verb.local.runs}; no HTTP request`;
  const { alternate } = verb;
  const capability = verb.capability ? ` (capability ${verb.capability})` : "";
  if (!alternate) return `Route: ${verb.method} ${verb.path}${capability}`;
  const flag = verb.flags.find((f) => f.field === alternate.field)?.name ?? alternate.field;
  return `Route: ${verb.method} ${verb.path}; ${alternate.method} ${verb.path} when --${flag} is given`;
}

/** Where a verb's flags go, for the help's Flags header. */
function targetText(verb: VerbSpec): string {
  if (verb.local) return "option";
  const target = (t: string) => (t === "body" ? "body field" : "query parameter");
  const { alternate, method } = verb;
  if (!alternate || method === undefined) return target(verb.transport);
  return `${target(transportOf(method))} (${method}) or ${target(transportOf(alternate.method))} (${alternate.method})`;
}

function verbRows(verbs: readonly VerbSpec[]): string[] {
  return columns(verbs.map((v) => [v.words.join(" "), routeText(v), v.plane, v.summary]));
}

function globalFlagRows(): string[] {
  return columns(
    Object.entries(GLOBAL_FLAGS as Record<string, GlobalFlagSpec>).map(([name, spec]) => [
      `${spec.short ? `-${spec.short}, ` : ""}--${name}${spec.metavar ? ` ${spec.metavar}` : ""}`,
      spec.description,
    ]),
  );
}

function waitFlagRows(): string[] {
  return columns(WAIT_FLAGS.map((f) => [`--${f.name}${f.metavar ? ` ${f.metavar}` : ""}`, f.description]));
}

/** How a capability verb waits for long work (shown in its help). */
const WAIT_TEXT = [
  "Long work: when the platform answers 202 (status running) the client follows the resource until it ends",
  "(succeeded, failed, cancelled, rolled_back, stopped), then prints the final state and exits with it.",
  "On a terminal stderr shows a progress line and the log; Ctrl-C stops waiting (exit 130), not the work.",
];

/** The top-level help: every verb of the table, the global flags, environment and exit codes. */
export function topHelp(): string {
  return [
    "slipway: the Slipway command-line client. A thin HTTP client; it holds no credential of its own.",
    "",
    "Usage: slipway [global flags] <verb> [flags]",
    "       slipway <verb> --help",
    "       slipway <group> --help   (the verbs of a group: slipway mcp --help, slipway infra --help)",
    "",
    `Verbs (${GENERATED}):`,
    ...verbRows(VERBS),
    "",
    "Global flags:",
    ...globalFlagRows(),
    "",
    "Waiting for long work (capability verbs; a 202 answer is followed until the resource ends):",
    ...waitFlagRows(),
    "",
    "Environment:",
    ...columns([
      [ENV_VARS.controlUrl, `control plane base URL (default ${DEFAULT_URLS.control})`],
      [ENV_VARS.dataUrl, `data plane base URL (default ${DEFAULT_URLS.data})`],
      [ENV_VARS.token, "when set, sent as Authorization: Bearer <token> (the data plane's app token)"],
      [
        ENV_VARS.controlToken,
        `the control plane's token (default: control.token of ${ENV_VARS.dataDir}, else of ${DEFAULT_DATA_DIR} in the working directory or a parent; none inside a dev container)`,
      ],
      [ENV_VARS.actorId, "sent as x-platform-actor-id (default <user>@<host>)"],
    ]),
    "",
    "Exit codes:",
    ...columns([
      ["0", "succeeded (long work: ended succeeded; with --no-wait: running) (a read: answered)"],
      ["1", "the platform ran the call and it failed (long work: failed, cancelled, rolled_back)"],
      ["2", "usage error"],
      ["3", "rejected by the platform (HTTP 4xx): code and message on stderr"],
      [
        "4",
        "platform unreachable, HTTP 5xx (501 not_implemented), an answer outside the contract, --timeout passed, or a local verb not built yet",
      ],
      ["130", "Ctrl-C while waiting for long work: the work goes on (slipway logs <id> --follow)"],
    ]),
    "",
  ].join("\n");
}

/** Help of a group of verbs that share their first words (`slipway secrets --help`). */
export function groupHelp(prefix: readonly string[], verbs: readonly VerbSpec[]): string {
  return [
    `Usage: slipway ${prefix.join(" ")} <${verbs.map((v) => v.words.slice(prefix.length).join(" ")).join("|")}> [flags]`,
    "",
    ...verbRows(verbs),
    "",
  ].join("\n");
}

/** Help of one verb: synopsis, route and plane, each flag with the field it fills. */
export function verbHelp(verb: VerbSpec): string {
  const name = verb.words.join(" ");
  const synopsis = [
    `slipway ${name}`,
    ...verb.positionals.map((p) => (p.required ? `<${p.name}>` : `[<${p.name}>]`)),
    ...verb.flags.filter((f) => f.required).map((f) => `--${f.name}${metavar(f)}`),
    "[flags]",
  ].join(" ");
  const target = targetText(verb);
  const rows = [
    ...verb.positionals.map((p) => [
      `<${p.name}>`,
      verb.path.includes(`{${p.field}}`) ? `path` : `-> ${p.field}`,
      p.required ? "required" : "",
      p.choices ? `${p.description}: one of ${p.choices.join(", ")}` : p.description,
    ]),
    ...verb.flags.map((f) => [
      `--${f.name}${metavar(f)}`,
      f.kind === FlagKind.constant
        ? `-> ${f.field}=${String(f.constant)}`
        : f.kind === FlagKind.preference || f.kind === FlagKind.preferenceValue
          ? `-> ${f.field} (Prefer header)`
          : `-> ${f.field}`,
      f.required ? "required" : "",
      f.choices ? `${f.description}: one of ${f.choices.join(", ")}` : f.description,
    ]),
  ];
  const lines = [
    `Usage: ${synopsis}`,
    "",
    verb.summary,
    "",
    routeLine(verb),
    `Plane: ${planeText(verb)}`,
    "",
    rows.length > 0 ? `Flags (each fills the ${target} after ->; ${GENERATED}):` : "Flags: none of its own.",
    ...columns(rows),
  ];
  const fixed = Object.entries(verb.fixed).map(([k, v]) => `${k}=${String(v)}`);
  const defaults = Object.entries(verb.defaults).map(([k, v]) => `${k}=${String(v)}`);
  if (fixed.length > 0) lines.push("", `Always sends: ${fixed.join(", ")}`);
  if (defaults.length > 0) {
    const what = verb.local ? "Defaults" : "Sends by default";
    lines.push("", `${what} (when no flag sets the field): ${defaults.join(", ")}`);
  }
  if (verb.local) {
    lines.push("", ...verb.local.checks.map((c) => `Refuses (exit 2): ${c.description}`));
    lines.push(`Not built yet: exits 4 with not_implemented and does nothing.`);
  }
  if (verb.waits) lines.push("", ...WAIT_TEXT, "", "Wait flags (fill no field):", ...waitFlagRows());
  lines.push("", "Global flags:", ...globalFlagRows(), "");
  return lines.join("\n");
}
