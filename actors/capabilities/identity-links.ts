import type { Effect, HandlerContext, InternalHandler } from "../context.js";
import {
  authCommand,
  httpOrigin,
  keys,
  LINK_ORIGINS_MAX,
  mailLinkOrigins,
  mailLinkRefusal,
  PlatformError,
} from "../../proto/mod.js";
import { inputOf, updated } from "./identity-common.js";
import { requireApp } from "./workspace.js";

/**
 * Where the links of identity's mails may point (docs/identity.md, "Links in mails"): a
 * `verify_url` or `reset_url` is taken only on one of the app's own origins (its base_url, its
 * production host, the origins the operator listed with `POST /auth/admin/link-origins` on the
 * control plane); none given, the link opens the platform's own route. The sign-up name a mail
 * greets is plain text, cut to {@link MAIL_NAME_MAX} characters.
 */

/** Characters of a sign-up's name a mail shows (the rest is cut). */
export const MAIL_NAME_MAX = 40;

/** The name as a mail shows it: whitespace folded, cut to {@link MAIL_NAME_MAX} characters. */
export function mailName(name: unknown): string | undefined {
  if (typeof name !== "string") return undefined;
  const folded = name.replace(/\s+/g, " ").trim();
  if (!folded) return undefined;
  const chars = [...folded];
  return chars.length > MAIL_NAME_MAX ? `${chars.slice(0, MAIL_NAME_MAX - 1).join("")}…` : folded;
}

/**
 * The link of a mail: `url` (on one of the app's origins, else 400 naming the rule) or the
 * platform's route, with `?token=` appended.
 */
export async function mailLink(
  ctx: HandlerContext,
  url: string | undefined,
  field: "verify_url" | "reset_url",
  platformPath: string,
  token: string,
): Promise<string> {
  let base = `${ctx.platformUrls.data ?? "http://localhost"}${platformPath}`;
  if (url !== undefined) {
    const refused = mailLinkRefusal(url, field, mailLinkOrigins((await ctx.state.getApp()) ?? {}));
    if (refused) throw refused;
    base = url;
  }
  return `${base}${base.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}`;
}

/** The operator's list of extra link origins (control plane only), kept on the app's record. */
async function setLinkOrigins(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  if (ctx.cmd.plane !== "control")
    throw new PlatformError("forbidden", "the link origins are set on the control plane only");
  const input = inputOf("link_origins", raw);
  await requireApp(ctx);
  const record = (await ctx.state.getApp())!;
  const origins = [...new Set(input.origins.map((o) => httpOrigin(o)).filter((o) => o !== undefined))];
  if (origins.length > LINK_ORIGINS_MAX)
    throw new PlatformError("invalid_input", `origins: at most ${LINK_ORIGINS_MAX}`);
  const iso = ctx.now.toISOString();
  ctx.outbox.apps.push({
    key: keys.app(ctx.app),
    record: { ...record, auth_link_origins: origins, updated_at: iso },
  });
  const application = await ctx.state.getResource("Application", record.resource_id);
  if (!application) throw new PlatformError("not_found", `the Application of ${ctx.app} is missing`);
  const next = updated(ctx, application, { auth_link_origins: origins });
  ctx.log(next.id, `mail link origins set: ${origins.length ? origins.join(", ") : "none"}`);
  return { status: "succeeded", resource: next, result: { outcome: "set", origins } };
}

export const LINK_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [authCommand("link_origins")]: setLinkOrigins,
};
