import type { Resource } from "../../proto/mod.js";
import { readLog } from "../../store/mod.js";
import { isModelError, modelConfigFromEnv, readFailure } from "../../effects/mod.js";
import { describeFinding, nextStep, parseFindings, summarize } from "../findings.js";
import { classifyDeploy, deployLogs, deployNextStep, deployReason } from "../production/deploy-findings.js";
import { releaseFindings } from "../production/release-findings.js";
import type { TaskSpec } from "./types.js";

/**
 * explain-failure's long work: the failed run's log read from its end, the
 * findings parsed without any model, and the model's reading added when one is
 * configured (forced structured output). A model that fails or answers
 * malformed leaves the parsed analysis standing and says so in `model_error`.
 */

/** Most log lines read from the end of a failed run. */
const TAIL = 2000;

export function explainTask(o: {
  /** The failed run. */
  sub: Resource;
  workspace: string;
  appName: string;
  /** The capability that made the run (named to the model). */
  capability: string;
}): TaskSpec {
  const { sub, workspace, appName } = o;
  return {
    onSuccess: "AnalysisCreated",
    async run(t) {
      const lines: string[] = [];
      for await (const l of readLog(t.bus, sub.id, { signal: t.signal })) {
        lines.push(l.line);
        if (lines.length > TAIL) lines.shift();
      }
      const deployment = sub.type === "Deployment";
      // a deployment's own log is the roll; the new container's last lines are on the resource
      if (deployment) lines.push(...deployLogs(sub));
      const findings = parseFindings(lines, workspace);
      const exitCode = typeof sub.exit_code === "number" ? sub.exit_code : null;
      const fallback =
        typeof sub.error === "string"
          ? sub.error
          : `${sub.type} failed${exitCode !== null ? ` (exit ${exitCode})` : ""}`;
      const summary = deployment
        ? `${deployReason(sub)}${findings.length ? `; the new version printed: ${summarize(findings, null, "")}` : ""}`
        : summarize(findings, exitCode, fallback);
      const next = (
        deployment ? deployNextStep(sub, appName) : nextStep(sub.type, findings, appName)
      ).replace("<id>", sub.id);
      for (const f of findings.slice(0, 20)) await t.log(describeFinding(f), "platform");
      await t.log(
        `next step: ${sub.type === "Release" ? releaseFindings(sub, appName).next_step : next}`,
        "platform",
      );
      const fields: Record<string, unknown> = {
        subject_status: sub.status,
        ...(deployment ? { failure: classifyDeploy(deployReason(sub)) } : {}),
        exit_code: exitCode,
        summary,
        findings,
        next_step: next,
        log_lines_read: lines.length,
      };
      if (sub.type === "Release") {
        // a release names the phase that failed, and verify's failed assertions
        const r = releaseFindings(sub, appName);
        Object.assign(fields, {
          failure: r.phase,
          summary: r.assertions.length ? `${r.summary} (${r.assertions.join("; ")})` : r.summary,
          failed_assertions: r.assertions,
          next_step: r.next_step,
        });
      }
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
            capability: o.capability,
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
  };
}
