import { defineHandler } from "../context.js";
import { explainTask } from "../tasks/explain.js";
import { withVerifyFindings } from "../production/verify-findings.js";
import { PlatformError, type Resource } from "../../proto/mod.js";
import { requireApp } from "./workspace.js";

/**
 * explain-failure: an Analysis of a failed run. Findings are parsed from the
 * run's log without any model (tsc errors with file:line, failing test names,
 * lint rule ids, npm error codes) with a suggested next step; when a model is
 * configured its reading (summary, causes, next step) is added through forced
 * structured output. A model that fails or answers malformed leaves the parsed
 * analysis standing and says so in `model_error`. Long work (reading the log,
 * asking the model); AnalysisCreated when it is done, failed or not (its
 * envelope's `status` says which).
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
  Verification: "verify",
};

export const explainFailure = defineHandler("explain-failure", {
  handle: async (ctx, input) => {
    const app = await requireApp(ctx);
    const id = input.resource;
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
    // a deployment that did not succeed is rolled back (the previous version kept serving), or failed
    const ended = subject.type === "Deployment" ? ["failed", "rolled_back"] : ["failed"];
    if (!ended.includes(subject.status))
      throw new PlatformError(
        "precondition_failed",
        `${subject.type} ${subject.id} is ${subject.status}; explain-failure reads ${ended.join(" or ")} runs`,
      );
    const workspace = ctx.workspace(app).path;
    const resource: Resource = ctx.resource("Analysis", "running", {
      subject_type: subject.type,
      subject_id: subject.id,
    });
    ctx.putResource(resource);
    ctx.log(resource.id, `analysing ${subject.type} ${subject.id}`);
    // the closed catalogue has no AnalysisFailed: AnalysisCreated ends every analysis, the
    // envelope's status (and data.status) "failed" when it could not be made (docs/events.md)
    const task = {
      ...explainTask({
        sub: subject,
        workspace,
        appName: ctx.app,
        capability: EXPLAINABLE[subject.type] ?? subject.type,
      }),
      onFailure: "AnalysisCreated",
    };
    // a Verification names its failed assertions (actors/production/verify-findings.ts)
    if (subject.type === "Verification")
      return { status: "running", resource, task: withVerifyFindings(task, subject, ctx.app) };
    return { status: "running", resource, task };
  },
});
