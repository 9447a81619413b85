import { mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { type OutboxHost, reapplyOutboxes } from "../../actors/outbox.js";
import type { Outbox } from "../../proto/mod.js";

/**
 * A takeover re-applies the last batch's outboxes (their writes may not have
 * happened before the crash): a workspace file nobody wrote since the turn is
 * written, one changed since (a user's edit after the command) is left alone.
 */

function host(root: string): OutboxHost {
  return {
    workspaceRoot: root,
    bus: { pub: {} },
    vault: { open: () => Buffer.alloc(0) },
    sideEffect: async () => {},
  } as unknown as OutboxHost;
}

function outbox(at: Date, files: { path: string; content: string }[]): Outbox {
  return {
    command_id: "cmd_1",
    at: at.toISOString(),
    resources: [],
    vault: [],
    apps: [],
    events: [],
    logs: [],
    files,
  };
}

test("a re-applied outbox writes a missing or older file and keeps one changed after its turn", async (t) => {
  const root = mkdtempSync(join(tmpdir(), "slipway-reapply-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const turn = new Date(Date.now() - 60_000);
  const older = join(root, "older.yaml");
  const edited = join(root, "edited.yaml");
  writeFileSync(older, "before the turn\n");
  utimesSync(older, new Date(turn.getTime() - 60_000), new Date(turn.getTime() - 60_000));
  writeFileSync(edited, "the user's edit after the turn\n");
  await reapplyOutboxes(host(root), [
    outbox(turn, [
      { path: "older.yaml", content: "from the turn\n" },
      { path: "edited.yaml", content: "from the turn\n" },
      { path: "missing.yaml", content: "from the turn\n" },
    ]),
  ]);
  t.is(readFileSync(older, "utf8"), "from the turn\n", "the write that never happened is done");
  t.is(readFileSync(join(root, "missing.yaml"), "utf8"), "from the turn\n");
  t.is(readFileSync(edited, "utf8"), "the user's edit after the turn\n", "a later edit is not clobbered");
});
