import { execFileSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
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

test("an outbox write never follows a link the app put in its workspace: a linked file is replaced, a linked folder is not written through", async (t) => {
  const root = mkdtempSync(join(tmpdir(), "slipway-outbox-links-"));
  const outside = mkdtempSync(join(tmpdir(), "slipway-outbox-outside-"));
  t.teardown(() => {
    rmSync(root, { recursive: true, force: true });
    rmSync(outside, { recursive: true, force: true });
  });
  const victim = join(outside, "victim.env");
  writeFileSync(victim, "SECRET=keep\n");
  mkdirSync(join(root, "shop"));
  symlinkSync(victim, join(root, "shop", "compose.prod.yaml"));
  symlinkSync(outside, join(root, "shop", "deploy"));
  mkfifoLike(join(root, "shop", "fifo.yaml"));
  await reapplyOutboxes(host(root), [
    outbox(new Date(), [
      { path: "shop/compose.prod.yaml", content: "services: {}\n" },
      { path: "shop/deploy/victim.env", content: "OWNED=1\n" },
      { path: "shop/deploy/new.txt", content: "planted\n" },
      { path: "shop/fifo.yaml", content: "written\n" },
    ]),
  ]);
  t.is(readFileSync(victim, "utf8"), "SECRET=keep\n", "the link's target is untouched");
  t.false(existsSync(join(outside, "new.txt")), "nothing is written through a linked folder");
  const written = join(root, "shop", "compose.prod.yaml");
  t.true(lstatSync(written).isFile(), "the link was replaced by a regular file");
  t.is(readFileSync(written, "utf8"), "services: {}\n");
  t.is(
    readFileSync(join(root, "shop", "fifo.yaml"), "utf8"),
    "written\n",
    "a FIFO is replaced, the write does not block",
  );
});

function mkfifoLike(path: string): void {
  execFileSync("mkfifo", [path]);
}
