/**
 * What provision-monitoring generates its stack from (docs/monitoring.md): the call's fields
 * resolved against the platform's settings, no secret in it (secrets go to files of mode 0600
 * next to the configuration: {@link SECRET_FILES}). Every generator of this folder is a pure
 * function of a plan.
 */

/** A scrape target of the platform: `host:port`, over http or https, with or without a bearer file. */
export interface MetricsTarget {
  /** `host:port` as Prometheus reaches it. */
  address: string;
  scheme: "http" | "https";
  /** The bearer token is in {@link SECRET_FILES}'s file of this name. */
  token_file: SecretName | null;
}

export interface MonitoringPlan {
  /** Compose project name, also the prefix of the stack's containers. */
  project: string;
  /** Host the UI is published at behind the platform's proxy; Prometheus's and Alertmanager's external URL. */
  public_host: string;
  /** Host port the UI is published on (127.0.0.1), or null: only behind the proxy. */
  ui_port: number | null;
  /** The stack's own network. */
  network: string;
  /** A network shared with the platform's proxy (Prometheus joins it), or null. */
  proxy_network: string | null;
  /** Who gets the alerts by mail, or null: alerts stay in Alertmanager. */
  alert_email: string | null;
  /** Which log lines the shipping configuration keeps (RE2 in the shipper), or null: every line. */
  log_scope_regex: string | null;
  /** The mail relay of Alertmanager, or null (no mail). */
  smtp: {
    host: string;
    port: number;
    user: string | null;
    from: string;
    /** The password is in the secret file `smtp_password`. */
    has_password: boolean;
  } | null;
  /** A link to the tracing UI on the dashboard. */
  tracing: { public_url: string | null; project_id: string | null };
  /** postgres-exporter's database, or null (no exporter). */
  app_db: {
    network: string | null;
    host: string;
    port: number;
    database: string;
    user: string;
    app_id: string | null;
    /** The password is in the secret file `app_db_password`. */
    has_password: boolean;
  } | null;
  /** An env file every service of the compose file reads, relative to the stack's folder, or null. */
  env_file: string | null;
  /** The URL the health probe asks, or null. */
  health_url: string | null;
  /** The build context of the stack's images, relative to the stack's folder, or null (generated). */
  context: string | null;
  /** The platform's processes: the control plane's `/metrics`, the processes' metrics ports. */
  control: MetricsTarget | null;
  processes: MetricsTarget[];
  /** Images by component, pinned by id once built; null: not built (skip_deploy). */
  images: Partial<Record<Component, string>>;
}

/** The stack's components, as compose services. */
export const COMPONENTS = ["prometheus", "alertmanager", "blackbox", "postgres-exporter", "loki"] as const;
export type Component = (typeof COMPONENTS)[number];

/** Secret files (mode 0600) under `secrets/` of the stack's folder. */
export const SECRET_FILES = [
  "control_token",
  "metrics_token",
  "smtp_password",
  "app_db_password",
  "ui_password",
] as const;
export type SecretName = (typeof SECRET_FILES)[number];

/** Where the stack's folder is mounted in each container (read-only). */
export const MOUNT = "/etc/slipway-monitoring";

/** The ports the components listen on inside their containers. */
export const PORTS = {
  prometheus: 9090,
  alertmanager: 9093,
  blackbox: 9115,
  "postgres-exporter": 9187,
  loki: 3100,
} as const;

/** How long a failing health probe waits before the alert fires. */
export const HEALTH_FOR = "1m";

/** The components a plan runs: postgres-exporter with a database, the probe with a health URL. */
export function componentsOf(plan: MonitoringPlan): Component[] {
  return COMPONENTS.filter(
    (c) =>
      (c !== "postgres-exporter" || plan.app_db !== null) && (c !== "blackbox" || plan.health_url !== null),
  );
}

/** A component's container name. */
export const containerName = (plan: MonitoringPlan, c: Component) => `${plan.project}-${c}`;
