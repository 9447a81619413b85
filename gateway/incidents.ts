import { busUnavailable } from "../store/mod.js";
import {
  type Command,
  INCIDENT_BODIES,
  type IncidentRoute,
  incidentCommand,
  isAppName,
  newId,
  PlatformError,
  type Resource,
  validateBody,
  validateInput,
} from "../proto/mod.js";
import { type AppDirectory, notAsUser, type Principal } from "./auth.js";
import { actorOf, type CapabilityDeps } from "./capability-route.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import { answerOf, appOfCall, sendInternal } from "./internal-command.js";
import { appParam, cursorParam, intParam } from "./params.js";
import type { Req } from "./request.js";
import { STATUS_PAGE_PATH, statusPage } from "./status-page.js";

/**
 * Status incidents (docs/incidents.md): `POST /status/incidents` (open),
 * `GET /status/incidents` (list), `POST /status/incidents/update` and
 * `/resolve` on both planes, with the app's token (data plane) or as the
 * operator (control plane, naming the app); a user's access token is 403.
 * Each write becomes the internal command `_incident_<route>` for the app's
 * actor (ordered, fenced, evented like any command). `notify` then sends the
 * incident-update mail to each address through send-email (one command per
 * address); a mail that cannot go (no SMTP) never undoes the incident: the
 * answer says it was not sent. The data plane also serves the public status
 * page, `GET /status/page/<app>` (gateway/status-page.ts).
 */

export interface IncidentDeps extends CapabilityDeps {
  apps: AppDirectory;
}

export const PATHS: Record<string, IncidentRoute> = {
  "/status/incidents": "open",
  "/status/incidents/update": "update",
  "/status/incidents/resolve": "resolve",
};

/** The paths served here (any method: a wrong one is 405). */
export function isIncidentRoute(path: string): boolean {
  return Object.hasOwn(PATHS, path) || STATUS_PAGE_PATH.test(path);
}

/** What each write says in its mails when the caller gave no message. */
const DEFAULT_MESSAGE: Record<IncidentRoute, string> = {
  open: "We are investigating this incident.",
  update: "The incident was updated.",
  resolve: "This incident has been resolved.",
};

export async function incidentRoute(
  d: IncidentDeps,
  req: Req,
  res: Res,
  bodyP: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  const path = req.url;
  if (STATUS_PAGE_PATH.test(path)) return statusPage(d, req, res, methodNotAllowed);
  const route = PATHS[path]!;
  const isList = route === "open" && (req.method === "GET" || req.method === "HEAD");
  if (!isList && req.method !== "POST") throw methodNotAllowed(route === "open" ? ["GET", "POST"] : ["POST"]);
  if (isList) req.query.only(["app", "status", "limit", "cursor"], `GET ${path}`);
  else req.query.only([], `POST ${path}`);
  const principal = d.auth(req);
  notAsUser(principal, `${req.method} ${path}`);
  if (isList) return list(d, req, res, principal);
  if (!bodyP) throw methodNotAllowed(["POST"]);
  if (!isJsonContentType(req.headers["content-type"]))
    throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
  const actor = actorOf(req.headers, principal);
  const body = validateBody(INCIDENT_BODIES[route], parseJsonObject(await bodyP)) as Record<string, unknown>;
  const app = appOfCall(d, principal, body.app as string | undefined, "/app");
  if (d.limiter) d.limiter.limiter.take(app, "status/incidents", d.limiter.limits.capability);
  if (!d.bus.connected()) throw busUnavailable();

  const { app: _a, notify, ...input } = body;
  if (route === "open") input.severity ??= "minor";
  const { cmd, reply } = await sendInternal(d, {
    capability: incidentCommand(route),
    app,
    input,
    actor,
    requestId: req.requestId,
  });
  const answer = answerOf(reply);
  if (Array.isArray(notify)) {
    const mail = await sendMails(
      d,
      req,
      cmd,
      answer.resource,
      answer.result ?? {},
      notify as string[],
      route,
    );
    answer.result = { ...answer.result, mail };
  }
  return res.json(route === "open" ? 201 : 200, answer);
}

interface MailOutcome {
  to: string;
  status: "queued" | "not_sent";
  delivery_id?: string;
  error?: { code: string; message: string };
}

/**
 * One send-email command per address (template incident-update), for the app, with the caller as
 * actor. The first goes alone: when it finds no SMTP server the others are not tried.
 */
async function sendMails(
  d: CapabilityDeps,
  req: Req,
  cmd: Command,
  incident: Resource,
  result: Record<string, unknown>,
  to: string[],
  route: IncidentRoute,
): Promise<{ sent: boolean; deliveries: MailOutcome[] }> {
  const data: Record<string, unknown> = {
    title: String(incident.title),
    status: String(incident.incident_status),
    message: typeof result.message === "string" ? result.message : DEFAULT_MESSAGE[route],
    ...(typeof result.page_url === "string" ? { link: result.page_url } : {}),
  };
  const one = async (address: string): Promise<MailOutcome> => {
    try {
      const input = validateInput("send-email", {
        app: cmd.app,
        to: address,
        template: "incident-update",
        data,
      });
      const reply = await d.client.send({
        id: newId("cmd"),
        capability: "send-email",
        app: cmd.app,
        input,
        actor: cmd.actor,
        plane: d.plane,
        gateway_id: d.client.gatewayId,
        request_id: req.requestId,
        received_at: new Date().toISOString(),
      });
      await d.learn(reply);
      if (reply.ok && reply.body)
        return { to: address, status: "queued", delivery_id: reply.body.resource.id };
      const e = reply.error ?? { code: "internal", message: "internal error" };
      return { to: address, status: "not_sent", error: { code: e.code, message: e.message } };
    } catch (e) {
      const err =
        e instanceof PlatformError ? e : new PlatformError("internal", "the mail could not be queued");
      return { to: address, status: "not_sent", error: { code: err.code, message: err.message } };
    }
  };
  const first = await one(to[0]!);
  const rest =
    first.error?.code === "smtp_unavailable"
      ? to.slice(1).map((a): MailOutcome => ({ to: a, status: "not_sent", error: first.error! }))
      : await Promise.all(to.slice(1).map(one));
  const deliveries = [first, ...rest];
  return { sent: deliveries.every((x) => x.status === "queued"), deliveries };
}

/** `GET /status/incidents`: the app's incidents, newest first; `status` open or resolved. */
async function list(d: IncidentDeps, req: Req, res: Res, principal: Principal): Promise<void> {
  const q = req.query;
  const app = appOfCall(d, principal, appParam(q, "app"), "/app");
  const status = q.get("status");
  if (status !== null && status !== "open" && status !== "resolved")
    throw new PlatformError("invalid_input", "status: must be open or resolved", {
      details: [{ path: "/status", message: "must be open or resolved" }],
    });
  const limit = intParam(q, "limit", 50, 1, 500);
  if (!isAppName(app) || !d.apps.has(app))
    throw new PlatformError("unknown_app", `app ${app} does not exist`);
  // a status filter reads on until the page is full (or the index says there is no more)
  const items: Resource[] = [];
  let cursor = cursorParam(q);
  let next: string | null = null;
  do {
    const page = await d.index.listResources({
      app_id: app,
      type: "Incident",
      limit: limit - items.length,
      cursor,
    });
    for (const doc of page.items) {
      if (doc.app_id !== app) continue;
      if (status === "open" && doc.status !== "running") continue;
      if (status === "resolved" && doc.status === "running") continue;
      items.push(doc);
    }
    next = page.next_cursor;
    cursor = next ?? undefined;
  } while (next && items.length < limit);
  return res.json(200, { items, next_cursor: next });
}
