import Type, { type Static } from "typebox";
import {
  check,
  type HandlerInput,
  PlatformError,
  PREFERENCES,
  preferred,
  type Resource,
} from "../../proto/mod.js";
import type { HandlerContext } from "../context.js";
import type { GitFact } from "../facts/types.js";
import { DEFAULT_COMPOSE_FILE, DeployPlanSchema, planDeploy } from "./deploy-plan.js";
import { isPinned } from "./compose.js";

/**
 * What a release decides in its turn (docs/release.md): the commit, the
 * phases to run (a resumed release skips those that succeeded), how to
 * publish, the roll (deploy's plan with the image still to come) and the
 * verification. It carries no secret; a queued release keeps it in the
 * partition's record until its turn.
 */

export const PHASES = ["assess", "publish", "repin", "deploy", "verify"] as const;
export type PhaseName = (typeof PHASES)[number];

export const PhaseStateSchema = Type.Object({
  name: Type.String(),
  status: Type.Union([
    Type.Literal("pending"),
    Type.Literal("running"),
    Type.Literal("succeeded"),
    Type.Literal("failed"),
    Type.Literal("skipped"),
    /** Done, then undone because a later phase failed (repin, deploy): run again on resume. */
    Type.Literal("reverted"),
  ]),
  started_at: Type.Union([Type.String(), Type.Null()]),
  ended_at: Type.Union([Type.String(), Type.Null()]),
  detail: Type.Union([Type.String(), Type.Null()]),
});
export type PhaseState = Static<typeof PhaseStateSchema>;

/** The checks of the verify phase (effects/verify.ts VerifyOptions, less the connection). */
export const VerifyPlanSchema = Type.Object({
  base: Type.String(),
  page_path: Type.Optional(Type.String()),
  health_path: Type.Optional(Type.String()),
  api_paths: Type.Optional(Type.Array(Type.String())),
  cron_path: Type.Optional(Type.String()),
  expect_idp: Type.Optional(Type.String()),
  expect_email: Type.Optional(Type.Boolean()),
  expect_password_signup: Type.Optional(Type.Boolean()),
  check_refresh: Type.Optional(Type.Boolean()),
  /** A bare host over HTTP, not HTTPS. */
  insecure_http: Type.Optional(Type.Boolean()),
  timeout_ms: Type.Optional(Type.Integer()),
  readiness_timeout_ms: Type.Optional(Type.Integer()),
  readiness_interval_ms: Type.Optional(Type.Integer()),
});
export type VerifyPlan = Static<typeof VerifyPlanSchema>;

export const ReleasePlanSchema = Type.Object({
  commit: Type.String(),
  /** Phases already done by the release this one resumes (skipped now). */
  done: Type.Array(Type.String()),
  allow_dirty: Type.Boolean(),
  /** `push` to `repository`, or `local` (the pin is the image id); `given`: `image_ref` was given. */
  publish: Type.Object({
    mode: Type.Union([Type.Literal("push"), Type.Literal("local"), Type.Literal("given")]),
    repository: Type.String(),
    tag: Type.String(),
    context: Type.String(),
    image_ref: Type.Optional(Type.String()),
  }),
  /** The roll, its image filled in by publish. */
  deploy: DeployPlanSchema,
  verify: VerifyPlanSchema,
  /** A resumed release: the one it continues, the image it published, what its repin replaced. */
  resume: Type.Optional(
    Type.Object({
      of: Type.String(),
      image_ref: Type.Union([Type.String(), Type.Null()]),
      repinned_from: Type.Union([Type.String(), Type.Null()]),
    }),
  ),
  /** A rollback: the release whose image comes back (publish skipped). */
  rollback_of: Type.Optional(Type.String()),
});
export type ReleasePlan = Static<typeof ReleasePlanSchema>;

export function readReleasePlan(plan: Record<string, unknown>): ReleasePlan {
  return check(ReleasePlanSchema, plan, "queued release plan");
}

/** A fresh list of phases, those already done marked skipped. */
export function phaseList(done: readonly string[], skip: readonly string[] = []): PhaseState[] {
  return PHASES.map((name) => ({
    name,
    status: done.includes(name) || skip.includes(name) ? "skipped" : "pending",
    started_at: null,
    ended_at: null,
    detail: done.includes(name) ? "done before (resumed)" : skip.includes(name) ? "not needed" : null,
  }));
}

const bad = (
  path: string,
  message: string,
  code: "invalid_input" | "precondition_failed" = "invalid_input",
) => new PlatformError(code, `${path.slice(1)}: ${message}`, { details: [{ path, message }] });

/** The last release of this app for this commit, when it failed (or was interrupted): the one to resume. */
export async function resumable(ctx: HandlerContext, commit: string): Promise<Resource | undefined> {
  const all = await ctx.state.listResources("Release");
  const last = all
    .filter((r) => r.commit === commit && r.dry_run !== true && r.rollback_of == null)
    .sort((a, b) => (a.created_at < b.created_at ? 1 : -1))[0];
  return last?.status === "failed" ? last : undefined;
}

/** The phases a release that failed had finished (from its `phases`). */
export function donePhases(r: Resource): string[] {
  const phases = Array.isArray(r.phases) ? (r.phases as PhaseState[]) : [];
  return phases
    .filter((p) => p.status === "succeeded" || (p.status === "skipped" && p.detail !== "not needed"))
    .map((p) => p.name);
}

/** Turns a release call into a plan, or refuses it (400, 422). */
export async function planRelease(
  ctx: HandlerContext,
  input: HandlerInput<"release">,
  o: {
    workspace: { read(path: string): Promise<string | undefined> };
    appHost: string | undefined;
    git: GitFact | undefined;
  },
): Promise<{ plan: ReleasePlan; resume: Resource | undefined; rollbackTarget: Resource | undefined }> {
  if (!o.git)
    throw bad(
      "/commit",
      `${ctx.app}'s workspace is not a git repository (initialize-app makes one; productionize commits)`,
      "precondition_failed",
    );
  const rollback = preferred(ctx.cmd.prefer, PREFERENCES.rollback);
  let rollbackTarget: Resource | undefined;
  if (rollback !== undefined) rollbackTarget = await rollbackTargetOf(ctx, rollback);
  const commit = rollbackTarget ? String(rollbackTarget.commit) : o.git.commit;
  if (!commit)
    throw bad(
      "/commit",
      input.commit
        ? `${input.commit} names no commit of ${ctx.app}'s repository`
        : `${ctx.app}'s repository has no commit yet`,
      "precondition_failed",
    );
  const host = (o.appHost ?? "").toLowerCase();
  // a host name or a URL, as verify's (docs/verify.md#host): the remembered host is a bare name
  const base = input.host ?? (host || undefined);
  if (!base)
    throw bad(
      "/host",
      `${ctx.app} has no production host: run productionize first, or give host`,
      "precondition_failed",
    );
  if (input.image_ref !== undefined && !isPinned(input.image_ref))
    throw bad("/image_ref", `${JSON.stringify(input.image_ref.slice(0, 120))} is not pinned by digest`);
  // the roll: deploy's plan of the service, its image coming from publish (or the release rolled back to)
  const deploy = await planDeploy(
    ctx,
    {
      app: ctx.app,
      ...(input.service ? { service: input.service } : {}),
      ...(input.compose_file ? { compose_file: input.compose_file } : {}),
      ...(input.env_file ? { env_file: input.env_file } : {}),
      ...(input.context ? { context: input.context } : {}),
      ...(input.timeout_seconds !== undefined ? { timeout_seconds: input.timeout_seconds } : {}),
      drain_seconds: 5,
    },
    o.workspace,
    o.appHost,
    { requirePinned: false },
  );
  const registry = input.registry?.replace(/\/+$/, "");
  const repository =
    `${registry ? `${registry}/` : ""}${ctx.app}${input.image_suffix ?? "-web"}`.toLowerCase();
  if (!/^[a-z0-9][a-z0-9._:/-]*$/.test(repository))
    throw bad("/registry", `${repository} is not an image repository name`);
  const mode = input.image_ref
    ? "given"
    : rollbackTarget
      ? "given"
      : (input.publish_mode ?? (registry ? "push" : "local"));
  if (mode === "push" && !registry)
    throw bad("/registry", "publish_mode push needs a registry (host[:port])");
  const resume = rollbackTarget ? undefined : await resumable(ctx, commit);
  const verify: ReleasePlan["verify"] = {
    base,
    ...(input.page_path ? { page_path: input.page_path } : {}),
    ...(input.health_path ? { health_path: input.health_path } : {}),
    ...(input.api_paths ? { api_paths: input.api_paths } : {}),
    ...(input.cron_path ? { cron_path: input.cron_path } : {}),
    ...(input.expect_idp !== undefined ? { expect_idp: input.expect_idp } : {}),
    ...(input.expect_email !== undefined ? { expect_email: input.expect_email } : {}),
    ...(input.expect_password_signup !== undefined
      ? { expect_password_signup: input.expect_password_signup }
      : {}),
    ...(input.check_refresh !== undefined ? { check_refresh: input.check_refresh } : {}),
    ...(ctx.cmd.prefer?.includes(PREFERENCES.insecureHttp) ? { insecure_http: true } : {}),
    ...(input.verify_timeout_ms !== undefined ? { timeout_ms: input.verify_timeout_ms } : {}),
    ...(input.verify_readiness_timeout_ms !== undefined
      ? { readiness_timeout_ms: input.verify_readiness_timeout_ms }
      : {}),
    ...(input.verify_readiness_interval_ms !== undefined
      ? { readiness_interval_ms: input.verify_readiness_interval_ms }
      : {}),
  };
  const imageRef = rollbackTarget ? String(rollbackTarget.image_ref) : input.image_ref;
  return {
    plan: {
      commit,
      done: resume ? donePhases(resume) : [],
      allow_dirty: input.allow_dirty ?? false,
      publish: {
        mode,
        repository,
        tag: commit.slice(0, 12),
        context: input.context ?? ".",
        ...(imageRef ? { image_ref: imageRef } : {}),
      },
      deploy,
      verify,
      ...(rollbackTarget ? { rollback_of: rollbackTarget.id } : {}),
      ...(resume
        ? {
            resume: {
              of: resume.id,
              image_ref: typeof resume.image_ref === "string" ? resume.image_ref : null,
              repinned_from: typeof resume.repinned_from === "string" ? resume.repinned_from : null,
            },
          }
        : {}),
    },
    resume,
    rollbackTarget,
  };
}

/**
 * The release a rollback brings back: the one named, or the last good one before the release
 * production runs now (it must have succeeded and have pinned an image).
 */
async function rollbackTargetOf(ctx: HandlerContext, named: string): Promise<Resource> {
  const all = (await ctx.state.listResources("Release"))
    .filter((r) => r.dry_run !== true)
    .sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
  const good = all.filter(
    (r) => r.status === "succeeded" && typeof r.image_ref === "string" && typeof r.commit === "string",
  );
  if (named) {
    const r = all.find((x) => x.id === named);
    if (!r) throw new PlatformError("not_found", `${ctx.app} has no release ${named.slice(0, 64)}`);
    if (!good.includes(r))
      throw new PlatformError(
        "precondition_failed",
        `release ${r.id} is ${r.status}: only a release that succeeded can be rolled back to`,
      );
    return r;
  }
  const current = good[0];
  const target = good.find((r) => r !== current && r.image_ref !== current?.image_ref);
  if (!target)
    throw new PlatformError("precondition_failed", `${ctx.app} has no earlier good release to roll back to`);
  return target;
}

export { DEFAULT_COMPOSE_FILE };

/**
 * The image production runs for `service`: that of the Deployment or Release that set its
 * containers last (a release whose verify failed records the image it put back). Null: none yet.
 */
export async function servingImage(ctx: HandlerContext, service: string): Promise<string | null> {
  let best: { at: string; image: string } | undefined;
  for (const type of ["Deployment", "Release"] as const)
    for (const d of await ctx.state.listResources(type)) {
      if (d.service !== service || !Array.isArray(d.containers)) continue;
      const image = d.serving_image ?? (type === "Deployment" ? d.image : d.image_ref);
      const at = typeof d.containers_at === "string" ? d.containers_at : d.updated_at;
      if (typeof image === "string" && (!best || best.at <= at)) best = { at, image };
    }
  return best?.image ?? null;
}
