import type { AppEvent } from "../../proto/mod.js";
import type { HandlerContext } from "../context.js";

/**
 * inspect app-events (docs/app-events.md): the app's application events as
 * the node read them before the turn: how many subjects, the latest event of
 * each (type, owner, when; never its data), and the newest events counted by
 * type. With `owner`, that owner's only.
 */

const brief = (e: AppEvent) => ({
  id: e.id,
  type: e.type,
  subject: e.subject,
  owner: e.owner,
  at: e.at,
  seq: e.seq,
});

export async function appEventsInspection(ctx: HandlerContext): Promise<unknown> {
  const read = ctx.facts.appEvents;
  if (!read) return { read: false, reason: "the app events were not read" };
  if ("error" in read) return { read: false, reason: read.error };
  const byType: Record<string, number> = {};
  for (const e of read.recent) byType[e.type] = (byType[e.type] ?? 0) + 1;
  return {
    read: true,
    subjects: read.latest.length,
    latest: read.latest.map(brief),
    recent: { total: read.recent.length, by_type: byType, newest_at: read.recent[0]?.at ?? null },
  };
}
