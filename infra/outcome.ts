/**
 * What an infrastructure verb hands back to the CLI (cli/infra-verbs.ts prints it): a result, or
 * an error in the CLI's error shape. The exit is named, the CLI maps it to its codes
 * (cli/exit-codes.ts): ok 0, failed 1, usage 2, changes 2 (plan only), unavailable 4 (not built).
 */
import { dirname, resolve } from "node:path";
import { INFRA_FILE, type InfraFile } from "./config.js";
import { InfraFileError, type InfraProblem, lintInfraFile } from "./lint.js";

export type InfraExit = "ok" | "failed" | "usage" | "changes" | "unavailable";

/** One detail of an error: a JSON pointer into the file (or a host's name) and what is wrong there. */
export interface InfraErrorDetail {
  readonly path: string;
  readonly message: string;
  readonly host?: string;
}

export interface InfraErrorBody {
  readonly status: "error";
  readonly error: { readonly code: string; readonly message: string; readonly details?: InfraErrorDetail[] };
}

export type InfraOutcome =
  | {
      readonly kind: "result";
      readonly exit: InfraExit;
      /** The JSON document of `--json`: `{status, verb, result}`. */
      readonly body: {
        readonly status: "succeeded" | "failed";
        readonly verb: string;
        readonly result: unknown;
      };
      /** What a person reads on stdout. */
      readonly lines: readonly string[];
    }
  | { readonly kind: "error"; readonly exit: InfraExit; readonly body: InfraErrorBody };

/** What the CLI gives a verb. */
export interface InfraContext {
  /** The verb's values: `env` and `file` (flags), `host` (untaint). */
  readonly values: Readonly<Record<string, unknown>>;
  /** The operator's environment (SSH_AUTH_SOCK). */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Where `slipway.infra.yaml` is looked for when `--file` is not given. */
  readonly cwd: string;
  /** One line of progress (the CLI writes it on stderr). */
  progress(line: string): void;
  /** Asks the operator a question on the terminal; absent (or undefined) when there is none. */
  confirm?(question: string): Promise<string | undefined>;
}

export function errorOutcome(
  code: string,
  message: string,
  exit: InfraExit = "failed",
  details?: InfraErrorDetail[],
): InfraOutcome {
  return {
    kind: "error",
    exit,
    body: { status: "error", error: { code, message, ...(details?.length ? { details } : {}) } },
  };
}

export function resultOutcome(
  verb: string,
  ok: boolean,
  result: unknown,
  lines: readonly string[],
  exit?: InfraExit,
): InfraOutcome {
  return {
    kind: "result",
    exit: exit ?? (ok ? "ok" : "failed"),
    body: { status: ok ? "succeeded" : "failed", verb: `infra ${verb}`, result },
    lines,
  };
}

/** A valid infrastructure file with where it is; or the outcome that reports why there is none. */
export type LoadedFile =
  | { readonly ok: true; readonly path: string; readonly baseDir: string; readonly file: InfraFile }
  | { readonly ok: false; readonly outcome: InfraOutcome };

/** The problems of a file as the error of a verb. */
export function problemsOutcome(path: string, problems: readonly InfraProblem[]): InfraOutcome {
  const n = problems.length;
  return errorOutcome(
    "invalid_infra_file",
    `${path}: ${n} problem${n === 1 ? "" : "s"}: ${problems[0]?.path || "/"} ${problems[0]?.message ?? ""}`,
    "failed",
    problems.map((p) => ({ ...p })),
  );
}

/**
 * Reads and checks the infrastructure file (`--file`, else `slipway.infra.yaml` in the working
 * directory); `--env`, when given, must be the file's environment. State and secrets live in
 * `.slipway/infra/` next to the file.
 */
export function loadInfraFile(ctx: InfraContext): LoadedFile {
  const given = ctx.values.file;
  const path = resolve(ctx.cwd, typeof given === "string" && given !== "" ? given : INFRA_FILE);
  let lint: ReturnType<typeof lintInfraFile>;
  try {
    lint = lintInfraFile(path);
  } catch (e) {
    if (e instanceof InfraFileError)
      return { ok: false, outcome: errorOutcome("infra_file_missing", e.message) };
    throw e;
  }
  if (!lint.ok) return { ok: false, outcome: problemsOutcome(path, lint.problems) };
  const env = ctx.values.env;
  if (typeof env === "string" && env !== lint.file.environment.name) {
    return {
      ok: false,
      outcome: errorOutcome(
        "env_mismatch",
        `--env ${env} does not match the environment of ${path} ('${lint.file.environment.name}'): one file describes one environment`,
        "usage",
      ),
    };
  }
  return { ok: true, path, baseDir: dirname(path), file: lint.file };
}

/** A path for messages: relative to the working directory when it is inside it. */
export function shownPath(cwd: string, path: string): string {
  const base = `${resolve(cwd)}/`;
  return path.startsWith(base) ? path.slice(base.length) : path;
}
