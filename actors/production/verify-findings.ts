import type { Resource } from "../../proto/mod.js";
import type { TaskSpec } from "../tasks/types.js";

/**
 * What explain-failure says of a failed Verification (docs/verify.md): the
 * assertions that failed, each as `name: expected ..., got ...`, the class of
 * the first one, and the next step for that class. Pure functions over the
 * resource: a Verification keeps every assertion it made.
 */

/** One assertion as a Verification records it. */
export interface RecordedAssertion {
  name: string;
  expected: string;
  actual: string;
  ok: boolean;
  ms: number;
}

export type VerifyFailure =
  | "unreachable"
  | "not_ready"
  | "health"
  | "page"
  | "api"
  | "cron"
  | "auth_config"
  | "refresh"
  | "billing"
  | "interrupted"
  | "other";

export interface VerifyFindings {
  failure: VerifyFailure;
  /** One line: how many failed and the first of them. */
  summary: string;
  /** Each failed assertion: `api /api/me: expected GET /api/me -> 401, got 200`. */
  failed_assertions: string[];
  next_step: string;
}

function isAssertion(v: unknown): v is RecordedAssertion {
  if (typeof v !== "object" || v === null) return false;
  const a = v as Record<string, unknown>;
  return typeof a.name === "string" && typeof a.expected === "string" && typeof a.actual === "string";
}

/** The assertions a Verification recorded (none when its run ended before it recorded any). */
export function assertionsOf(v: Resource): RecordedAssertion[] {
  return Array.isArray(v.assertions) ? v.assertions.filter(isAssertion) : [];
}

export function describeAssertion(a: RecordedAssertion): string {
  return `${a.name}: expected ${a.expected}, got ${a.actual}`;
}

/** The class of a failed assertion, by its name (and, for readiness, whether anything answered). */
export function classifyAssertion(a: RecordedAssertion): VerifyFailure {
  const [head] = a.name.split(" ");
  switch (head) {
    case "readiness":
      return /^\d{3}\b/.test(a.actual) ? "not_ready" : "unreachable";
    case "health":
    case "page":
    case "api":
    case "cron":
    case "refresh":
      return head;
    case "auth-config":
      return "auth_config";
    case "billing-config":
    case "billing":
      return "billing";
    default:
      return "other";
  }
}

function nextStepFor(failure: VerifyFailure, first: RecordedAssertion | undefined, v: Resource, app: string) {
  const again = `then run: slipway verify --app ${app}`;
  const host = typeof v.host === "string" ? v.host : "the host";
  switch (failure) {
    case "unreachable":
      return `nothing answered at ${host} (${first?.actual ?? "no answer"}): check that the app is deployed and its route serves that host (slipway deploy --app ${app}), ${again}`;
    case "not_ready":
      return `${host} answered but its health path never gave 2xx within the readiness wait: read the app's logs, fix its start-up (or pass a longer --readiness-timeout-ms), ${again}`;
    case "health":
      return `the health path must answer 200 once the app runs: make it do so, ${again}`;
    case "page":
      return `the page must redirect a signed-out visitor (302, to the sign-in page): keep the starter's redirect of GET /, ${again}`;
    case "api":
      return `an API path answered something other than 401 without a session: every /api/* route must refuse a signed-out caller with 401; fix it, ${again}`;
    case "cron":
      return `the cron path must answer 403 to a call without the platform's service token: keep the starter's /cron/* check, ${again}`;
    case "auth_config":
      return `GET /auth/config must answer 200 JSON with idp, email and password_signup matching what verify expects: fix the app's sign-in options or the expect_* inputs, ${again}`;
    case "refresh":
      return `a fresh session (a throwaway sign-up at POST /auth/signup) must refresh at POST /auth/refresh with 200 and a new session cookie: keep the starter's routes, ${again}`;
    case "billing":
      return `GET /billing/config must answer 200 JSON {mode, app_name} matching check_billing_mode and billing_app_name: set BILLING_MODE and BILLING_APP_NAME in the app's env, redeploy, ${again}`;
    case "interrupted":
      return `the verification stopped before it finished (${typeof v.error === "string" ? v.error : "interrupted"}): run slipway verify --app ${app} again`;
    default:
      return `read the verification's log (slipway logs <id>), fix what it names, ${again}`;
  }
}

/** The findings of a failed Verification. */
export function verifyFindings(v: Resource, app: string): VerifyFindings {
  const failed = assertionsOf(v).filter((a) => !a.ok);
  const first = failed[0];
  const failure: VerifyFailure = first ? classifyAssertion(first) : "interrupted";
  const failed_assertions = failed.map(describeAssertion);
  const total = assertionsOf(v).length;
  const summary = first
    ? `${failed.length} of ${total} assertion${total === 1 ? "" : "s"} failed; first: ${failed_assertions[0]}`
    : `the verification ended ${v.status} without assertions${typeof v.error === "string" ? `: ${v.error}` : ""}`;
  return { failure, summary, failed_assertions, next_step: nextStepFor(failure, first, v, app) };
}

/**
 * explain-failure's analysis of a failed Verification: the run's own analysis (its log read, the
 * model's reading when one is configured), with the failed assertions named, the summary, the
 * class and the next step taken from the Verification itself.
 */
export function withVerifyFindings(task: TaskSpec, v: Resource, app: string): TaskSpec {
  const f = verifyFindings(v, app);
  return {
    ...task,
    async run(t) {
      for (const a of f.failed_assertions.slice(0, 50)) await t.log(`failed assertion: ${a}`, "platform");
      const r = await task.run(t);
      await t.log(`verify: ${f.next_step.replace("<id>", v.id)}`, "platform");
      return {
        ...r,
        fields: {
          ...r.fields,
          failure: f.failure,
          summary: f.summary,
          failed_assertions: f.failed_assertions,
          next_step: f.next_step.replace("<id>", v.id),
        },
      };
    },
  };
}
