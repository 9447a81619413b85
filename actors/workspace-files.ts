import { existsSync, readdirSync, readFileSync } from "node:fs";
import { isAbsolute, relative, resolve } from "node:path";
import type { Workspace, WorkspaceEntry } from "./context.js";

/** Files larger than this are not read into a turn (the reader answers undefined). */
const MAX_READ = 16 * 1024 * 1024;

/**
 * The read-only view of one app's workspace that handlers get from
 * `ctx.workspace(app)`: the app's own files, read in the turn, never written
 * (writes go into the outbox, applied after the commit). Paths are relative to
 * the workspace and cannot leave it.
 */
export function workspaceFiles(root: string, workspace: string): Workspace {
  const path = resolve(root, workspace);
  const at = (rel: string): string | undefined => {
    const full = resolve(path, rel);
    const r = relative(path, full);
    return r === "" || (!r.startsWith("..") && !isAbsolute(r)) ? full : undefined;
  };
  return {
    path,
    exists(rel) {
      const full = at(rel);
      return full !== undefined && existsSync(full);
    },
    read(rel) {
      const full = at(rel);
      if (full === undefined) return undefined;
      try {
        const text = readFileSync(full, "utf8");
        return text.length > MAX_READ ? undefined : text;
      } catch {
        return undefined;
      }
    },
    list(rel = "") {
      const full = at(rel);
      if (full === undefined) return [];
      try {
        return readdirSync(full, { withFileTypes: true }).map(
          (e): WorkspaceEntry => ({ name: e.name, dir: e.isDirectory(), file: e.isFile() }),
        );
      } catch {
        return [];
      }
    },
  };
}
