import { lstat, mkdir, realpath } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
import {
  BUCKETS,
  COMMAND_DEDUP_MS,
  encode,
  type FoldedLog,
  keys,
  LOG_HEADER,
  type LogLine,
  type Outbox,
  type Command,
  type Outcome,
  PlatformError,
  type SideEffect,
  STREAMS,
  subjects,
} from "../proto/mod.js";
import { appendLog, type Bus, makeAppEvent, readStream, storeAppEvent } from "../store/mod.js";
import type { Sealer } from "./sealer.js";
import { writeNoFollow } from "./workspace-files.js";

/** What applying an outbox needs of its node. */
export interface OutboxHost {
  readonly bus: Bus;
  readonly vault: Sealer;
  readonly workspaceRoot: string;
  /** Carries out a side effect after the commit (actors/side-effects.ts). */
  sideEffect(e: SideEffect): Promise<void>;
}

/**
 * Writes a committed outbox (DESIGN §2), idempotently: KV puts, events and log
 * lines with message ids derived from the command, workspace files, all sent
 * at once and their acks awaited together. Returns the KV revision of each
 * resource written (a gateway applies the answer to its read index with it).
 * The side effects come after, once every outbox of the batch is written
 * ({@link runSideEffects}).
 */
export async function writeOutbox(
  host: OutboxHost,
  outbox: Outbox,
  reapply = false,
): Promise<Map<string, number>> {
  const { pub } = host.bus;
  const revisions = new Map<string, number>();
  const jobs: Promise<unknown>[] = [];
  for (const r of outbox.resources) {
    const write = r.doc
      ? pub.kvPut(BUCKETS.resources, r.key, encode(r.doc))
      : pub.kvDelete(BUCKETS.resources, r.key);
    jobs.push(write.then((rev) => revisions.set(r.key, rev)));
  }
  for (const v of outbox.vault)
    jobs.push(
      v.entry ? pub.kvPut(BUCKETS.vault, v.key, encode(v.entry)) : pub.kvDelete(BUCKETS.vault, v.key),
    );
  for (const a of outbox.apps)
    jobs.push(
      a.record ? pub.kvPut(BUCKETS.apps, a.key, encode(a.record)) : pub.kvDelete(BUCKETS.apps, a.key),
    );
  const { folded, streamed } = foldLogs(outbox);
  const stored = reapply ? await storedAlready(host.bus, outbox) : NOTHING_STORED;
  outbox.events.forEach((ev, i) => {
    const lines = folded.get(i);
    if (stored.has(`${outbox.command_id}/${i}`)) return;
    jobs.push(
      pub.publish(subjects.event(ev.app_id, ev.resource_type, ev.type), encode(ev), {
        msgId: `${outbox.command_id}/${i}`,
        ...(lines ? { headers: { [LOG_HEADER]: JSON.stringify(lines) } } : {}),
      }),
    );
  });
  (outbox.app_events ?? []).forEach((ev, i) => {
    const id = `${outbox.command_id}:${i}`;
    if (!stored.has(id)) jobs.push(storeAppEvent(host.bus, ev, id));
  });
  for (const i of streamed) {
    const l = outbox.logs[i]!;
    if (stored.has(`${outbox.command_id}/log/${i}`)) continue;
    jobs.push(
      appendLog(
        host.bus,
        l.resource_id,
        { ts: l.ts, stream: l.stream, line: l.line },
        `${outbox.command_id}/log/${i}`,
      ),
    );
  }
  // a re-applied outbox writes a file only when nothing wrote it since its turn (a user's later
  // edit of compose.prod.yaml, say, stays)
  const since = reapply && outbox.at ? Date.parse(outbox.at) : undefined;
  for (const f of outbox.files) jobs.push(writeWorkspaceFile(host, f, since));
  for (const j of outbox.jobs ?? []) {
    jobs.push(
      j.def
        ? pub.kvPut(BUCKETS.jobs, j.key, encode(j.def))
        : Promise.all([
            pub.kvDelete(BUCKETS.jobs, j.key),
            pub.kvDelete(BUCKETS.jobs, keys.jobStateOf(j.key)),
          ]),
    );
  }
  await Promise.all(jobs);
  return revisions;
}

const NOTHING_STORED: ReadonlySet<string> = new Set();
/** An outbox re-applied this long after its turn may be past the streams' duplicate window. */
const DEDUP_TRUSTED_MS = COMMAND_DEDUP_MS - 30_000;
/** Messages stored this long before an outbox's turn are read too (clocks of two machines). */
const CLOCK_SLACK_MS = 30_000;

/**
 * The message ids of an outbox's events and streamed log lines already in their streams, for an
 * outbox re-applied after the streams' duplicate window (2 minutes) might have forgotten them: a
 * takeover long after a crash (`up` started again minutes after a kill -9) would otherwise store the
 * last batch's events a second time. Within the window the streams drop the copies themselves.
 */
async function storedAlready(bus: Bus, outbox: Outbox): Promise<ReadonlySet<string>> {
  // an outbox without its time (an older version's) is written as before
  const at = outbox.at ? Date.parse(outbox.at) : Number.NaN;
  if (!Number.isFinite(at) || Date.now() - at < DEDUP_TRUSTED_MS) return NOTHING_STORED;
  const since = new Date(at - CLOCK_SLACK_MS);
  const ids = new Set<string>();
  const read = async (stream: string, filter: string) => {
    for await (const m of readStream(bus, stream, filter, { startTime: since })) {
      const id = m.headers?.get("Nats-Msg-Id");
      if (id?.startsWith(`${outbox.command_id}/`) || id?.startsWith(`${outbox.command_id}:`)) ids.add(id);
    }
  };
  for (const app of new Set(outbox.events.map((e) => e.app_id)))
    await read(STREAMS.events, subjects.eventsOfApp(app));
  for (const app of new Set((outbox.app_events ?? []).map((e) => e.app)))
    await read(STREAMS.appEvents, subjects.appEventsOf(app));
  const { streamed } = foldLogs(outbox);
  for (const rid of new Set(streamed.map((i) => outbox.logs[i]!.resource_id)))
    await read(STREAMS.logs, subjects.log(rid));
  return ids;
}

/** An application event a command's answer lists (`result.app_events`). */
interface ListedAppEvent {
  owner: string;
  type: string;
  subject?: string;
  data: Record<string, unknown>;
}

/**
 * Puts the application events an answer lists (`result.app_events`: policy.set,
 * membership.removed, authz.approval...) into the turn's outbox, made whole here (id, time, the
 * command's actor) so that a takeover writes the very same events again: they are part of the
 * command's outcome, never the gateway's to publish after the answer.
 */
export function carryAppEvents(
  outbox: Outbox,
  cmd: Pick<Command, "app" | "actor">,
  result: Record<string, unknown> | undefined,
  at: Date,
): void {
  const list = result?.app_events;
  if (!Array.isArray(list) || list.length === 0) return;
  outbox.app_events = (list as ListedAppEvent[]).map((ev) =>
    makeAppEvent({ app: cmd.app, ...ev, actor: cmd.actor }, at),
  );
}

/**
 * Where an outbox's log lines go: with `fold_logs`, each line rides on the first event of its
 * resource (by the event's index); the others (and all without `fold_logs`) go to the logs stream,
 * by their index in `logs` (their message ids). The same outbox always splits the same way, so a
 * re-applied outbox writes nothing twice.
 */
export function foldLogs(outbox: Outbox): { folded: Map<number, LogLine[]>; streamed: number[] } {
  const folded = new Map<number, LogLine[]>();
  const streamed: number[] = [];
  outbox.logs.forEach((l, i) => {
    const e = outbox.fold_logs ? outbox.events.findIndex((ev) => ev.resource_id === l.resource_id) : -1;
    if (e < 0) streamed.push(i);
    else folded.set(e, [...(folded.get(e) ?? []), { ts: l.ts, stream: l.stream, line: l.line }]);
  });
  return { folded, streamed };
}

/** The lines an outbox folds into its events, as a reply carries them (a gateway's read index keeps them). */
export function foldedLogs(outbox: Outbox): FoldedLog[] {
  const out: FoldedLog[] = [];
  for (const [i, lines] of foldLogs(outbox).folded)
    for (const l of lines) out.push({ event_id: outbox.events[i]!.id, ...l });
  return out;
}

/** Carries out an outbox's side effects: only once the commit's writes are in (a refused batch changed nothing). */
export async function runSideEffects(host: OutboxHost, outbox: Outbox): Promise<void> {
  for (const e of outbox.effects ?? []) await host.sideEffect(e);
}

/**
 * Keeps the answer of an Idempotency-Key command (24 h, `slipway_idempotency`): the gateway answers
 * a retry from it. Written after the commit, and again by a takeover (the record's `keeps`) or a
 * replay, since the node that applied the command may have died before it kept it.
 */
export function keepAnswer(bus: Bus, id: string, body_hash: string, outcome: Outcome): Promise<number> {
  return bus.pub.kvPut(
    BUCKETS.idempotency,
    keys.idempotency(id),
    encode({ body_hash, outcome, created_at: new Date().toISOString() }),
  );
}

/** Writes outboxes committed before (a takeover re-applies the last batch), then their side effects. */
export async function reapplyOutboxes(host: OutboxHost, outboxes: Outbox[]): Promise<void> {
  await Promise.all(outboxes.map((o) => writeOutbox(host, o, true)));
  for (const o of outboxes) await runSideEffects(host, o);
}

async function writeWorkspaceFile(
  host: OutboxHost,
  f: Outbox["files"][number],
  unchangedSince?: number,
): Promise<void> {
  const root = resolve(host.workspaceRoot);
  const path = resolve(join(root, f.path));
  if (!path.startsWith(root + sep))
    throw new PlatformError("internal", "outbox file outside the workspace root");
  if (unchangedSince !== undefined) {
    const s = await lstat(path).catch(() => undefined);
    if (s && s.mtimeMs >= unchangedSince) return;
  }
  if (f.keep_existing && (await lstat(path).catch(() => undefined))) return;
  if (!(await folderInside(root, dirname(path)))) {
    console.warn(`outbox: ${f.path} not written: a folder of its path leads outside the app's workspace`);
    return;
  }
  const content = f.sealed ? host.vault.open(f.sealed, f.aad ?? "") : (f.content ?? "");
  await writeNoFollow(path, content, f.mode ?? 0o644);
}

/**
 * Makes the folders of a workspace path one at a time, never through a symbolic link (the app can
 * write its workspace): whether `dir` is now a real folder inside `root`.
 */
async function folderInside(root: string, dir: string): Promise<boolean> {
  const realRoot = await realpath(root);
  let at = root;
  for (const part of relative(root, dir)
    .split(sep)
    .filter((p) => p !== "")) {
    at = join(at, part);
    const st = await lstat(at).catch(() => undefined);
    if (!st)
      await mkdir(at).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== "EEXIST") throw e;
      });
    else if (!st.isDirectory()) return false;
  }
  const real = await realpath(dir);
  return real === realRoot || real.startsWith(`${realRoot}${sep}`);
}
