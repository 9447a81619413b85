import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { VERBS } from "../../cli/mod.js";
import { verbHelp } from "../../cli/help.js";
import { FlagKind } from "../../cli/verb-types.js";
import {
  acceptedOn,
  ALL_CAPABILITIES,
  CAPABILITIES,
  type Capability,
  infoOf,
  INSPECT_TYPES,
  validateInput,
  type CapabilityName,
} from "../../proto/mod.js";
import { call, controlAuth, get, platformPerFile, type PlatformContext } from "../helpers/infra.js";

/**
 * Issue 11: everything that describes a capability is derived from its one
 * declaration (proto/capabilities/). For every declared capability, the
 * catalogue, GET /capabilities, the OpenAPI document of each plane, the CLI's
 * verbs and help, and the gateway's routing say what the declaration says.
 * The lists below come from ALL_CAPABILITIES; the catalogue itself is checked against the spec's
 * own table (a copy, below), the one list that does not come from the code.
 */

const test = anyTest as TestFn<PlatformContext & { token: string; app: string }>;

platformPerFile(test, async (p) => {
  const app = `k${randomUUID().slice(0, 8)}`;
  const r = await call(p.controlUrl, "initialize-app", { name: app });
  return { token: r.body.result.token as string, app };
});

const PLANES = ["control", "data"] as const;

interface SchemaLike {
  properties: Record<string, { sensitive?: boolean }>;
  required?: string[];
}
const schemaOf = (c: Capability) => c.input as unknown as SchemaLike;
/** The declaration's input schema as JSON (what OpenAPI and clients see). */
const plainSchema = (c: Capability) =>
  JSON.parse(JSON.stringify(c.input, (k, v) => (k === "sensitive" ? undefined : v))) as unknown;

test("there are 24 declarations, and each one's example passes its own schema and rules", (t) => {
  t.is(ALL_CAPABILITIES.length, 24);
  for (const c of ALL_CAPABILITIES) {
    const input = validateInput(
      c.name as CapabilityName,
      structuredClone(c.example) as Record<string, unknown>,
    );
    t.notThrows(() => c.refine(input as never), c.name);
  }
});

/**
 * The capability table of the spec (part 1.2), copied as it stands: an independent list the
 * catalogue is checked against, row by row and in order. "see part 2" leaves the resource to part
 * 2's table; a parenthesis in the events column is a remark.
 */
const SPEC_TABLE = `
| initialize-app | control | see part 2 | | ApplicationInitialized | N |
| provision-environment | control | Environment | | EnvironmentProvisioned | N |
| install-dependencies | control | see part 2 | | DependenciesInstalled | N |
| run-dev-server | control | DevServer | | DevServerStarted, DevServerStopped | N |
| build | control | see part 2 | | BuildStarted, BuildSucceeded, BuildFailed (family shared with test and lint) | N |
| test | control | see part 2 | | TestRunStarted, TestRunSucceeded, TestRunFailed (family shared) | N |
| lint | control | see part 2 | | CheckRunStarted, CheckRunSucceeded, CheckRunFailed (family shared) | N |
| inspect | both | Inspection | | InspectionCreated | N |
| verify | both | Verification | C14 | VerificationCompleted | Y |
| explain-failure | control | see part 2 | | AnalysisCreated | N |
| generate-feature-plan | control | Plan | | PlanCreated | N |
| set-secret | both | Secret | C5 | SecretSet | Y |
| unset-secret | both | Secret | C5 | SecretUnset | Y |
| schedule-job | both | ScheduledJob | C2 | JobScheduled, JobUnscheduled | Y |
| deploy | control | Deployment | C7 | DeploymentStarted, DeploymentCompleted, DeploymentRolledBack | Y |
| productionize | control | ProductionArtifacts | C8 | ProductionArtifactsGenerated | Y |
| release | control | Release | C18 | ReleaseStarted, ReleaseCompleted, ReleaseFailed | Y |
| agent-run | data | AgentTask | C1 | AgentRunSucceeded, AgentRunFailed, ArtifactCreated | Y |
| send-email | data | EmailDelivery | C12 | EmailSent, EmailFailed | Y |
| send-message | data | EmailDelivery | C25 | MessageSent, MessageFailed | Y |
| setup-observability | both | ObservabilityStack | C36 | ObservabilityConfigured | Y |
| provision-monitoring | control | MonitoringStack | | MonitoringConfigured | Y |
| eval | control | EvalRun | C30 | EvalRunCompleted | Y |
| delivery-check | control | DeliveryCheckRun | C38 | DeliveryCheckCompleted, DeliveryCheckFailed | Y |
`;

interface SpecRow {
  name: string;
  plane: string;
  resource_type: string | undefined;
  c_number: string | undefined;
  events: string[];
  skill_action_planned: boolean;
}

function specRows(): SpecRow[] {
  return SPEC_TABLE.trim()
    .split("\n")
    .map((line) => line.split("|").map((c) => c.trim()))
    .map(([, name, plane, resource, cNumber, events, planned]) => ({
      name: name!,
      plane: plane!,
      resource_type: resource === "see part 2" ? undefined : resource,
      c_number: cNumber || undefined,
      events: events!
        .replace(/\(.*\)/, "")
        .split(",")
        .map((e) => e.trim())
        .filter(Boolean),
      skill_action_planned: planned === "Y",
    }));
}

test("the catalogue is the spec's capability table, row by row, in the spec's order", (t) => {
  const spec = specRows();
  t.is(spec.length, 24);
  t.deepEqual(
    CAPABILITIES.map((c) => c.name),
    spec.map((r) => r.name),
  );
  for (const [i, row] of spec.entries()) {
    const c = CAPABILITIES[i]!;
    t.is(c.plane as string, row.plane, row.name);
    if (row.resource_type) t.is(c.resource_type as string, row.resource_type, row.name);
    t.is(c.c_number ?? undefined, row.c_number, row.name);
    t.deepEqual([...c.events], row.events, row.name);
    t.is(c.skill_action_planned, row.skill_action_planned, row.name);
  }
});

test("GET /capabilities on each plane lists every declaration with where it is accepted and whether it is built", async (t) => {
  const { p, token } = t.context;
  for (const plane of PLANES) {
    const url = plane === "control" ? p.controlUrl : p.dataUrl;
    const r = await get(url, "/capabilities", plane === "data" ? { authorization: `Bearer ${token}` } : {});
    t.is(r.status, 200, plane);
    t.deepEqual(
      r.body.items,
      ALL_CAPABILITIES.map((c) => ({
        ...infoOf(c),
        accepted_here: acceptedOn(c, plane),
        implemented: c.built,
      })),
      plane,
    );
  }
});

test("the OpenAPI document of each plane has exactly the declarations accepted there, with their schema, example and answers", async (t) => {
  const { p, token } = t.context;
  for (const plane of PLANES) {
    const url = plane === "control" ? p.controlUrl : p.dataUrl;
    const doc = (
      await get(url, "/openapi.json", plane === "data" ? { authorization: `Bearer ${token}` } : {})
    ).body;
    const capabilityPaths = Object.keys(doc.paths).filter((k) => k.startsWith("/capabilities/"));
    t.deepEqual(
      capabilityPaths,
      ALL_CAPABILITIES.filter((c) => acceptedOn(c, plane)).map((c) => `/capabilities/${c.name}`),
      plane,
    );
    for (const c of ALL_CAPABILITIES.filter((d) => acceptedOn(d, plane))) {
      const op = doc.paths[`/capabilities/${c.name}`].post;
      const body = op.requestBody.content["application/json"];
      const schemaName = body.schema.$ref.split("/").pop();
      t.deepEqual(doc.components.schemas[schemaName], plainSchema(c), `${plane} ${c.name} schema`);
      t.deepEqual(body.example, c.example, `${plane} ${c.name} example`);
      t.is("202" in op.responses, c.long_running, `${plane} ${c.name} 202 iff long work`);
      t.true(op.summary.includes(c.resource_type), `${plane} ${c.name} resource type`);
      for (const e of c.events) t.true(op.summary.includes(e), `${plane} ${c.name} event ${e}`);
    }
  }
});

test("the CLI has a verb for every declaration but spec 1.3's HTTP-only four, on its plane, whose flags are its input fields and whose help names them", (t) => {
  t.deepEqual(
    ALL_CAPABILITIES.filter((c) => !VERBS.some((v) => v.capability === c.name)).map((c) => c.name),
    ["agent-run", "send-message", "setup-observability", "delivery-check"],
    "spec 1.3: the HTTP-only capabilities have no client verb",
  );
  for (const c of ALL_CAPABILITIES) {
    const verbs = VERBS.filter((v) => v.capability === c.name);
    const props = schemaOf(c).properties;
    for (const v of verbs) {
      const name = v.words.join(" ");
      t.is(v.plane, c.plane, `${name} plane`);
      t.is(v.path, `/capabilities/${c.name}`);
      const help = verbHelp(v);
      // constants fill a field with a fixed value; preferences go in the Prefer header
      for (const f of v.flags.filter(
        (x) =>
          x.field !== undefined &&
          x.kind !== FlagKind.constant &&
          x.kind !== FlagKind.preference &&
          x.kind !== FlagKind.preferenceValue,
      )) {
        t.true(Object.hasOwn(props, f.field!), `${name} --${f.name} fills a field of ${c.name}`);
        // a sensitive field is read from the environment, never from argv
        t.is(f.kind === FlagKind.env, props[f.field!]?.sensitive === true, `${name} --${f.name}`);
        t.true(help.includes(`-> ${f.field}`), `${name} help names ${f.field}`);
      }
      for (const pos of v.positionals) t.true(Object.hasOwn(props, pos.field), `${name} <${pos.name}>`);
      // every required field can be given: a flag, a positional, a fixed value or a default
      const given = new Set([
        ...v.flags.map((f) => f.field),
        ...v.positionals.map((x) => x.field),
        ...Object.keys(v.fixed),
        ...Object.keys(v.defaults),
      ]);
      for (const r of schemaOf(c).required ?? []) t.true(given.has(r), `${name} can send required ${r}`);
    }
  }
});

/** The example with its app (where it names one) set to `app`. */
function exampleFor(c: Capability, app: string): Record<string, unknown> {
  const input = structuredClone(c.example) as Record<string, unknown>;
  if ("app" in input) input.app = app;
  if (c.name === "initialize-app") input.name = `k${randomUUID().slice(0, 8)}`;
  return input;
}

test("the gateway routes every declaration as declared: wrong plane 403, schema 400, not built 501, built reaches its actor", async (t) => {
  const { p, token } = t.context;
  const ghost = `g${randomUUID().slice(0, 8)}`;
  for (const plane of PLANES) {
    const url = plane === "control" ? p.controlUrl : p.dataUrl;
    const auth: Record<string, string> =
      plane === "data" ? { authorization: `Bearer ${token}` } : controlAuth(p.controlUrl);
    for (const c of ALL_CAPABILITIES) {
      const what = `${plane} ${c.name}`;
      const r = await call(url, c.name, exampleFor(c, ghost), auth);
      if (!acceptedOn(c, plane)) {
        t.is(r.status, 403, what);
        t.is(r.body.error.code, "wrong_plane", what);
        continue;
      }
      // the schema of the declaration: each required field is named when missing
      const empty = await call(url, c.name, {}, auth);
      t.is(empty.body.error?.code, "invalid_input", what);
      t.deepEqual(
        empty.body.error.details.map((d: { path: string }) => d.path).sort(),
        (schemaOf(c).required ?? []).map((f) => `/${f}`).sort(),
        what,
      );
      if (!c.built) {
        t.is(r.status, 501, `${what}: ${r.text}`);
        t.true(r.body.error.message.includes(c.name), what);
        continue;
      }
      // built: the command reached the app's actor (or the app scope of the token stopped it)
      const expected =
        c.name === "initialize-app"
          ? [200, undefined]
          : c.name === "explain-failure"
            ? [404, "not_found"]
            : plane === "data"
              ? [403, "forbidden"]
              : c.name === "setup-observability"
                ? [502, "bad_gateway"] // its actor probed the example's endpoint, where nothing listens
                : c.name === "provision-monitoring"
                  ? [202, undefined] // app-less: its example (skip_deploy) writes the stack's files
                  : [404, "unknown_app"];
      t.deepEqual([r.status, r.body.error?.code], expected, `${what}: ${r.text}`);
    }
  }
});

test("inspect types: built ones reach the actor, the others answer 501 naming the type", async (t) => {
  const { p, app } = t.context;
  for (const [type, { built }] of Object.entries(INSPECT_TYPES)) {
    const r = await call(p.controlUrl, "inspect", { app, type });
    if (built) t.not(r.status, 501, `${type}: ${r.text}`);
    else {
      t.is(r.status, 501, type);
      t.true(r.body.error.message.includes(type), type);
    }
  }
});

/**
 * The paths a route pattern of the gateway matches, as templates (`{}` for a parameter) with a
 * concrete path to probe: optional groups both ways, alternations each way, a group or class of
 * characters one parameter (its literal prefix kept: `apr_x`).
 */
function expandRoute(re: RegExp): { template: string; sample: string }[] {
  const src = re.source.replace(/^\^/, "").replace(/\$$/, "");
  let i = 0;
  type Alt = { template: string; sample: string };
  const join = (a: Alt[], b: Alt[]): Alt[] =>
    a.flatMap((x) => b.map((y) => ({ template: x.template + y.template, sample: x.sample + y.sample })));
  const seq = (): Alt[] => {
    let alts: Alt[] = [];
    let cur: Alt[] = [{ template: "", sample: "" }];
    while (i < src.length && src[i] !== ")") {
      const c = src[i]!;
      if (c === "|") {
        alts = alts.concat(cur);
        cur = [{ template: "", sample: "" }];
        i++;
      } else if (c === "(") {
        i++;
        if (src.startsWith("?:", i)) i += 2;
        const start = i;
        let inner = seq();
        const body = src.slice(start, i);
        i++; // ')'
        if (body.includes("[") && !body.includes("(") && !body.includes("|")) {
          const prefix = body.slice(0, body.indexOf("[")).replace(/\\/g, "");
          inner = [{ template: "{}", sample: `${prefix}x` }];
        }
        if (src[i] === "?") {
          i++;
          inner = [...inner, { template: "", sample: "" }];
        }
        cur = join(cur, inner);
      } else if (c === "[") {
        i = src.indexOf("]", i) + 1;
        const q = /^(\+|\*|\{\d+,?\d*\})/.exec(src.slice(i));
        if (q) i += q[0].length;
        cur = join(cur, [{ template: "{}", sample: "x" }]);
      } else if (c === "\\") {
        cur = join(cur, [{ template: src[i + 1]!, sample: src[i + 1]! }]);
        i += 2;
      } else {
        cur = join(cur, [{ template: c, sample: c }]);
        i++;
      }
    }
    return alts.concat(cur);
  };
  return seq();
}

test("every route of each plane's route table is in its OpenAPI document, with each method it allows", async (t) => {
  const { p, token } = t.context;
  const { READ_ROUTES } = await import("../../gateway/reads.js");
  const { APP_EVENT_ROUTE } = await import("../../gateway/app-events.js");
  const { CONNECT_ROUTE } = await import("../../gateway/connect.js");
  const { POLICY_PATH } = await import("../../gateway/policy.js");
  const { GROUP_PATH } = await import("../../gateway/identity-groups.js");
  const { ROUTES: IDENTITY_ROUTES } = await import("../../gateway/identity.js");
  const { PATHS: INCIDENT_PATHS } = await import("../../gateway/incidents.js");
  const { STATUS_PAGE_PATH } = await import("../../gateway/status-page.js");
  const { REGISTRY_PATH, MCP_ENDPOINT } = await import("../../gateway/mcp.js");
  // the router's table (gateway/server.ts), but the capabilities (their own test above)
  const patterns: RegExp[] = [
    ...READ_ROUTES,
    APP_EVENT_ROUTE,
    CONNECT_ROUTE,
    POLICY_PATH,
    GROUP_PATH,
    ...IDENTITY_ROUTES.map((r) => r.path),
    ...Object.keys(INCIDENT_PATHS).map((k) => new RegExp(`^${k.replace(/\//g, "\\/")}$`)),
    STATUS_PAGE_PATH,
    REGISTRY_PATH,
    new RegExp(`^${MCP_ENDPOINT.replace(/\//g, "\\/")}$`),
  ];
  const routes = new Map<string, string>();
  for (const re of patterns)
    for (const r of expandRoute(re))
      routes.set(r.template, r.sample.replace(/^\/connect\/x\//, "/connect/gmail/"));
  t.true(routes.size >= 40, `${routes.size} routes walked`);
  for (const plane of PLANES) {
    const url = plane === "control" ? p.controlUrl : p.dataUrl;
    const auth: Record<string, string> =
      plane === "data" ? { authorization: `Bearer ${token}` } : controlAuth(p.controlUrl);
    const doc = (await get(url, "/openapi.json", auth)).body;
    const documented = new Map<string, Set<string>>();
    for (const [k, v] of Object.entries(doc.paths as Record<string, object>))
      documented.set(k.replace(/\{[^}]+\}/g, "{}"), new Set(Object.keys(v)));
    const missing: string[] = [];
    for (const [template, sample] of routes) {
      // an unlikely method: a route answers 405 with the methods it allows (or refuses the caller)
      const r = await fetch(`${url}${sample}`, {
        method: "PATCH",
        headers: { ...auth, "x-platform-actor-type": "builder", "x-platform-actor-id": "t" },
      });
      const body = (await r.json().catch(() => ({}))) as { error?: { code?: string; message?: string } };
      if (r.status === 404 && /^no route/.test(body.error?.message ?? "")) continue; // not this plane's
      if (body.error?.code === "wrong_plane") continue;
      const allow = r.status === 405 ? (r.headers.get("allow") ?? "") : "";
      const first = allow.split(",")[0]?.trim();
      if (first) {
        // the method checked before the plane: one it allows says whether this plane serves it
        const again = await fetch(`${url}${sample}`, {
          method: first,
          headers: { ...auth, "x-platform-actor-type": "builder", "x-platform-actor-id": "t" },
        });
        const b = (await again.json().catch(() => ({}))) as { error?: { code?: string } };
        if (b.error?.code === "wrong_plane") continue;
      }
      const methods = documented.get(template);
      if (!methods) {
        missing.push(`${template} (answered ${r.status} ${body.error?.code})`);
        continue;
      }
      for (const m of allow.split(",").map((s) => s.trim().toLowerCase()))
        if (m && m !== "head" && !methods.has(m)) missing.push(`${m.toUpperCase()} ${template}`);
    }
    t.deepEqual(missing, [], `${plane} plane: routes served and not documented`);
  }
});
