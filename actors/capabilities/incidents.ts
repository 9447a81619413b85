import type { Effect, HandlerContext, InternalHandler } from "../context.js";
import { fromGateway, internalInput } from "./internal.js";
import {
  INCIDENT_COMMANDS,
  INCIDENT_UPDATES_KEPT,
  type IncidentCommandInput,
  type IncidentRoute,
  type IncidentState,
  type IncidentUpdate,
  incidentCommand,
  PlatformError,
  type Resource,
} from "../../proto/mod.js";
import { stripCommon } from "./internal.js";
import { requireApp } from "./workspace.js";

/**
 * The /status/incidents routes' side in the app's actor (docs/incidents.md):
 * internal commands `_incident_<route>` a gateway of either plane sends once it
 * checked the body and the caller. An Incident is `running` while open and
 * `succeeded` once resolved; its own state is `incident_status`
 * (investigating, identified, monitoring, resolved), its `updates` the latest
 * {@link INCIDENT_UPDATES_KEPT}. Updating or resolving a resolved incident is
 * `409`, an unknown one `404`.
 */

const inputOf = <R extends IncidentRoute>(route: R, raw: Record<string, unknown>): IncidentCommandInput<R> =>
  internalInput(INCIDENT_COMMANDS[route], raw, incidentCommand(route)) as IncidentCommandInput<R>;

/** The status page of the app on the data plane, when its address is known (the mail's link). */
function pageUrl(ctx: HandlerContext): string | undefined {
  const base = ctx.platformUrls.data;
  return base ? `${base.replace(/\/+$/, "")}/status/page/${ctx.app}` : undefined;
}

function answer(ctx: HandlerContext, doc: Resource, message: string | null): Effect {
  const url = pageUrl(ctx);
  return {
    status: "succeeded",
    resource: doc,
    // what the gateway's incident-update mails say
    result: {
      incident_id: doc.id,
      incident_status: doc.incident_status,
      message,
      ...(url ? { page_url: url } : {}),
    },
  };
}

const withUpdate = (prev: unknown, u: IncidentUpdate): IncidentUpdate[] =>
  [...((prev as IncidentUpdate[] | undefined) ?? []), u].slice(-INCIDENT_UPDATES_KEPT);

async function openIncident(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the incident commands");
  const input = inputOf("open", raw);
  await requireApp(ctx);
  const at = ctx.now.toISOString();
  const status: IncidentState = "investigating";
  const doc = ctx.resource("Incident", "running", {
    title: input.title,
    severity: input.severity,
    incident_status: status,
    updates: input.message === undefined ? [] : [{ at, status, message: input.message }],
    resolved_at: null,
  });
  ctx.putResource(doc);
  ctx.emit("IncidentOpened", doc, {
    incident_id: doc.id,
    title: input.title,
    severity: input.severity,
    status,
    ...(input.message !== undefined ? { message: input.message } : {}),
  });
  ctx.log(doc.id, `incident opened (${input.severity}): ${input.title}`);
  return answer(ctx, doc, input.message ?? null);
}

/** The incident `id` of this app, still open; 404 when unknown, 409 once resolved. */
async function openOne(ctx: HandlerContext, id: string, what: string): Promise<Resource> {
  const doc = await ctx.state.getResource("Incident", id);
  if (!doc) throw new PlatformError("not_found", `no incident ${id}`);
  if (doc.status !== "running")
    throw new PlatformError("conflict", `incident ${id} is resolved: it cannot be ${what}`);
  return doc;
}

async function updateIncident(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the incident commands");
  const input = inputOf("update", raw);
  const prev = await openOne(ctx, input.id, "updated");
  const status = (input.status ?? prev.incident_status) as IncidentState;
  const at = ctx.now.toISOString();
  const doc = ctx.resource(
    "Incident",
    "running",
    {
      ...stripCommon(prev),
      incident_status: status,
      updates: withUpdate(prev.updates, { at, status, message: input.message }),
    },
    prev,
  );
  ctx.putResource(doc, prev);
  ctx.emit("IncidentUpdated", doc, {
    incident_id: doc.id,
    status,
    previous_status: prev.incident_status,
    message: input.message,
  });
  ctx.log(doc.id, `incident updated: ${status}`);
  return answer(ctx, doc, input.message);
}

async function resolveIncident(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the incident commands");
  const input = inputOf("resolve", raw);
  const prev = await openOne(ctx, input.id, "resolved again");
  const at = ctx.now.toISOString();
  const status: IncidentState = "resolved";
  const doc = ctx.resource(
    "Incident",
    "succeeded",
    {
      ...stripCommon(prev),
      incident_status: status,
      updates: withUpdate(prev.updates, { at, status, message: input.message ?? null }),
      resolved_at: at,
    },
    prev,
  );
  ctx.putResource(doc, prev);
  ctx.emit("IncidentResolved", doc, {
    incident_id: doc.id,
    status,
    opened_at: prev.created_at,
    resolved_at: at,
    ...(input.message !== undefined ? { message: input.message } : {}),
  });
  ctx.log(doc.id, "incident resolved");
  return answer(ctx, doc, input.message ?? null);
}

/** The internal commands of the /status/incidents routes (either plane's gateway). */
export const INCIDENT_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [incidentCommand("open")]: openIncident,
  [incidentCommand("update")]: updateIncident,
  [incidentCommand("resolve")]: resolveIncident,
};
