/**
 * `infra apply` (DESIGN §12, docs/infra.md): makes each host run what `plan` says it wants, in an
 * order that keeps the cluster whole: the NATS members one at a time, each waited for until it is
 * current with the cluster (once a majority of members runs), then the nodes, the control and
 * data gateways and the proxies, host by host; then what a host no longer wants is removed. The
 * first host a step fails on is tainted in the state and apply stops there (the hosts after it
 * are untouched). A tainted host stops apply before anything is done: fix the cause, `infra
 * untaint <host>`, apply again (what is not running is replaced). Before the node phase, the
 * environment's `apps` engine key is authorized on every `apps` host (infra/apps-key.ts): the
 * nodes reach those hosts' engines with it. CI-only: the CLI refuses it outside CI, and so does
 * this function.
 */
import { ContainerRuntime } from "../effects/mod.js";
import {
  ApplyStepError,
  ensureImage,
  type ImageSource,
  makeContainer,
  removeContainer,
  waitNatsCurrent,
  waitStarted,
} from "./apply-host.js";
import { type AuthorizeChange, authorizeAppsKey, authorizedKeysFile } from "./apps-key.js";
import { openPinned } from "./bootstrap.js";
import { type InfraFile, type InfraHost, hostsWithRole } from "./config.js";
import { type ContainerRole, type WantedContainer, wantedOnHost } from "./containers.js";
import { outputsOf } from "./layout.js";
import { type Bootstrapped, appsEngineRefusal, failedToLoad, loadBootstrapped } from "./loaded.js";
import { errorOutcome, type InfraContext, type InfraOutcome, resultOutcome } from "./outcome.js";
import { diffHost, listEnvContainers, type PlannedChange } from "./plan.js";
import { SshError, type SshSession } from "./ssh.js";
import { writeState } from "./state.js";

/** The order of apply's phases: NATS first, the proxies last. */
const PHASES: readonly ContainerRole[] = ["nats", "node", "control", "data", "proxy"];

/** What apply did to one container. */
export interface ContainerStep {
  readonly host: string;
  readonly container: string;
  readonly role: string;
  readonly action: PlannedChange["action"];
  readonly reason: string;
  readonly ms?: number;
}

/** The `apps` engine key written into an `apps` host's authorized keys file. */
export interface AuthorizeStep {
  readonly host: string;
  readonly role: "apps";
  readonly action: "authorize";
  /** The authorized keys file, as the infrastructure file names it. */
  readonly file: string;
  readonly change: Exclude<AuthorizeChange, "kept">;
  readonly reason: string;
  readonly ms: number;
}

export type AppliedStep = ContainerStep | AuthorizeStep;

/** What the phases share: the sessions, the steps done, the host being worked on. */
interface Run {
  readonly env: string;
  readonly steps: AppliedStep[];
  session(h: InfraHost): Promise<SshSession>;
  say(host: string, line: string): void;
  enter(h: InfraHost): void;
}

/** The step before the node phase: the `apps` engine key authorized on every `apps` host. */
async function authorizeAppsHosts(run: Run, file: InfraFile, publicKey: string | undefined): Promise<void> {
  for (const h of hostsWithRole(file, "apps")) {
    // without a key there is no apps host (apply refused it before anything was done)
    if (publicKey === undefined) return;
    run.enter(h);
    const path = authorizedKeysFile(h);
    const t0 = Date.now();
    run.say(h.name, `authorize the apps engine key in ${path}`);
    const change = await authorizeAppsKey(await run.session(h), h, run.env, publicKey);
    const reason = `apps engine key ${change === "kept" ? "already there" : change} in ${path}`;
    run.say(h.name, reason);
    if (change !== "kept")
      run.steps.push({
        host: h.name,
        role: "apps",
        action: "authorize",
        file: path,
        change,
        reason,
        ms: Date.now() - t0,
      });
  }
}

/** The operator's engine as an image source (a bare `sha256:` image id is loaded from there). */
function localImageSource(env: InfraContext["env"]): ImageSource {
  return {
    async save(image) {
      const rt = ContainerRuntime.fromEnv(env as NodeJS.ProcessEnv);
      try {
        await rt.require();
      } catch {
        return undefined;
      }
      const d = await rt.dockerode();
      try {
        await d.getImage(image).inspect();
      } catch {
        return undefined;
      }
      return (await d.getImage(image).get()) as NodeJS.ReadableStream;
    },
  };
}

/** Whether the CI environment variable says this runs in CI (spec 1.3: apply is CI-only). */
export function inCi(env: InfraContext["env"]): boolean {
  const ci = env.CI?.trim().toLowerCase();
  return ci !== undefined && ci !== "" && ci !== "false" && ci !== "0";
}

/**
 * Refusals before anything is done: a tainted host, a host never bootstrapped, secrets without
 * the `apps` engine key.
 */
function preflight(got: Bootstrapped): InfraOutcome | undefined {
  const { file, state } = got;
  const tainted = file.hosts.filter((h) => state.hosts[h.name]?.taint);
  if (tainted.length > 0)
    return errorOutcome(
      "host_tainted",
      `${tainted.map((h) => `host '${h.name}' is tainted (${state.hosts[h.name]?.taint?.reason})`).join("; ")}: fix the cause, then slipway infra untaint <host> and apply again`,
      "failed",
      tainted.map((h) => ({ path: `/hosts/${file.hosts.indexOf(h)}`, message: "tainted", host: h.name })),
    );
  const unpinned = file.hosts.filter((h) => !state.hosts[h.name]?.host_key);
  if (unpinned.length > 0)
    return errorOutcome(
      "no_infra_state",
      `hosts ${unpinned.map((h) => `'${h.name}'`).join(", ")} not bootstrapped: run slipway infra bootstrap first`,
    );
  return appsEngineRefusal(got);
}

/** Runs `infra apply`. */
export async function runApply(ctx: InfraContext): Promise<InfraOutcome> {
  if (!inCi(ctx.env))
    return errorOutcome(
      "refused",
      "infra apply runs in CI only (CI=true is not set); run 'slipway infra plan' to preview the change",
      "usage",
    );
  const got = loadBootstrapped(ctx);
  if (failedToLoad(got)) return got;
  const { file, baseDir, state, stateFile, secrets, secretsFile } = got;
  const env = file.environment.name;
  const refused = preflight(got);
  if (refused) return refused;
  const started = Date.now();
  const steps: AppliedStep[] = [];
  const sessions = new Map<string, SshSession>();
  const source = localImageSource(ctx.env);
  const wanted = new Map(file.hosts.map((h) => [h.name, wantedOnHost(file, h, secrets, state.hosts)]));
  const say = (host: string, line: string) => ctx.progress(`host '${host}': ${line}`);
  const session = async (h: InfraHost) => {
    let s = sessions.get(h.name);
    if (!s) {
      s = await openPinned(ctx, baseDir, h, state.hosts[h.name]);
      sessions.set(h.name, s);
    }
    return s;
  };
  const run: Run = { env, steps, session, say, enter: (h) => (current = h) };
  const save = () => {
    state.outputs = outputsOf(file, secretsFile);
    state.updated_at = new Date().toISOString();
    writeState(stateFile, state);
  };
  let current: InfraHost | undefined;
  let failure: string | undefined;
  try {
    // what each host runs now, read in parallel (an unreachable host fails here and is tainted)
    ctx.progress(`reading ${file.hosts.length} hosts`);
    const changes = new Map<string, PlannedChange[]>();
    const reads = await Promise.allSettled(
      file.hosts.map(async (h) => {
        const actual = await listEnvContainers(await session(h), env);
        changes.set(h.name, diffHost(h.name, wanted.get(h.name)!, actual, undefined));
      }),
    );
    const unread = reads.findIndex((r) => r.status === "rejected");
    if (unread >= 0) {
      current = file.hosts[unread];
      throw (reads[unread] as PromiseRejectedResult).reason;
    }
    // the image on every host that changes, all at once and before any container changes: a load
    // over SSH is apply's longest step, and a host that cannot get the image fails before the rest
    const changing = file.hosts.filter((h) =>
      (changes.get(h.name) ?? []).some((c) => c.action !== "keep" && c.action !== "remove"),
    );
    const loads = await Promise.allSettled(
      changing.map(async (h) => {
        const how = await ensureImage(await session(h), file.image, source, (l) => say(h.name, l));
        if (how !== "present") say(h.name, `image ${how}`);
      }),
    );
    const unloaded = loads.findIndex((r) => r.status === "rejected");
    if (unloaded >= 0) {
      current = changing[unloaded];
      throw (loads[unloaded] as PromiseRejectedResult).reason;
    }
    const runningNats = () =>
      file.hosts.filter((h) =>
        (changes.get(h.name) ?? []).some(
          (c) =>
            c.role === "nats" &&
            (c.action === "keep" ||
              steps.some((s) => "container" in s && s.container === c.container && s.host === h.name)),
        ),
      ).length;
    const natsHosts = file.hosts.filter((h) => (h.roles as readonly string[]).includes("nats")).length;
    const quorum = Math.floor(natsHosts / 2) + 1;

    for (const role of PHASES) {
      if (role === "node") await authorizeAppsHosts(run, file, secrets.apps_engine?.public_key);
      for (const h of file.hosts) {
        const change = changes.get(h.name)?.find((c) => c.role === role && c.action !== "remove");
        if (!change || change.action === "keep") continue;
        current = h;
        const w = wanted.get(h.name)!.find((x) => x.role === role) as WantedContainer;
        const s = await session(h);
        const t0 = Date.now();
        say(h.name, `${change.action} ${w.name}: ${change.reason}`);
        await makeContainer(s, w, env);
        await waitStarted(s, w);
        steps.push({ ...change, ms: Date.now() - t0 });
        if (role === "nats" && runningNats() >= quorum) {
          say(h.name, `waiting until ${w.name} is current with the cluster`);
          await waitNatsCurrent(s, w.name);
        }
        const entry = state.hosts[h.name]!;
        entry.applied = {
          ...entry.applied,
          [w.name]: { config_hash: w.configHash, image: w.image, at: new Date().toISOString() },
        };
        say(h.name, `${w.name} ready (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
        save();
      }
    }
    for (const h of file.hosts) {
      for (const c of changes.get(h.name) ?? []) {
        if (c.action !== "remove") continue;
        current = h;
        say(h.name, `remove ${c.container}: ${c.reason}`);
        await removeContainer(await session(h), c.container);
        steps.push(c);
        const entry = state.hosts[h.name]!;
        if (entry.applied) delete entry.applied[c.container];
        save();
      }
    }
    current = undefined;
  } catch (e) {
    if (!(e instanceof ApplyStepError || e instanceof SshError) || !current) throw e;
    failure = e.message;
    state.hosts[current.name]!.taint = { reason: e.message.slice(0, 500), at: new Date().toISOString() };
    ctx.progress(`host '${current.name}': FAILED, tainted: ${e.message}`);
  } finally {
    for (const s of sessions.values()) s.close();
    save();
  }
  return applyOutcome(
    env,
    steps,
    Date.now() - started,
    state.outputs,
    failure && current ? { host: current.name, message: failure } : undefined,
  );
}

function applyOutcome(
  env: string,
  steps: readonly AppliedStep[],
  elapsedMs: number,
  outputs: unknown,
  failed: { host: string; message: string } | undefined,
): InfraOutcome {
  const counts = { create: 0, replace: 0, remove: 0, authorize: 0 };
  for (const s of steps) if (s.action !== "keep") counts[s.action]++;
  const result = {
    environment: env,
    steps,
    counts,
    elapsed_ms: elapsedMs,
    ...(failed ? { failed, tainted: failed.host } : {}),
    outputs,
  };
  const lines = [
    ...steps.map((s) =>
      "container" in s
        ? `${s.action.padEnd(7)} ${s.host}/${s.container}: ${s.reason}`
        : `${s.action} ${s.host}: ${s.reason}`,
    ),
    ...(failed
      ? [`FAILED  ${failed.host}: ${failed.message}`, `host '${failed.host}' is tainted; apply stopped there`]
      : []),
    `apply: ${counts.create} created, ${counts.replace} replaced, ${counts.remove} removed${counts.authorize > 0 ? `, apps engine key written on ${counts.authorize} hosts` : ""} (${(elapsedMs / 1000).toFixed(1)} s)`,
  ];
  return resultOutcome("apply", !failed, result, lines);
}
