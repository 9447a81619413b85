import type { Resource } from "../../proto/mod.js";

/**
 * What explain-failure says of a Deployment that ended without success
 * (rolled back, or failed when its node went away): the reason its roll
 * recorded, classified, and the next step for that class. The new
 * container's last lines (kept on the resource) are read as a run's log.
 */

export type DeployFailure = "drift" | "not_ready" | "image" | "proxy" | "env" | "interrupted" | "other";

export function classifyDeploy(reason: string): DeployFailure {
  if (reason.startsWith("drift_detected")) return "drift";
  if (/did not become ready/.test(reason)) return "not_ready";
  if (/image .* (is not on the container engine|could not be pulled)/.test(reason)) return "image";
  if (/proxy did not take/.test(reason)) return "proxy";
  if (/env file/.test(reason)) return "env";
  if (/interrupted|node shut down/.test(reason)) return "interrupted";
  return "other";
}

/** The reason a Deployment recorded (its `reason`, else its `error`). */
export function deployReason(d: Resource): string {
  if (typeof d.reason === "string") return d.reason;
  if (typeof d.error === "string") return d.error;
  return `the deployment ended ${d.status}`;
}

/** The container's last lines a rolled-back Deployment keeps. */
export function deployLogs(d: Resource): string[] {
  return Array.isArray(d.logs) ? d.logs.filter((l): l is string => typeof l === "string") : [];
}

export function deployNextStep(d: Resource, app: string): string {
  const reason = deployReason(d);
  const path = typeof d.readiness_path === "string" ? d.readiness_path : "/health";
  switch (classifyDeploy(reason)) {
    case "drift":
      return `the app's containers are not what its last deployment left: put them back (or remove the extra ones: slipway inspect docker --app ${app} lists them), then run: slipway deploy --app ${app}`;
    case "not_ready":
      return `the new version did not answer GET ${path} with 2xx in time: read its last lines (in this analysis, and slipway logs <id>), fix its start-up or raise --timeout-seconds, then run: slipway deploy --app ${app}`;
    case "image":
      return `the image is not on the engine: publish it (slipway release --app ${app}) or deploy with --pull from its registry`;
    case "proxy":
      return `the proxy's own probe of the new version failed: check that GET ${path} answers 2xx on the container's port, then deploy again`;
    case "env":
      return `an env file deploy reads is missing: copy .env.prod.example to .env.prod in the workspace and fill it, then deploy again`;
    case "interrupted":
      return `the node running the roll stopped; the previous version kept serving: run slipway deploy --app ${app} again`;
    default:
      return `read the deployment's log (slipway logs <id>), fix what it names, then run: slipway deploy --app ${app}`;
  }
}
