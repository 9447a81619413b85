import type { PlatformEvent, Resource } from "../proto/mod.js";

export interface ListQuery {
  app_id?: string | undefined;
  type?: string | undefined;
  owner?: string | undefined;
  resource_id?: string | undefined;
  limit: number;
  cursor?: string | undefined;
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

export interface StoredResource {
  rev: number;
  doc: Resource | null; // null = tombstone
  /** An answer taken before its write's revision was known: it is newer than `rev`, older than any later revision. */
  after?: true;
}

/** True when a watched entry's JSON (null: a deletion) is the document held. */
export function sameDoc(held: Resource | null, raw: string | null): boolean {
  return raw === null ? held === null : held !== null && JSON.stringify(held) === raw;
}

/** Where a stored state sits in its key's history: revision r at 2r, an answer written after r at 2r + 1. */
export function order(s: StoredResource): number {
  return s.rev * 2 + (s.after ? 1 : 0);
}

/**
 * The read index's LevelDB keys (store/read-index.ts): resources listed by all, app, type,
 * app and type, and owner; events by all, app and resource; newest first by the time-sortable
 * part of their ids.
 */
export const SEP = "\x00";
/** Sort key of an id: the time-sortable part after the prefix. */
export function sortKey(id: string): string {
  const i = id.lastIndexOf("_");
  return (i >= 0 ? id.slice(i + 1) : id) + SEP + id;
}

export function resourceIndexKeys(doc: Resource): string[] {
  const s = sortKey(doc.id);
  const out = [
    `x!all!${s}`,
    `x!a!${doc.app_id}!${s}`,
    `x!t!${doc.type}!${s}`,
    `x!at!${doc.app_id}!${doc.type}!${s}`,
  ];
  if (doc.owner) out.push(`x!o!${doc.owner}!${s}`);
  return out;
}

export function eventIndexKeys(ev: PlatformEvent): string[] {
  const s = sortKey(ev.id);
  return [`y!all!${s}`, `y!a!${ev.app_id}!${s}`, `y!r!${ev.resource_id}!${s}`];
}

/** An entry of the resources bucket's watch: its JSON (null: a deletion) at a revision. */
export interface Watched {
  key: string;
  raw: string | null;
  rev: number;
}

/** A message of the events stream: its JSON, the log lines riding on it, its sequence. */
export interface FedEvent {
  json: string;
  folded: string | undefined;
  seq: number;
}
