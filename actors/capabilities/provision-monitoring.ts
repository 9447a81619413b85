import { defineHandler } from "../context.js";
import { commandFieldAad, PlatformError, type Resource } from "../../proto/mod.js";
import { monitoringTask, type MonitoringTaskInput } from "../tasks/monitoring.js";

/** A loopback host: `localhost`, 127.0.0.0/8, ::1. */
const LOOPBACK = /^(?:localhost|127(?:\.\d{1,3}){3}|\[?::1\]?)$/i;

/** The compose project (and container prefix) when the call names none. */
export const DEFAULT_PROJECT = "slipway-monitoring";

/**
 * provision-monitoring (docs/monitoring.md): generates a Prometheus, Alertmanager and Loki stack
 * with its alert rules, a Grafana dashboard and a compose file into `dir`, a folder under the
 * platform's own folder of the workspace root (`<root>/_platform/<dir>`). App-less (`_platform`).
 * The turn decides: the input (400, before the bus: proto/capabilities/ops.ts) and, unless
 * `skip_deploy`, the engine (503 without one); the images, the files and the containers are long
 * work (actors/tasks/monitoring.ts) ending MonitoringConfigured.
 * Each call has its MonitoringStack (`previous` names the last one of the same folder). Secrets
 * (smtp_password, app_db_password) stay sealed until the task writes them to files of mode 0600;
 * the resource and the event say only whether each is set.
 */
export const provisionMonitoring = defineHandler("provision-monitoring", {
  facts: (input) => (input.skip_deploy === true ? [] : [{ kind: "engine" as const }]),
  handle: async (ctx, input) => {
    const deploy = input.skip_deploy !== true;
    if (deploy && ctx.facts.engine?.available === false)
      throw new PlatformError("container_runtime_unavailable", ctx.facts.engine.message);
    const sealed = ctx.cmd.sealed ?? {};
    const secret = (field: "smtp_password" | "app_db_password") =>
      sealed[field] ? { sealed: sealed[field]!, aad: commandFieldAad(ctx.cmd.id, field) } : null;
    const project = input.project_name ?? DEFAULT_PROJECT;
    // the control plane on loopback is out of the containers' reach (their 127.0.0.1 is their own)
    const control = ctx.platformUrls.control;
    const reachable = control !== undefined && !LOOPBACK.test(new URL(control).hostname);
    const plan: MonitoringTaskInput = {
      input: { ...input },
      project,
      control_url: reachable ? control : null,
      smtp_password: secret("smtp_password"),
      app_db_password: secret("app_db_password"),
      tracing_given: sealed.tracing_otlp_b64 !== undefined,
    };
    // the last stack generated into the same folder (a resource ends once: each call has its own)
    const previous = (await ctx.state.listResources("MonitoringStack"))
      .filter((r: Resource) => r.dir === input.dir)
      .sort((a, b) => (a.created_at < b.created_at ? 1 : -1))[0];
    const resource = ctx.resource("MonitoringStack", "running", {
      dir: input.dir,
      project,
      public_host: input.public_host,
      skip_deploy: !deploy,
      deployed: false,
      has_smtp_password: plan.smtp_password !== null,
      has_app_db_password: plan.app_db_password !== null,
      tracing_otlp_used: false,
      previous: previous?.id ?? null,
      error: null,
    });
    ctx.putResource(resource);
    ctx.log(
      resource.id,
      `generating the monitoring stack ${project} into ${input.dir}${deploy ? " and starting it" : " (files only)"}`,
    );
    return { status: "running", resource, task: monitoringTask(plan) };
  },
});
