import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { MonitoringPlan, PlatformTargets } from "../../effects/mod.js";
import type { HandlerInput } from "../../proto/mod.js";

/**
 * From provision-monitoring's input to the plan the stack is generated from (docs/monitoring.md):
 * defaults, the platform's targets from this node's settings, the relay's port. Secrets are not
 * in the plan, only whether each is set.
 */

export type MonitoringInput = HandlerInput<"provision-monitoring">;

/** The relay's port: `SLIPWAY_MONITORING_SMTP_PORT`, default 587 with a user (submission), else 25. */
export function smtpPort(env: NodeJS.ProcessEnv, withUser: boolean): number {
  const raw = env.SLIPWAY_MONITORING_SMTP_PORT?.trim();
  if (!raw) return withUser ? 587 : 25;
  const n = Number(raw);
  if (!/^\d{1,5}$/.test(raw) || n < 1 || n > 65535)
    throw new Error(`SLIPWAY_MONITORING_SMTP_PORT=${JSON.stringify(raw.slice(0, 20))} is not a port`);
  return n;
}

/**
 * The operator's token, to scrape the control plane's `/metrics`: `SLIPWAY_CONTROL_TOKEN`, else
 * `control.token` of `SLIPWAY_DATA_DIR` (default `./.slipway`); null when this node has neither.
 */
export async function operatorToken(env: NodeJS.ProcessEnv): Promise<string | null> {
  const set = env.SLIPWAY_CONTROL_TOKEN?.trim();
  if (set) return set;
  const file = join(env.SLIPWAY_DATA_DIR?.trim() || ".slipway", "control.token");
  const text = await readFile(file, "utf8").catch(() => "");
  return text.trim() || null;
}

export interface PlanParts {
  input: MonitoringInput;
  project: string;
  targets: PlatformTargets;
  has_smtp_password: boolean;
  has_app_db_password: boolean;
  /** The env file relative to the stack's folder, or null. */
  env_file: string | null;
  env: NodeJS.ProcessEnv;
}

export function monitoringPlan(o: PlanParts): MonitoringPlan {
  const i = o.input;
  return {
    project: o.project,
    public_host: i.public_host.toLowerCase(),
    ui_port: i.ui_port ?? null,
    network: i.network ?? o.project,
    proxy_network: i.proxy_network ?? null,
    alert_email: i.alert_email ?? null,
    log_scope_regex: i.log_scope_regex ?? null,
    smtp: i.smtp_host
      ? {
          host: i.smtp_host,
          port: smtpPort(o.env, i.smtp_user !== undefined),
          user: i.smtp_user ?? null,
          from: i.smtp_from ?? `alertmanager@${i.public_host.toLowerCase()}`,
          has_password: o.has_smtp_password,
        }
      : null,
    tracing: { public_url: i.tracing_public_url ?? null, project_id: i.tracing_project_id ?? null },
    app_db: i.app_db_host
      ? {
          network: i.app_db_network ?? null,
          host: i.app_db_host,
          port: i.app_db_port ?? 5432,
          database: i.app_db_database ?? "postgres",
          user: i.app_db_user ?? "postgres",
          app_id: i.app_db_app_id ?? null,
          has_password: o.has_app_db_password,
        }
      : null,
    env_file: o.env_file,
    health_url: i.health_url ?? null,
    context: i.context ?? null,
    control: o.targets.control,
    processes: o.targets.processes,
    images: {},
  };
}
