import { STREAMS, subjects } from "../proto/mod.js";
import { type Bus, readStream } from "../store/mod.js";

/**
 * Where the collection of a dev container's log stands, read back from its
 * resource's log (docs/architecture.md, known gap 6). Each line a follower
 * stores carries, in its message id, the engine's stamp of the line (RFC 3339
 * with nanoseconds) and its rank among the lines of that stamp:
 * `<resource>/container/<id12>/<stamp>/<rank>`. A follower that takes over
 * from a dead node (or a node that gave the app's partition away) asks the
 * engine for the lines from the last stamp stored and skips those stored
 * already, so the lines printed while nobody followed are collected, once.
 * The same line followed by two nodes at once gets the same id, so the logs
 * stream drops the second copy within its duplicate window.
 */

/** The last line stored: the engine's stamp and the line's rank among the lines of that stamp. */
export interface Position {
  time: string;
  rank: number;
}

/** Where a follower starts: after a line stored, from a time (seconds, when no line is known), or at the container's start. */
export type Resume = { after: Position } | { since: number } | { start: true };

/** How far back of the log's last message a resume looks for the container's last line. */
export const LOOK_BACK_MS = 60_000;

const STAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$/;

function prefix(resourceId: string, containerId: string): string {
  return `${resourceId}/container/${containerId.slice(0, 12)}/`;
}

/** The message id of a container's line. */
export function lineId(resourceId: string, containerId: string, p: Position): string {
  return `${prefix(resourceId, containerId)}${p.time}/${p.rank}`;
}

/**
 * The message id of the platform line a resumed follower writes first: it names where the follower
 * resumes, so a follower that dies before it stores a line leaves that place to the next one.
 */
export function noticeId(resourceId: string, containerId: string, r: Resume): string {
  const from = "after" in r ? `${r.after.time}/${r.after.rank}` : "since" in r ? String(r.since) : "start";
  return `${prefix(resourceId, containerId)}from/${from}`;
}

/** Where a stored message id of this container's lines (or notices) leaves off; undefined for another message. */
export function resumeOf(
  id: string | undefined,
  resourceId: string,
  containerId: string,
): Resume | undefined {
  const pre = prefix(resourceId, containerId);
  if (!id?.startsWith(pre)) return undefined;
  const parts = id.slice(pre.length).split("/");
  const notice = parts[0] === "from";
  const rest = notice ? parts.slice(1) : parts;
  if (notice && rest.length === 1) {
    if (rest[0] === "start") return { start: true };
    return /^\d+$/.test(rest[0]!) ? { since: Number(rest[0]) } : undefined;
  }
  const [time, rank] = rest;
  if (rest.length !== 2 || !STAMP.test(time!) || !/^\d+$/.test(rank!)) return undefined;
  return { after: { time: time!, rank: Number(rank) } };
}

/**
 * Where the collection of a container's log into a resource's log left off: the last message of
 * the resource's log when it is one of this container's lines (or a resumed follower's notice);
 * otherwise the last such message stored in the minute before it; otherwise that minute's start,
 * in seconds (nothing of the container was stored in it: its lines from then on are collected);
 * the container's start when the resource's log is empty.
 */
export async function storedResume(bus: Bus, resourceId: string, containerId: string): Promise<Resume> {
  const subject = subjects.log(resourceId);
  const last = await bus.jsm.streams.getMessage(STREAMS.logs, { last_by_subj: subject });
  if (!last) return { start: true };
  const quick = resumeOf(last.header?.get("Nats-Msg-Id"), resourceId, containerId);
  if (quick) return quick;
  // the last line is the platform's ("dev server ready", ...): the container's last line is before it
  const from = new Date(last.time.getTime() - LOOK_BACK_MS);
  let found: Resume | undefined;
  for await (const m of readStream(bus, STREAMS.logs, subject, { startTime: from })) {
    found = resumeOf(m.headers?.get("Nats-Msg-Id"), resourceId, containerId) ?? found;
    if (m.seq >= last.seq) break;
  }
  return found ?? { since: Math.floor(from.getTime() / 1000) };
}

/** The engine's `since` for a resume: the stamp of the last line stored (included: its rank skips it), as `<s>.<ns>`. */
export function engineSince(r: Resume): string | number | undefined {
  if ("since" in r) return r.since;
  if (!("after" in r)) return undefined;
  const t = r.after.time;
  return `${Math.floor(Date.parse(`${t.slice(0, 19)}Z`) / 1000)}.${t.slice(20, 29)}`;
}

/**
 * The ids of one follower's lines, in the order the engine gives them: each line's stamp (a line
 * without one, the rest of a line cut for its length, takes the previous stamp) and its rank among
 * the lines of that stamp. `skip` is true for a line stored before the resume.
 */
export class LineIds {
  private time = "";
  private rank = -1;
  private readonly resourceId: string;
  private readonly containerId: string;
  private readonly after: Position | undefined;

  constructor(resourceId: string, containerId: string, resume: Resume) {
    this.resourceId = resourceId;
    this.containerId = containerId;
    this.after = "after" in resume ? resume.after : undefined;
  }

  next(stamp: string | undefined): { id: string; time: string; skip: boolean } {
    const time = stamp ?? (this.time || new Date().toISOString().replace("Z", "000000Z"));
    this.rank = time === this.time ? this.rank + 1 : 0;
    this.time = time;
    const a = this.after;
    const skip = a !== undefined && (time < a.time || (time === a.time && this.rank <= a.rank));
    return { id: lineId(this.resourceId, this.containerId, { time, rank: this.rank }), time, skip };
  }
}
