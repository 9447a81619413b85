import type { Handler } from "../context.js";
import { PlatformError } from "../../proto/errors.js";
import { newResourceId } from "../../proto/ids.js";
import type { Resource } from "../../proto/resources.js";
import { readLog } from "../../store/logs.js";
import { isModelError, modelConfigFromEnv, readFailure } from "../../effects/model.js";
import { describeFinding, nextStep, parseFindings, summarize } from "../findings.js";
import { requireApp, workspaceOf } from "./run-script.js";

/**
 * explain-failure: an Analysis of a failed run. Findings are parsed from the
 * run's log without any model (tsc errors with file:line, failing test names,
 * lint rule ids, npm error codes) with a suggested next step; when a model is
 * configured its reading (summary, causes, next step) is added through forced
 * structured output. A model that fails or answers malformed leaves the parsed
 * analysis standing and says so in `model_error`. Long work (reading the log,
 * asking the model); AnalysisCreated when it is done.
 */

/** Resource types explain-failure reads, with the capability that makes them. */
export const EXPLAINABLE: Record<string, string> = {
  Build: "build",
  TestRun: "test",
  CheckRun: "lint",
  DependencyInstall: "install-dependencies",
  DevServer: "run-dev-server",
  Deployment: "deploy",
  Release: "release",
};

/** Most log lines read from the end of a failed run. */
const TAIL = 2000;

export const explainFailure: Handler = async (ctx, input) => {
  const app = await requireApp(ctx);
  const id = input.resource as string;
  let subject: Resource | undefined;
  for (const type of Object.keys(EXPLAINABLE)) {
    subject = await ctx.state.getResource(type, id);
    if (subject) break;
  }
  if (!subject)
    throw new PlatformError(
      "not_found",
      `${ctx.app} has no run with id ${id} (explain-failure reads ${Object.keys(EXPLAINABLE).join(", ")})`,
    );
  if (subject.status !== "failed")
    throw new PlatformError(
      "precondition_failed",
      `${subject.type} ${subject.id} is ${subject.status}; explain-failure reads failed runs`,
    );
  const workspace = workspaceOf(ctx.workspaceRoot, app);
  const iso = ctx.now.toISOString();
  const resource: Resource = {
    type: "Analysis",
    id: newResourceId("Analysis"),
    app_id: ctx.app,
    status: "running",
    created_at: iso,
    updated_at: iso,
    subject_type: subject.type,
    subject_id: subject.id,
  };
  ctx.putResource(resource);
  ctx.log(resource.id, `analysing ${subject.type} ${subject.id}`);
  const sub = subject;
  const appName = ctx.app;
  return {
    status: "running",
    resource,
    task: {
      onSuccess: "AnalysisCreated",
      async run(t) {
        const lines: string[] = [];
        for await (const l of readLog(t.bus, sub.id, { signal: t.signal })) {
          lines.push(l.line);
          if (lines.length > TAIL) lines.shift();
        }
        const findings = parseFindings(lines, workspace);
        const exitCode = typeof sub.exit_code === "number" ? sub.exit_code : null;
        const fallback =
          typeof sub.error === "string"
            ? sub.error
            : `${sub.type} failed${exitCode !== null ? ` (exit ${exitCode})` : ""}`;
        const summary = summarize(findings, exitCode, fallback);
        const next = nextStep(sub.type, findings, appName).replace("<id>", sub.id);
        for (const f of findings.slice(0, 20)) await t.log(describeFinding(f), "platform");
        await t.log(`next step: ${next}`, "platform");
        const fields: Record<string, unknown> = {
          subject_status: sub.status,
          exit_code: exitCode,
          summary,
          findings,
          next_step: next,
          log_lines_read: lines.length,
        };
        let cfg: ReturnType<typeof modelConfigFromEnv>;
        try {
          cfg = modelConfigFromEnv();
        } catch (e) {
          fields.model_error = e instanceof Error ? e.message : String(e);
        }
        if (cfg) {
          await t.log(`asking ${cfg.model} for its reading`, "platform");
          try {
            const r = await readFailure(cfg, {
              capability: EXPLAINABLE[sub.type] ?? sub.type,
              resourceType: sub.type,
              exitCode,
              findings,
              logTail: lines.slice(-200).join("\n"),
              signal: t.signal,
            });
            fields.model_reading = { ...r.value, model: r.model };
          } catch (e) {
            const message = isModelError(e) || e instanceof Error ? e.message : String(e);
            fields.model_error = message;
            await t.log(`the model's reading is left out: ${message}`, "platform");
          }
        }
        return {
          status: "succeeded",
          fields,
          data: {
            subject_type: sub.type,
            subject_id: sub.id,
            findings: findings.length,
            model: fields.model_reading !== undefined,
          },
        };
      },
    },
  };
};
