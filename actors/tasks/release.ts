import { addressAllowanceFromEnv, runVerification, type VerifyOutcome } from "../../effects/mod.js";
import type { VaultEntry } from "../../proto/mod.js";
import type { ExpectedContainer } from "../production/drift.js";
import type { PhaseName, PhaseState, ReleasePlan } from "../production/release-plan.js";
import { assess, PhaseFailure, publish, repin, workspaceDir } from "./release-steps.js";
import { RollBack, type RollResult, rollOut } from "./roll.js";
import type { TaskContext, TaskResult, TaskSpec } from "./types.js";
import { reachOf } from "./verify.js";

/**
 * release's long work (DESIGN §8, docs/release.md): the phases assess,
 * publish, repin, deploy, verify in order, each recorded on the Release as it
 * starts and ends (`t.progress`), so a release interrupted anywhere (even by
 * kill -9 of its node) is resumed by calling it again with the same commit:
 * the phases that succeeded are skipped. A failure leaves production on the
 * last good version: a roll that fails never swapped (the roll's own
 * guarantee) and repin is undone; a verify that fails rolls the previous
 * image back out, then undoes repin.
 */

export interface ReleaseTaskInput {
  app: string;
  workspace: string;
  plan: ReleasePlan;
  phases: PhaseState[];
  /** What the last rolls left running (the drift gate's reference). */
  expected: ExpectedContainer[];
  failedDeployments: string[];
  supersededDeployments?: string[];
  /** The image production runs now (rolled back to when verify fails), or null on the first release. */
  previous_image_ref: string | null;
  sealed: ReadonlyArray<[string, VaultEntry]>;
  /** check_refresh: the refresh token of the probe's fresh session (memory only, never stored). */
  refresh_token?: string;
  /** What a resumed release had done already: its pin and what repin replaced. */
  image_ref: string | null;
  repinned_from: string | null;
}

interface Run {
  t: TaskContext;
  o: ReleaseTaskInput;
  phases: PhaseState[];
  fields: Record<string, unknown>;
}

async function mark(r: Run, name: PhaseName, status: PhaseState["status"], detail: string | null) {
  const now = new Date().toISOString();
  r.phases = r.phases.map((p) =>
    p.name !== name
      ? p
      : {
          ...p,
          status,
          detail,
          started_at: status === "running" ? now : p.started_at,
          ended_at: status === "running" ? null : now,
        },
  );
  await r.t.progress({ phase: name, phases: r.phases, ...r.fields });
  await r.t.log(`phase ${name}: ${status === "running" ? "started" : status}${detail ? ` (${detail})` : ""}`);
}

const todo = (r: Run, name: PhaseName) => r.phases.find((p) => p.name === name)?.status === "pending";

/**
 * A roll of `image` (the release's own containers, labelled with its id). `expected`: what runs now
 * (the roll's drift check), by default what the last rolls left before this release. The image
 * carries its commit (`SLIPWAY_COMMIT`); the container is told its image reference.
 */
function roll(r: Run, image: string, expected = r.o.expected, suffix?: string): Promise<RollResult> {
  const { plan } = r.o;
  return rollOut(r.t, {
    app: r.o.app,
    workspace: r.o.workspace,
    plan: { ...plan.deploy, image, environment: { ...plan.deploy.environment, SLIPWAY_IMAGE: image } },
    expected,
    failedDeployments: r.o.failedDeployments,
    ...(r.o.supersededDeployments ? { supersededDeployments: r.o.supersededDeployments } : {}),
    sealed: r.o.sealed,
    label: r.t.resource.id,
    ...(suffix ? { suffix } : {}),
  });
}

async function verify(r: Run): Promise<VerifyOutcome> {
  const { insecure_http, ...v } = r.o.plan.verify;
  // the host as verify reaches it (actors/tasks/verify.ts reachOf); the probe's token to the app's own route only
  const { base, via, routeApp } = await reachOf(r.t.bus, v.base, insecure_http);
  await r.t.log(`verify: ${base}${via ? ` through the platform's edge at ${via.host}:${via.port}` : ""}`);
  return runVerification({
    ...v,
    base,
    allowAddress: addressAllowanceFromEnv(process.env),
    ...(r.o.refresh_token !== undefined && routeApp === r.o.app ? { refresh_token: r.o.refresh_token } : {}),
    ...(via ? { via } : {}),
    signal: r.t.signal,
    onLine: (line) => void r.t.log(line),
  });
}

/** Puts production back on the previous image after a verify that failed; undoes repin. */
async function putBack(r: Run, dir: string): Promise<string> {
  const prev = r.o.previous_image_ref;
  let how: string;
  if (prev) {
    try {
      const back = await roll(r, prev, r.fields.containers as ExpectedContainer[], "-back");
      r.fields.containers = back.containers;
      r.fields.containers_at = new Date().toISOString();
      r.fields.serving_image = prev;
      how = `production is back on ${prev}`;
    } catch (e) {
      const why = e instanceof RollBack ? e.reason : String(e);
      how = `putting ${prev} back failed (${why}); the new version still serves`;
    }
  } else {
    how = "there was no previous release to put back; the new version still serves";
  }
  await r.t.log(how);
  await unpin(r, dir);
  return how;
}

async function unpin(r: Run, dir: string): Promise<void> {
  const before = (r.fields.repinned_from as string | null) ?? r.o.repinned_from;
  if (!before || r.phases.find((p) => p.name === "repin")?.status !== "succeeded") return;
  try {
    await repin(r.t, dir, r.o.plan, before, "release: unpin after a failed release");
    await mark(r, "repin", "reverted", `back to ${before}`);
  } catch (e) {
    await r.t.log(`could not undo repin: ${e instanceof Error ? e.message : String(e)}`);
  }
}

async function phases(r: Run, dir: string): Promise<void> {
  const { plan } = r.o;
  if (todo(r, "assess")) {
    await mark(r, "assess", "running", null);
    await mark(r, "assess", "succeeded", await assess(r.t, dir, plan));
  }
  if (todo(r, "publish")) {
    await mark(r, "publish", "running", null);
    if (plan.publish.image_ref) {
      r.fields.image_ref = plan.publish.image_ref;
      await mark(
        r,
        "publish",
        "succeeded",
        `${plan.rollback_of ? "rolling back to" : "given"} ${plan.publish.image_ref}`,
      );
    } else {
      const p = await publish(r.t, dir, plan);
      Object.assign(r.fields, { image_ref: p.image_ref, image_id: p.image_id, tag: p.tag });
      await mark(r, "publish", "succeeded", p.image_ref);
    }
  }
  const image = (r.fields.image_ref as string | undefined) ?? r.o.image_ref ?? plan.publish.image_ref;
  if (!image) throw new PhaseFailure("no image was published for this release");
  r.fields.image_ref = image;
  if (todo(r, "repin")) {
    await mark(r, "repin", "running", null);
    const why = plan.rollback_of
      ? `release: roll back to ${plan.rollback_of}`
      : `release ${plan.commit.slice(0, 12)}`;
    const p = await repin(r.t, dir, plan, image, why);
    Object.assign(r.fields, { repinned_from: p.before, repin_commit: p.commit ?? null });
    await mark(r, "repin", "succeeded", p.commit ? `committed ${p.commit.slice(0, 12)}` : "already pinned");
  }
  if (todo(r, "deploy")) {
    await mark(r, "deploy", "running", null);
    try {
      const d = await roll(r, image);
      Object.assign(r.fields, {
        containers: d.containers,
        containers_at: new Date().toISOString(),
        serving_image: image,
        upstream: d.upstream,
        route_revision: d.route_revision,
        timings: { ready_ms: d.ready_ms, total_ms: d.total_ms },
      });
      await mark(r, "deploy", "succeeded", `ready in ${d.ready_ms} ms, ${d.replaced.length} replaced`);
    } catch (e) {
      const rb = e instanceof RollBack ? e : new RollBack(String(e));
      r.fields.logs = rb.logs;
      await unpin(r, dir);
      throw new PhaseFailure(`the roll failed, the previous version kept serving: ${rb.reason}`);
    }
  }
  if (todo(r, "verify")) {
    await mark(r, "verify", "running", null);
    const v = await verify(r);
    r.fields.verification = v;
    const failed = v.assertions.filter((a) => !a.ok);
    if (!v.ok) {
      const what = !v.readiness.ok
        ? "the host never became ready"
        : failed.map((a) => `${a.name}: expected ${a.expected}, got ${a.actual}`).join("; ");
      r.fields.failed_assertions = failed.map((a) => a.name);
      await mark(r, "verify", "failed", what);
      await mark(r, "deploy", "reverted", await putBack(r, dir));
      throw new PhaseFailure(`verify failed: ${what}`, { cause: "verify" });
    }
    await mark(r, "verify", "succeeded", `${v.assertions.length} assertions passed`);
  }
}

export function releaseTask(o: ReleaseTaskInput): TaskSpec {
  return {
    onSuccess: "ReleaseCompleted",
    onFailure: "ReleaseFailed",
    async run(t): Promise<TaskResult> {
      const t0 = Date.now();
      const r: Run = { t, o, phases: o.phases, fields: {} };
      try {
        const dir = workspaceDir(t, o.workspace);
        await phases(r, dir);
        const image = (r.fields.image_ref as string | undefined) ?? o.image_ref;
        await t.log(
          `released ${o.plan.commit.slice(0, 12)} of ${o.app} as ${image} in ${Date.now() - t0} ms`,
        );
        return {
          status: "succeeded",
          fields: { ...r.fields, phase: null, phases: r.phases, total_ms: Date.now() - t0 },
          data: {
            commit: o.plan.commit,
            image_ref: image,
            previous_image_ref: o.previous_image_ref,
            rollback_of: o.plan.rollback_of ?? null,
            total_ms: Date.now() - t0,
          },
        };
      } catch (e) {
        const running = r.phases.find((p) => p.status === "running" || p.status === "failed");
        const phase = running?.name ?? "assess";
        const reason = t.signal.aborted
          ? "stopped: the node shut down"
          : e instanceof Error
            ? e.message
            : String(e);
        if (running?.status === "running")
          await mark(r, running.name as PhaseName, "failed", reason).catch(() => undefined);
        await t.log(`release failed in ${phase}: ${reason}`);
        return {
          status: "failed",
          fields: {
            ...r.fields,
            phase,
            phases: r.phases,
            error: `${phase}: ${reason}`,
            total_ms: Date.now() - t0,
          },
          data: {
            commit: o.plan.commit,
            phase,
            reason,
            ...(r.fields.failed_assertions ? { assertions: r.fields.failed_assertions } : {}),
            previous_image_ref: o.previous_image_ref,
          },
        };
      }
    },
  };
}
