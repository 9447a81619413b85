import {
  type Bus,
  busUnavailable,
  deleteConnectorGrant,
  publishAppEvent,
  putConnectorGrant,
  type Vault,
} from "../store/mod.js";
import {
  type ErrorDetail,
  isAppEventOwner,
  isAppName,
  type MailProvider,
  mailProviderOf,
  PlatformError,
} from "../proto/mod.js";
import { type AppDirectory, notAsUser, type Principal } from "./auth.js";
import { actorOf, capabilityRoute, type CapabilityDeps } from "./capability-route.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import { appParam, ownerParam } from "./params.js";
import { decodeComponent, type Req } from "./request.js";

/**
 * The mail connectors' routes (spec 4.2, docs/connectors.md), data plane only:
 *
 * - `POST /connect/<provider>/send`: send-message, the provider from the path
 *   (a `provider` in the body must name the same one);
 * - `POST /connect/<provider>/grant`: seals an end user's refresh grant in the
 *   vault (app event connector.connected);
 * - `DELETE /connect/<provider>/grant?owner=...`: removes it (connector.disconnected).
 *
 * Providers answer to `gmail`/`google` and `outlook`/`microsoft`.
 */

export interface ConnectDeps {
  caps: CapabilityDeps;
  bus: Bus;
  vault: Vault;
  apps: AppDirectory;
}

/** The path of the connector routes: provider and action. */
export const CONNECT_ROUTE = /^\/connect\/([^/]+)\/(send|grant)$/;

const CONTROL = /[\u0000-\u001f\u007f]/u;
const GRANT_FIELDS = new Set(["app", "owner", "refresh_token", "scopes", "email"]);

function invalid(details: ErrorDetail[]): PlatformError {
  const first = details[0]!;
  return new PlatformError("invalid_input", `${first.path.slice(1)}: ${first.message}`, {
    details: details.slice(0, 20),
  });
}

/** The app a connector call acts on: the token's own (a body naming another is 403), else the named one. */
function targetApp(d: ConnectDeps, principal: Principal, named: string | undefined): string {
  if (principal.kind === "app") {
    if (named !== undefined && named !== principal.app)
      throw new PlatformError("forbidden", `this token belongs to app ${principal.app}, not ${named}`);
    return principal.app;
  }
  if (named === undefined)
    throw new PlatformError("invalid_input", "app: is required with the control token", {
      details: [{ path: "/app", message: "is required with the control token" }],
    });
  if (!d.apps.has(named)) throw new PlatformError("unknown_app", `app ${named} does not exist`);
  return named;
}

interface GrantBody {
  app: string | undefined;
  owner: string;
  refresh_token: string;
  scopes: string[];
  email: string | null;
}

function checkGrantBody(o: Record<string, unknown>): GrantBody {
  const details: ErrorDetail[] = [];
  for (const k of Object.keys(o))
    if (!GRANT_FIELDS.has(k)) details.push({ path: `/${k}`, message: "unknown field" });
  if (o.app !== undefined && (typeof o.app !== "string" || !isAppName(o.app)))
    details.push({ path: "/app", message: "must be an application name (a DNS label: a-z, 0-9 and -)" });
  if (!isAppEventOwner(o.owner))
    details.push({ path: "/owner", message: "must be 1-256 characters without control characters" });
  const rt = o.refresh_token;
  if (typeof rt !== "string" || rt.length === 0 || rt.length > 8192 || CONTROL.test(rt) || rt.trim() !== rt)
    details.push({
      path: "/refresh_token",
      message: "must be the provider's refresh token (1-8192 characters)",
    });
  const scopes = o.scopes ?? [];
  if (
    !Array.isArray(scopes) ||
    scopes.length > 50 ||
    !scopes.every((s) => typeof s === "string" && /^[\x21-\x7e]{1,512}$/.test(s))
  )
    details.push({ path: "/scopes", message: "must be up to 50 scope strings without spaces" });
  const email = o.email;
  if (
    email !== undefined &&
    email !== null &&
    (typeof email !== "string" || !/^[^\s@<>,;"]{1,64}@[^\s@<>,;"]{1,255}$/.test(email))
  )
    details.push({ path: "/email", message: "must be the user's address (local@domain)" });
  if (details.length) throw invalid(details);
  return {
    app: o.app as string | undefined,
    owner: o.owner as string,
    refresh_token: rt as string,
    scopes: scopes as string[],
    email: (email as string | null | undefined) ?? null,
  };
}

/** Common checks of the grant routes: plane done by the caller; JSON (POST), auth, actor, bus. */
function grantCaller(d: ConnectDeps, req: Req) {
  const principal = d.caps.auth(req);
  notAsUser(principal, "a connector grant");
  const actor = actorOf(req.headers, principal);
  return { principal, actor };
}

async function postGrant(d: ConnectDeps, req: Req, res: Res, provider: MailProvider, body: Promise<Buffer>) {
  req.query.only([], `POST /connect/${provider}/grant`);
  if (!isJsonContentType(req.headers["content-type"]))
    throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
  const { principal, actor } = grantCaller(d, req);
  const g = checkGrantBody(parseJsonObject(await body));
  const app = targetApp(d, principal, g.app);
  if (!d.bus.connected()) throw busUnavailable();
  const { entry, replaced } = await putConnectorGrant(d.bus, d.vault, { ...g, app, provider });
  const ev = await publishAppEvent(d.bus, {
    app,
    owner: g.owner,
    type: "connector.connected",
    subject: `connector:${provider}`,
    data: { provider, scopes: entry.scopes, replaced },
    actor,
  });
  const { sealed: _, ...shown } = entry;
  res.json(200, {
    status: "succeeded",
    connector: shown,
    app_event: { id: ev.id, type: ev.type, seq: ev.seq },
  });
}

async function deleteGrant(d: ConnectDeps, req: Req, res: Res, provider: MailProvider) {
  req.query.only(["owner", "app"], `DELETE /connect/${provider}/grant`);
  const { principal, actor } = grantCaller(d, req);
  const owner = ownerParam(req.query);
  if (owner === undefined)
    throw new PlatformError("invalid_input", "owner: is required", {
      details: [{ path: "owner", message: "is required" }],
    });
  const app = targetApp(d, principal, appParam(req.query, "app"));
  if (!d.bus.connected()) throw busUnavailable();
  const entry = await deleteConnectorGrant(d.bus, app, provider, owner);
  if (!entry) throw new PlatformError("not_found", `${owner} has no ${provider} grant in app ${app}`);
  const ev = await publishAppEvent(d.bus, {
    app,
    owner,
    type: "connector.disconnected",
    subject: `connector:${provider}`,
    data: { provider, scopes: entry.scopes },
    actor,
  });
  const { sealed: _, ...shown } = entry;
  res.json(200, {
    status: "succeeded",
    connector: { ...shown, disconnected_at: ev.at },
    app_event: { id: ev.id, type: ev.type, seq: ev.seq },
  });
}

/** The body of `/connect/<provider>/send` as send-message's input: the provider from the path. */
async function sendBody(name: string, provider: MailProvider, body: Promise<Buffer>): Promise<Buffer> {
  const o = parseJsonObject(await body);
  if (o.provider !== undefined && (typeof o.provider !== "string" || mailProviderOf(o.provider) !== provider))
    throw new PlatformError(
      "invalid_input",
      `provider: the path names ${name}; leave provider out or name the same`,
      {
        details: [{ path: "/provider", message: `must name the provider of the path (${name})` }],
      },
    );
  o.provider ??= name;
  try {
    return Buffer.from(JSON.stringify(o));
  } catch (e) {
    // a body nested deeper than the stack (JSON.parse takes it, JSON.stringify does not): bad input, not a 500
    if (e instanceof RangeError)
      throw new PlatformError("invalid_input", "request body is nested too deeply", {
        details: [{ path: "", message: "is nested too deeply" }],
      });
    throw e;
  }
}

/** `/connect/<provider>/<send|grant>`. */
export async function connectRoute(
  d: ConnectDeps,
  req: Req,
  res: Res,
  match: RegExpExecArray,
  body: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  const name = decodeComponent(match[1]!, "provider");
  const action = match[2] as "send" | "grant";
  const provider = mailProviderOf(name);
  if (!provider)
    throw new PlatformError(
      "not_found",
      `no mail provider ${name.slice(0, 64)}: gmail (also google) or outlook (also microsoft)`,
    );
  const allow = action === "send" ? ["POST"] : ["POST", "DELETE"];
  if (!allow.includes(req.method)) throw methodNotAllowed(allow);
  if (d.caps.plane !== "data")
    throw new PlatformError(
      "wrong_plane",
      `/connect is served on the data plane (port ${d.caps.otherPort()}), not the control plane`,
    );
  if (action === "send") {
    const b = body ? sendBody(name, provider, body) : undefined;
    b?.catch(() => {});
    return capabilityRoute(d.caps, req, res, "send-message", b, methodNotAllowed);
  }
  if (req.method === "DELETE") return deleteGrant(d, req, res, provider);
  return postGrant(d, req, res, provider, body!);
}
