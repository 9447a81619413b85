import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import type { Bus } from "../../store/bus.js";
import { readStream } from "../../store/read-stream.js";

/**
 * "Nothing secret is stored in clear": the places a test searches for a secret value, a token or
 * a password. Every message of every stream, every revision of every KV bucket (read as the NATS
 * admin), and every file under the given folders (the data dir, the NATS store), each as latin1
 * text so that bytes are found whatever the encoding around them.
 */

/** One place searched, and its text. */
export interface Haystack {
  where: string;
  text: string;
}

/** Files past this size are skipped (none of the platform's own files comes near it). */
const MAX_FILE = 64 * 1024 * 1024;

/**
 * Every message of every stream on the server (the platform's streams, and the KV buckets'
 * `KV_<bucket>` streams: every revision), subject and data.
 */
export async function busHaystacks(admin: Bus): Promise<Haystack[]> {
  const out: Haystack[] = [];
  const jsm = await jetstreamManager(admin.nc);
  for await (const si of jsm.streams.list()) {
    for await (const m of readStream(admin, si.config.name, ">"))
      out.push({
        where: `${si.config.name} ${m.subject} #${m.seq}`,
        text: `${m.subject} ${Buffer.from(m.data).toString("latin1")}`,
      });
  }
  return out;
}

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...filesUnder(p));
    else if (e.isFile()) out.push(p);
  }
  return out;
}

/** Every file under `dirs` (named relative to its folder). */
export function fileHaystacks(...dirs: string[]): Haystack[] {
  const out: Haystack[] = [];
  for (const dir of dirs) {
    for (const f of filesUnder(dir)) {
      if (statSync(f).size > MAX_FILE) continue;
      out.push({ where: f.slice(dir.length) || f, text: readFileSync(f).toString("latin1") });
    }
  }
  return out;
}

/** Where `needle` occurs (empty when nowhere). */
export function foundIn(haystacks: readonly Haystack[], needle: string): string[] {
  return haystacks.filter((h) => h.text.includes(needle)).map((h) => h.where);
}
