/**
 * Facts: what a handler needs to know of the world outside NATS (is a container
 * engine there, does a container run, does the app answer its health check).
 * A handler names them (`facts` of its declaration in actors/capabilities/);
 * the node reads them before the command's turn (actors/facts/gather.ts), with
 * a time bound, and the handler gets the answers in `ctx.facts`. Reading is
 * all: nothing outside changes until the commit (side effects, DESIGN §2).
 */

export type FactRequest =
  /**
   * Is a container engine reachable (with the reason when not); `production`: the engine the app's
   * production containers run on (an apps host's, when the infra has them: docs/infra.md).
   */
  | { kind: "engine"; production?: boolean }
  /** Does the OTLP receiver take a probe span (setup-observability); the secret key sealed as in the command. */
  | { kind: "otlp-probe"; endpoint: string; public_key?: string; secret_key?: Sealed; aad: string }
  /** The state of a container by name. */
  | { kind: "container"; name: string }
  /** What the engine runs for an app (inspect docker). */
  | { kind: "engine-description"; app: string }
  /** `GET <base_url><path>` of the app, 1 s time bound (inspect health). */
  | { kind: "app-health"; path: string }
  /** Is a model configured (generate-feature-plan), without its key. */
  | { kind: "model" }
  /** The platform's SMTP server (SLIPWAY_SMTP_URL, send-email), without its user or password. */
  | { kind: "smtp" }
  /** The app's latest application event per subject and its newest ones (inspect app-events). */
  | { kind: "app-events"; owner?: string | undefined }
  /** The app's production containers (deploy's drift gate), with their configuration hashes. */
  | { kind: "production-containers" }
  /** The proxy's routes to the app (inspect docker), without certificates or CAs. */
  | { kind: "routes" }
  /** The app's repository: the commit `ref` names (default HEAD) and what is not committed (release). */
  | { kind: "git"; ref?: string }
  /**
   * Which other app holds each of `hosts` and the app's own production host (productionize, deploy,
   * release): the app of the host's proxy route, else an app whose record names it.
   */
  | { kind: "host-owners"; hosts?: string[] }
  /** Another app's record, by name (an app-less capability naming an app: delivery-check). */
  | { kind: "app-record"; app: string }
  /** Is a mail provider configured (send-message), without its client secret. */
  | { kind: "mail-provider"; provider: MailProvider };

export type { ContainerView } from "../production/drift.js";
import type { Sealed } from "../../proto/mod.js";
import type { SmtpView } from "../mail/config.js";
import type { AppEvent, AppRecord, MailProvider } from "../../proto/mod.js";
import type { ContainerView } from "../production/drift.js";

/** What release needs to know of the app's repository before its turn. */
export interface GitFact {
  /** The commit HEAD names (undefined: no commit yet). */
  head: string | undefined;
  /** The commit the asked ref names; undefined when it names none. */
  commit: string | undefined;
  /** Paths with changes not committed. */
  dirty: string[];
}

/** A proxy route of the app as inspect shows it (no PEM). */
export interface RouteFact {
  host: string;
  service: string;
  upstreams: { url: string; deployment_id: string; container?: string | undefined }[];
  https: boolean;
  mtls: boolean;
  revision: number;
  updated_at: string;
}

export interface ContainerFact {
  running: boolean;
  containerId: string;
  exitCode?: number | null;
}

export interface ProbeFact {
  ok: boolean;
  status?: number;
  error?: string;
  ms: number;
}

export interface Facts {
  /** `git`: the app's workspace repository; absent when it is not one. */
  git?: GitFact;
  /** `routes`: the proxy's routes to the app. */
  routes?: RouteFact[];
  /** `production-containers`: what the engine runs for the app; absent when the engine is not reachable. */
  production?: ContainerView[];
  /** Apps hosts whose engine did not answer while `production` was read (their containers are not in it). */
  productionUnreachable?: string[];
  /** `engine`: reachable, or the 503 message that says why not. */
  engine?: { available: true } | { available: false; message: string };
  /** `otlp-probe`: the receiver took the probe span, or the exporter's error (no key in it). */
  otlpProbe?: { ok: boolean; ms: number; error?: string };
  /** `container`: by name; null when there is none. */
  containers: Record<string, ContainerFact | null>;
  /** `engine-description`: the engine's view of the app (JSON, shown as is). */
  engineDescription?: Record<string, unknown>;
  /** `app-health`: null when the app has no base URL. */
  appHealth?: ProbeFact | null;
  /** `host-owners`: the hosts another app holds, and that app (a host absent here is free or the app's own). */
  hostOwners?: Record<string, string>;
  /** `app-record`: the named apps' records; null when there is no such app. */
  appRecords?: Record<string, AppRecord | null>;
  /** `app-events`: the latest event per subject and the newest events (at most 200 each), or why not read. */
  appEvents?: { latest: AppEvent[]; recent: AppEvent[] } | { error: string };
  /** `smtp`: the platform's SMTP server and sender, or the 503 message when none is usable. */
  smtp?: SmtpView;
  /** `model`: the model a call would use, or the 503 message when none is configured. */
  model?: { configured: true; model: string } | { configured: false; message: string };
  /** `mail-provider`: whether the provider can be used, or the 503 message that says why not. */
  mailProvider?: { configured: true } | { configured: false; message: string };
}

export const NO_FACTS: Facts = { containers: {} };
