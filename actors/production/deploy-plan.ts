import Type, { type Static } from "typebox";
import {
  check,
  checkNetworkName,
  DEFAULT_SERVICE,
  limitSettings,
  type ErrorDetail,
  type HandlerInput,
  PlatformError,
  type Resource,
} from "../../proto/mod.js";
import type { HandlerContext } from "../context.js";
import { acmeDirectory, isUnpublished, PROD_ENV_FILE } from "./artifacts.js";
import { type ComposeService, isPinned, parseCompose } from "./compose.js";
import { driftOf, type ExpectedContainer } from "./drift.js";

/**
 * What a deploy decides in its turn (docs/deploy.md): the service to roll and
 * how, from compose.prod.yaml and the last productionize. It carries no
 * secret: env files are read and vault secrets opened by the task, at the
 * moment it starts the container. A queued deploy keeps its plan in the
 * partition's record until its turn.
 */
export const DeployPlanSchema = Type.Object({
  service: Type.String(),
  /** The pinned image reference. */
  image: Type.String(),
  compose_file: Type.String(),
  /** Workspace-relative env files, read when the container starts. */
  env_files: Type.Array(Type.String()),
  /** The service's `environment` (from the committed compose file: no secrets there). */
  environment: Type.Record(Type.String(), Type.String()),
  labels: Type.Record(Type.String(), Type.String()),
  command: Type.Optional(Type.Array(Type.String())),
  readiness_path: Type.String(),
  /** The host whose route sends traffic to this service (web only), and its TLS. */
  route: Type.Union([
    Type.Object({
      host: Type.String(),
      acme_directory: Type.Optional(Type.String()),
      mtls: Type.Optional(Type.Object({ host: Type.String(), ca_secret: Type.String() })),
    }),
    Type.Null(),
  ]),
  pull: Type.Boolean(),
  drain_seconds: Type.Integer(),
  timeout_seconds: Type.Integer(),
  proxy_net: Type.Optional(Type.String()),
  context: Type.Optional(Type.String()),
  /** The container's limits when its compose service asks (compose `mem_limit`, `pids_limit`). */
  limits: Type.Optional(Type.Object({ memory_mb: Type.Integer(), pids: Type.Integer() })),
  /** Where the container reaches the data plane (its `SLIPWAY_DATA_URL` unless its env files say). */
  data_url: Type.Optional(Type.String()),
});
export type DeployPlan = Static<typeof DeployPlanSchema>;

/** DESIGN §8 defaults. */
export const DEPLOY_DEFAULTS = { drain_seconds: 30, timeout_seconds: 60, readiness_path: "/health" } as const;
export const DEFAULT_COMPOSE_FILE = "compose.prod.yaml";

export function readPlan(plan: Record<string, unknown>): DeployPlan {
  return check(DeployPlanSchema, plan, "queued deploy plan");
}

const bad = (
  path: string,
  message: string,
  code: "invalid_input" | "precondition_failed" = "invalid_input",
) => new PlatformError(code, `${path.slice(1)}: ${message}`, { details: [{ path, message }] });

/** The latest ProductionArtifacts of the app (productionize's inputs), if any. */
async function lastArtifacts(ctx: HandlerContext): Promise<Resource | undefined> {
  const all = await ctx.state.listResources("ProductionArtifacts");
  return all.sort((a, b) => (a.updated_at < b.updated_at ? 1 : -1))[0];
}

/** A workspace-relative path a call names: relative, and never leaving the workspace (400 otherwise). */
function insideWorkspace(field: string, path: string | undefined): void {
  if (path === undefined) return;
  if (path.startsWith("/") || path.split("/").some((seg) => seg === ".."))
    throw bad(`/${field}`, `${JSON.stringify(path.slice(0, 120))} must be a path inside the app's workspace`);
}

/** Turns a deploy call into a plan, or refuses it (400 bad input, 422 precondition, 422 image_not_pinned). */
export async function planDeploy(
  ctx: HandlerContext,
  input: HandlerInput<"deploy">,
  workspace: { read(path: string): Promise<string | undefined> },
  appHost: string | undefined,
  opts: { requirePinned?: boolean } = {},
): Promise<DeployPlan> {
  insideWorkspace("compose_file", input.compose_file);
  insideWorkspace("env_file", input.env_file);
  insideWorkspace("context", input.context);
  if (input.proxy_net !== undefined) checkNetworkName(input.proxy_net, "proxy_net");
  const composeFile = input.compose_file ?? DEFAULT_COMPOSE_FILE;
  const text = await workspace.read(composeFile);
  if (text === undefined)
    throw bad(
      "/compose_file",
      `${composeFile} is not in the app's workspace; run productionize first (slipway productionize --app ${ctx.app} --host <name>)`,
      "precondition_failed",
    );
  const compose = parseCompose(text, composeFile);
  const name = input.service ?? DEFAULT_SERVICE;
  const svc: ComposeService | undefined = compose.services[name];
  if (!svc)
    throw bad(
      "/service",
      `no service ${JSON.stringify(name)} in ${composeFile} (its services: ${Object.keys(compose.services).join(", ")})`,
    );
  if (!svc.image)
    throw bad("/service", `service ${name} of ${composeFile} has no image`, "precondition_failed");
  if (opts.requirePinned !== false && isUnpublished(svc.image))
    throw bad(
      `/services/${name}/image`,
      `${ctx.app} has no release yet: ${composeFile} names ${svc.image}, the image the first release builds and pins; release first (slipway release --app ${ctx.app}), then deploy rolls what it pinned`,
      "precondition_failed",
    );
  if (opts.requirePinned !== false && !isPinned(svc.image))
    throw new PlatformError(
      "image_not_pinned",
      `service ${name} of ${composeFile} runs ${svc.image}, which is not pinned by digest; release pins it (or write repo@sha256:<digest>)`,
      { details: [{ path: `/services/${name}/image`, message: "must be pinned by digest" }] },
    );
  const envFiles = input.env_file ? [input.env_file] : svc.env_file;
  for (const f of svc.env_file) insideWorkspace("env_file", f);
  for (const f of envFiles)
    if ((await workspace.read(f)) === undefined)
      throw bad(
        "/env_file",
        `${f} is not in the app's workspace${f === PROD_ENV_FILE ? " (copy .env.prod.example to .env.prod and fill it)" : ""}`,
        "precondition_failed",
      );
  const artifacts = await lastArtifacts(ctx);
  let route: DeployPlan["route"] = null;
  if (name === DEFAULT_SERVICE) {
    route = { host: routeHost(ctx, name, composeFile, svc, appHost) };
    const resolver = typeof artifacts?.cert_resolver === "string" ? artifacts.cert_resolver : undefined;
    if (resolver) route.acme_directory = acmeDirectory(resolver, process.env);
    const mtlsHost = typeof artifacts?.mcp_mtls_host === "string" ? artifacts.mcp_mtls_host : undefined;
    if (mtlsHost) {
      const named = artifacts?.mcp_mtls_tls_options;
      const secret = typeof named === "string" ? named : "MCP_CLIENT_CA";
      // a vault secret name only (SECRET_NAME_PATTERN): never a KV key of anything else (security #15)
      if (!/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(secret))
        throw bad(
          "/service",
          `productionize's mcp_mtls_tls_options is not a vault secret name: run productionize again with one (e.g. MCP_CLIENT_CA)`,
        );
      if (!(await ctx.state.getVaultEntry(secret)))
        throw bad(
          "/service",
          `the mTLS host ${mtlsHost} needs its client CA (PEM) in the vault secret ${secret}: slipway secrets set --app ${ctx.app} --name ${secret} --from-file ca.pem`,
          "precondition_failed",
        );
      route.mtls = { host: mtlsHost, ca_secret: secret };
    }
  }
  const limits = containerLimits(name, composeFile, svc);
  const dataUrl = ctx.platformUrls.containers?.data;
  return {
    service: name,
    image: svc.image,
    compose_file: composeFile,
    env_files: envFiles,
    environment: svc.environment,
    labels: svc.labels,
    ...(svc.command ? { command: svc.command } : {}),
    readiness_path: svc.labels["slipway.readiness-path"] ?? DEPLOY_DEFAULTS.readiness_path,
    route,
    pull: input.pull ?? false,
    drain_seconds: input.drain_seconds ?? DEPLOY_DEFAULTS.drain_seconds,
    timeout_seconds: input.timeout_seconds ?? DEPLOY_DEFAULTS.timeout_seconds,
    ...(input.proxy_net ? { proxy_net: input.proxy_net } : {}),
    ...(input.context ? { context: input.context } : {}),
    ...(limits ? { limits } : {}),
    ...(dataUrl ? { data_url: dataUrl } : {}),
  };
}

/**
 * The host of the web service's route: the platform's own record of the app (productionize's
 * host), never the compose file's `slipway.host` label, which the app can edit; a label naming
 * another host is refused (422), and a host another app holds is 409 naming it (its route, when
 * the call read `host-owners`).
 */
function routeHost(
  ctx: HandlerContext,
  name: string,
  file: string,
  svc: ComposeService,
  appHost: string | undefined,
): string {
  const host = appHost?.toLowerCase();
  if (!host)
    throw bad(
      "/service",
      `${ctx.app} has no production host: run productionize first (slipway productionize --app ${ctx.app} --host <name>)`,
      "precondition_failed",
    );
  const label = svc.labels["slipway.host"];
  if (label !== undefined && label.toLowerCase() !== host)
    throw bad(
      `/services/${name}/labels/slipway.host`,
      `${file} labels service ${name} with the host ${JSON.stringify(label.slice(0, 120))}, but ${ctx.app} is productionized for ${host}; the route's host is the platform's record (change it with slipway productionize --replace-host, which rewrites the label)`,
      "precondition_failed",
    );
  const owner = ctx.facts.hostOwners?.[host];
  if (owner !== undefined)
    throw new PlatformError("conflict", `${host} belongs to the app ${owner}; a host serves one app`, {
      details: [{ path: "/host", message: `belongs to the app ${owner}` }],
    });
  return host;
}

/** The service's own limits (compose `mem_limit`, `pids_limit`), refused past the operator's ceiling. */
function containerLimits(name: string, file: string, svc: ComposeService): DeployPlan["limits"] | undefined {
  if (svc.mem_limit_mb === undefined && svc.pids_limit === undefined) return undefined;
  const { production, max } = limitSettings();
  const memory_mb = svc.mem_limit_mb ?? production.memoryMb;
  const pids = svc.pids_limit ?? production.pids;
  if (memory_mb > max.memoryMb)
    throw bad(
      "/service",
      `service ${name} of ${file} asks for mem_limit ${memory_mb} MiB; this platform allows at most ${max.memoryMb} MiB (SLIPWAY_APP_MEMORY_MAX_MB)`,
    );
  if (pids > max.pids)
    throw bad(
      "/service",
      `service ${name} of ${file} asks for pids_limit ${pids}; this platform allows at most ${max.pids} (SLIPWAY_APP_PIDS_MAX)`,
    );
  return { memory_mb, pids };
}

/** The resource types whose rolls leave containers: a Deployment, a Release (its deploy phase). */
const ROLLERS = ["Deployment", "Release"] as const;

/** When a record's `containers` were set (a Deployment before `containers_at`: its last update). */
function containersAt(d: Resource): string {
  return typeof d.containers_at === "string" ? d.containers_at : d.updated_at;
}

/**
 * The containers the app's last rolls left running: for each service, those
 * of the Deployment or Release that set them last (`containers`,
 * `containers_at`: a release whose verify failed records the previous
 * version it put back). The Deployment of each service that succeeded last
 * (`last`), and the rolls that ended without success (their containers, when
 * not expected, are leftovers).
 */
export async function expectedContainers(ctx: HandlerContext): Promise<{
  expected: ExpectedContainer[];
  failed: Set<string>;
  superseded: Set<string>;
  last: Map<string, Resource>;
}> {
  // this turn's own writes first (a roll that starts in the turn that ended the one before it)
  const written = new Map<string, Resource>();
  for (const r of ctx.outbox.resources)
    if (r.doc && (ROLLERS as readonly string[]).includes(r.doc.type)) written.set(r.doc.id, r.doc);
  const all: Resource[] = [];
  for (const type of ROLLERS)
    for (const d of await ctx.state.listResources(type)) all.push(written.get(d.id) ?? d);
  all.sort((a, b) => (a.created_at < b.created_at ? -1 : 1));
  const last = new Map<string, Resource>();
  const set = new Map<string, Resource>();
  const failed = new Set<string>();
  for (const d of all) {
    const service = typeof d.service === "string" ? d.service : undefined;
    if (d.type === "Deployment" && d.status === "succeeded" && service) last.set(service, d);
    if (d.status !== "succeeded" && d.status !== "running" && d.status !== "pending") failed.add(d.id);
    if (service && Array.isArray(d.containers)) {
      const prev = set.get(service);
      if (!prev || containersAt(prev) <= containersAt(d)) set.set(service, d);
    }
  }
  const expected: ExpectedContainer[] = [];
  for (const d of set.values()) for (const c of d.containers as ExpectedContainer[]) expected.push(c);
  const current = new Set([...set.values()].map((d) => d.id));
  const superseded = new Set(
    all
      .filter((d) => d.status === "succeeded" && Array.isArray(d.containers) && !current.has(d.id))
      .map((d) => d.id),
  );
  return { expected, failed, superseded, last };
}

/**
 * Extra containers that are leftovers, not drift (removed before a roll): those of rolls that did
 * not succeed, and on apps hosts those of an earlier roll that a later one replaced while their
 * host did not answer (docs/infra.md, "Apps hosts").
 */
export function leftovers<C extends { id: string; deployment: string | undefined; engine?: string }>(
  actual: readonly C[],
  failed: ReadonlySet<string>,
  expected: readonly ExpectedContainer[],
  superseded: ReadonlySet<string> = new Set(),
): C[] {
  return actual.filter(
    (c) =>
      c.deployment !== undefined &&
      (failed.has(c.deployment) || (c.engine !== undefined && superseded.has(c.deployment))) &&
      !expected.some((e) => e.id === c.id),
  );
}

/**
 * The drift gate of a call that rolls now (deploy, release): the engine's production containers
 * (facts) against what the app's last rolls left; throws `409 drift_detected` naming each
 * difference. What the roll needs of it afterwards.
 */
export async function driftGate(ctx: HandlerContext): Promise<{
  expected: ExpectedContainer[];
  failed: Set<string>;
  superseded: Set<string>;
  last: Map<string, Resource>;
}> {
  const found = await expectedContainers(ctx);
  const actual = ctx.facts.production ?? [];
  const gone = new Set(leftovers(actual, found.failed, found.expected, found.superseded).map((c) => c.id));
  const drift = driftOf(
    found.expected,
    actual.filter((c) => !gone.has(c.id)),
    ctx.facts.productionUnreachable ?? [],
  );
  if (drift.length > 0) throw driftError(ctx.app, drift);
  return found;
}

/** Details of drift, as the 409's body carries them. */
export function driftError(app: string, details: ErrorDetail[]): PlatformError {
  return new PlatformError(
    "drift_detected",
    `the containers of ${app} are not what its last deployment left (${details.length} difference${details.length === 1 ? "" : "s"}); nothing was changed. Put them back (or remove the extra ones) and deploy again`,
    { details },
  );
}
