import type { HandlerContext } from "../context.js";
import type { Resource } from "../../proto/mod.js";

/**
 * `inspect` with type `email` (and `slipway email list`): the app's
 * EmailDelivery resources, whichever capability sent them, as counts by status
 * and by template, the latest sends and the latest failures with their
 * reasons. Only what the resources keep (already redacted): never a body or a
 * data value. With `owner`, only the deliveries of that owner.
 */

const RECENT = 20;
const FAILURES = 10;

const str = (v: unknown): string | null => (typeof v === "string" ? v : null);

function row(d: Resource) {
  return {
    id: d.id,
    status: d.status,
    kind: str(d.kind),
    channel: str(d.channel),
    template: str(d.template),
    to: Array.isArray(d.to) ? d.to : [],
    subject: str(d.subject),
    attempts: typeof d.attempts === "number" ? d.attempts : null,
    message_id: str(d.message_id),
    created_at: d.created_at,
    updated_at: d.updated_at,
  };
}

export async function emailInspection(ctx: HandlerContext): Promise<Record<string, unknown>> {
  const owner = str(ctx.cmd.input.owner);
  const all = (await ctx.state.listResources("EmailDelivery")).filter(
    (d) => owner === null || d.owner === owner,
  );
  all.sort((a, b) => (a.id < b.id ? 1 : -1));
  const byStatus: Record<string, number> = {};
  const byTemplate: Record<string, number> = {};
  for (const d of all) {
    byStatus[d.status] = (byStatus[d.status] ?? 0) + 1;
    const k = str(d.template) ?? "(inline)";
    byTemplate[k] = (byTemplate[k] ?? 0) + 1;
  }
  return {
    total: all.length,
    by_status: byStatus,
    by_template: byTemplate,
    recent_failures: all
      .filter((d) => d.status === "failed")
      .slice(0, FAILURES)
      .map((d) => ({ ...row(d), error: str(d.error), temporary: d.temporary === true })),
    items: all.slice(0, RECENT).map(row),
  };
}
