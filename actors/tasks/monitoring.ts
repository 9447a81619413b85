import { createHash } from "node:crypto";
import { relative, resolve } from "node:path";
import {
  componentsOf,
  ContainerRuntime,
  type MonitoringPlan,
  makeStackFolder,
  mailsAlerts,
  MonitoringSettingError,
  platformTargets,
  readFileNoFollow,
  removeFile,
  SECRET_FILES,
  type SecretName,
  STACK_FILES,
  StackPathError,
  stackFiles,
  writeIfChanged,
} from "../../effects/mod.js";
import { NETWORKS, PLATFORM_APP, type Sealed } from "../../proto/mod.js";
import { type MonitoringInput, monitoringPlan, operatorToken } from "./monitoring-plan.js";
import { HEALTH_TIMEOUT_MS, pinImages, runnable, type Started, startStack } from "./monitoring-deploy.js";
import { configureShipping, pushUrlSetting } from "./monitoring-shipping.js";
import { exposeUi, proxyPresent, uiPassword } from "./monitoring-ui.js";
import type { TaskContext, TaskResult, TaskSpec } from "./types.js";

/**
 * provision-monitoring's long work (docs/monitoring.md): resolves the plan against this node's
 * settings, writes the stack's files into `<workspace root>/_platform/<dir>` without following
 * links (effects/monitoring/write.ts), its secrets into `secrets/` with mode 0600, removes the
 * files of an earlier call it no longer generates, and ends MonitoringConfigured with what
 * changed. A second call with the same input and settings writes nothing (`unchanged: true`).
 */

export interface MonitoringTaskInput {
  /** The call, without its sealed fields. */
  input: MonitoringInput;
  project: string;
  /** The control plane as the stack reaches it (the containers' address when the node has one). */
  control_url: string | null;
  smtp_password: { sealed: Sealed; aad: string } | null;
  app_db_password: { sealed: Sealed; aad: string } | null;
  /** The call gave tracing_otlp_b64 (sealed; never opened: nothing uses it). */
  tracing_given: boolean;
}

/** Mode of the configuration files (no secret in them) and of the secret files. */
const CONFIG_MODE = 0o640;
const SECRET_MODE = 0o600;

/** Why Loki is not started, on the resource (docs/monitoring.md#loki). */
export const LOKI_NOT_STARTED =
  "not started: its configuration and the log shipping configuration are written; Loki runs only when SLIPWAY_LOKI_BIN names a Grafana Loki binary (Debian's loki package is another program); the platform ships its log lines to SLIPWAY_LOKI_PUSH_URL when set (log_shipping)";

/** Where the UI is, on the resource, when no proxy of the platform runs. */
const UI_NO_PROXY =
  "not behind the platform's proxy: no proxy of the platform announces itself, so public_host is only Prometheus's and Alertmanager's external URL";

/** `KEY=VALUE` lines of an env file (blank lines and # comments left out). */
function envEntries(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#") && /^[A-Za-z_][A-Za-z0-9_]*=/.test(l));
}

/** The parts of the input that cannot take effect here, and why (also in docs/inputs.md). */
function notApplied(i: MonitoringInput, sealedTracing: boolean): Record<string, string> {
  const deploy = i.skip_deploy !== true;
  const out: Record<string, string> = {};
  if (sealedTracing)
    out.tracing_otlp_b64 =
      "not used: no component of the stack exports traces; the value is neither stored nor written";
  if (i.context !== undefined)
    out.context = "not used: the stack's images are built from Debian's binaries, not from a build context";
  if (i.health_timeout_ms !== undefined && !deploy)
    out.health_timeout_ms = "not used: the stack is not started (skip_deploy)";
  if (i.regenerate_secrets === true && !deploy)
    out.regenerate_secrets =
      "nothing rotated: the UI's password is made when the stack is started (skip_deploy)";
  if (i.ui_port !== undefined && !deploy) out.ui_port = "written to the compose file only (skip_deploy)";
  return out;
}

async function writeAll(
  t: TaskContext,
  folder: string,
  files: Record<string, string>,
  secrets: Partial<Record<SecretName, string>>,
): Promise<string[]> {
  const changed: string[] = [];
  for (const [rel, text] of Object.entries(files))
    if (await writeIfChanged(folder, rel, text, CONFIG_MODE)) changed.push(rel);
  for (const [name, value] of Object.entries(secrets))
    if (await writeIfChanged(folder, `secrets/${name}`, value, SECRET_MODE)) changed.push(`secrets/${name}`);
  // what an earlier call generated and this one does not (a health probe, a database no more)
  for (const rel of STACK_FILES)
    if (!(rel in files) && (await removeFile(folder, rel))) changed.push(`-${rel}`);
  for (const name of SECRET_FILES)
    if (!(name in secrets) && (await removeFile(folder, `secrets/${name}`))) changed.push(`-secrets/${name}`);
  if (changed.length > 0) await t.log(`written: ${changed.join(", ")}`);
  else await t.log("every file already holds what this call generates: nothing written");
  return changed;
}

/** A hash of the whole stack, secrets included (only their hash leaves the node). */
function stackHash(files: Record<string, string>, secrets: Partial<Record<SecretName, string>>): string {
  const h = createHash("sha256");
  for (const [k, v] of Object.entries(files).sort()) h.update(`${k}\0${v}\0`);
  // the UI's password is the proxy's, no component reads it: a new one restarts nothing
  for (const [k, v] of Object.entries(secrets).sort())
    if (k !== "ui_password") h.update(`secret:${k}\0${v}\0`);
  return h.digest("hex");
}

/** How the control plane is scraped, on the resource. */
function controlScrape(scraped: boolean, token: boolean): string {
  return scraped
    ? token
      ? "with the operator's token (secrets/control_token)"
      : "without a token: this node has neither SLIPWAY_CONTROL_TOKEN nor a readable control.token, so the control plane will answer 401"
    : "not scraped: the control plane listens on loopback, out of the stack's containers' reach; the platform is scraped on its metrics ports (SLIPWAY_METRICS_HOST and SLIPWAY_METRICS_PORT, SLIPWAY_MONITORING_TARGETS)";
}

async function run(t: TaskContext, o: MonitoringTaskInput): Promise<TaskResult> {
  const i = o.input;
  const root = resolve(t.workspaceRoot, PLATFORM_APP);
  await t.progress({ phase: "generate" });
  pushUrlSetting(process.env); // a malformed setting fails the call before anything is written
  const secrets: Partial<Record<SecretName, string>> = {};
  if (o.smtp_password)
    secrets.smtp_password = t.vault.openString(o.smtp_password.sealed, o.smtp_password.aad);
  if (o.app_db_password)
    secrets.app_db_password = t.vault.openString(o.app_db_password.sealed, o.app_db_password.aad);
  const token = o.control_url ? await operatorToken(process.env) : null;
  if (token) secrets.control_token = token;
  const targets = platformTargets(o.control_url ?? undefined, token !== null, process.env);
  if (targets.metricsToken) secrets.metrics_token = targets.metricsToken;
  const folder = await makeStackFolder(root, i.dir);
  let envFile: string | null = null;
  let env: string[] = [];
  if (i.env_file !== undefined) {
    const text = await readFileNoFollow(root, i.env_file);
    if (text === undefined) throw new StackPathError(i.env_file, "is not in the platform's folder");
    envFile = relative(folder, resolve(root, i.env_file));
    env = envEntries(text);
  }
  const deploy = i.skip_deploy !== true;
  // the UI behind the platform's proxy: Prometheus joins the proxy's network, its password is made
  const proxied = deploy && (await proxyPresent(t.bus));
  const proxyNetwork = proxied ? (i.proxy_network ?? NETWORKS.proxy) : undefined;
  let rotated = false;
  if (proxied) {
    const ui = await uiPassword(t, o.project, i.regenerate_secrets === true);
    secrets.ui_password = ui.password;
    rotated = ui.rotated;
  }
  const base: MonitoringPlan = monitoringPlan({
    input: proxyNetwork ? { ...i, proxy_network: proxyNetwork } : i,
    project: o.project,
    targets,
    has_smtp_password: o.smtp_password !== null,
    has_app_db_password: o.app_db_password !== null,
    env_file: envFile,
    env: process.env,
  });
  const { run: components, loki } = runnable(componentsOf(base));
  const rt = deploy ? ContainerRuntime.fromEnv() : undefined;
  if (rt) await t.progress({ phase: "images" });
  // the images first: the compose file names them by id
  const plan: MonitoringPlan = { ...base, images: rt ? await pinImages(t, rt, components) : {} };
  const files = stackFiles(plan);
  const changed = await writeAll(t, folder, files, secrets);
  const hash = stackHash(files, secrets);
  let started: Started | undefined;
  if (rt) {
    await t.progress({ phase: "start" });
    const timeout = i.health_timeout_ms ?? HEALTH_TIMEOUT_MS;
    if (proxyNetwork) await rt.networks().ensure(proxyNetwork, "proxy");
    started = await startStack(t, rt, { folder, plan, components, configHash: hash, env }, timeout);
  }
  const ui =
    rt && proxyNetwork && secrets.ui_password
      ? await exposeUi(t, rt, {
          project: o.project,
          host: plan.public_host,
          network: proxyNetwork,
          password: secrets.ui_password,
          rotated,
        })
      : UI_NO_PROXY;
  // where the platform's log lines go: the stack's Loki, else SLIPWAY_LOKI_PUSH_URL (the shipper follows)
  const shipping = await configureShipping(t, {
    project: o.project,
    log_scope_regex: i.log_scope_regex ?? null,
    loki_address: loki === null ? (started?.state.addresses.loki ?? null) : null,
  });
  const unchanged =
    !shipping.changed &&
    changed.length === 0 &&
    (started?.state.started.length ?? 0) === 0 &&
    (typeof ui === "string" || ui.route_written === false);
  const fields = {
    phase: "done",
    files: Object.keys(files),
    secret_files: Object.keys(secrets).map((s) => `secrets/${s}`),
    changed,
    unchanged,
    config_hash: hash,
    components,
    loki: loki ? LOKI_NOT_STARTED : "started",
    log_shipping: shipping.fields,
    deployed: started !== undefined,
    images: plan.images,
    network: plan.network,
    containers: started
      ? {
          started: started.state.started,
          kept: started.state.kept,
          removed: started.state.removed,
          addresses: started.state.addresses,
        }
      : null,
    ready_ms: started?.ready_ms ?? null,
    health: started?.health ?? null,
    ui,
    targets: {
      control: targets.control?.address ?? null,
      processes: targets.processes.map((p) => p.address),
      app: plan.health_url,
      app_db: plan.app_db ? `${plan.app_db.host}:${plan.app_db.port}` : null,
    },
    control_scrape: controlScrape(targets.control !== null, token !== null),
    alerts_mailed: mailsAlerts(plan),
    not_applied: notApplied(i, o.tracing_given),
    error: null,
  };
  await t.log(
    unchanged
      ? `stack ${o.project} in ${i.dir} unchanged (config ${hash.slice(0, 12)})`
      : `stack ${o.project} in ${i.dir}: ${changed.length} file(s) changed, ${started ? `${started.state.started.length} container(s) started, ${started.state.kept.length} kept` : "not started (skip_deploy)"} (config ${hash.slice(0, 12)})`,
  );
  return {
    status: "succeeded",
    fields,
    data: {
      dir: i.dir,
      project: o.project,
      files: fields.files,
      changed,
      unchanged,
      config_hash: hash,
      deployed: fields.deployed,
      alerts_mailed: fields.alerts_mailed,
    },
  };
}

export function monitoringTask(o: MonitoringTaskInput): TaskSpec {
  return {
    onSuccess: "MonitoringConfigured",
    async run(t) {
      try {
        return await run(t, o);
      } catch (e) {
        const known = e instanceof StackPathError || e instanceof MonitoringSettingError;
        const error = known
          ? (e as Error).message
          : `the stack could not be provisioned: ${(e as Error).message}`;
        await t.log(`failed: ${error}`);
        return { status: "failed", fields: { phase: "failed", error } };
      }
    },
  };
}
