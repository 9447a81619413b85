import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { readContained, workspaceFiles } from "../../actors/workspace-files.js";
import { isPlatformError } from "../../proto/mod.js";

/** A data dir with two apps' workspaces, `a` and `b` (b's `.env` is the file a must never read). */
function twoApps(): { root: string; a: string; b: string; done: () => void } {
  const root = mkdtempSync(join(tmpdir(), "slipway-ws-"));
  const a = join(root, "apps", "a");
  const b = join(root, "apps", "b");
  mkdirSync(a, { recursive: true });
  mkdirSync(b, { recursive: true });
  writeFileSync(join(b, ".env"), "SLIPWAY_TOKEN=b-token\n");
  writeFileSync(join(a, "package.json"), '{"scripts":{"dev":"node ."}}');
  return { root, a, b, done: () => rmSync(root, { recursive: true, force: true }) };
}

/** The refusal `p` rejects with: its status and message (fails the test when it resolves). */
async function refusal(p: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await p;
  } catch (e) {
    if (isPlatformError(e)) return { code: e.code, message: e.message };
    throw e;
  }
  throw new Error("the read was not refused");
}

test("a regular file inside the workspace is read; a missing one is undefined", async (t) => {
  const w = twoApps();
  t.teardown(w.done);
  t.is(await readContained(w.a, "package.json"), '{"scripts":{"dev":"node ."}}');
  t.is(await readContained(w.a, "nope.json"), undefined);
  t.is(await readContained(w.a, "nope/deeper.json"), undefined);
  const ws = workspaceFiles(w.root, "apps/a");
  t.is(await ws.read("package.json"), '{"scripts":{"dev":"node ."}}');
  t.true(ws.exists("package.json"));
});

test("a FIFO is refused at once, naming it (the open does not wait for a writer)", async (t) => {
  const w = twoApps();
  t.teardown(w.done);
  execFileSync("mkfifo", [join(w.a, "compose.prod.yaml")]);
  const t0 = Date.now();
  const r = await refusal(readContained(w.a, "compose.prod.yaml", { timeoutMs: 2000 }));
  t.true(Date.now() - t0 < 1000, `${Date.now() - t0} ms`);
  t.is(r.code, "precondition_failed");
  t.regex(r.message, /^compose\.prod\.yaml is a FIFO/);
});

test("a symbolic link is refused naming the file: to another app's file, and to /dev/zero", async (t) => {
  const w = twoApps();
  t.teardown(w.done);
  symlinkSync(join(w.b, ".env"), join(w.a, ".env.prod"));
  symlinkSync("../b/.env", join(w.a, "relative.env"));
  symlinkSync("/dev/zero", join(w.a, "zero.yaml"));
  for (const f of [".env.prod", "relative.env", "zero.yaml"]) {
    const r = await refusal(readContained(w.a, f));
    t.is(r.code, "precondition_failed", f);
    t.is(r.message.split(";")[0], `${f} is a symbolic link`);
  }
});

test("a folder of the path that is a symbolic link leading out of the workspace is refused; list and exists do not follow it", async (t) => {
  const w = twoApps();
  t.teardown(w.done);
  symlinkSync(w.b, join(w.a, "config"));
  const r = await refusal(readContained(w.a, "config/.env"));
  t.regex(r.message, /^config\/\.env has a symbolic link in its path that leads outside/);
  const ws = workspaceFiles(w.root, "apps/a");
  t.deepEqual(await ws.list("config"), []);
  t.false(ws.exists("config/.env"));
  // a link whose target stays inside is a folder like any other
  mkdirSync(join(w.a, "real"));
  writeFileSync(join(w.a, "real", "x.txt"), "x");
  symlinkSync("real", join(w.a, "alias"));
  t.is(await readContained(w.a, "alias/x.txt"), "x");
});

test("a device, a socket, a directory and a path leaving the workspace by name are refused", async (t) => {
  const w = twoApps();
  t.teardown(w.done);
  // the workspace root itself under a link (a data dir reached through one) is not a refusal
  symlinkSync(w.a, join(w.root, "a-link"));
  t.truthy(await readContained(join(w.root, "a-link"), "package.json"));
  t.regex((await refusal(readContained("/dev", "zero"))).message, /^zero is a device/);
  const sock = join(w.a, "s.sock");
  const server = createServer();
  await new Promise<void>((r) => server.listen(sock, r));
  t.teardown(() => server.close());
  t.regex((await refusal(readContained(w.a, "s.sock"))).message, /^s\.sock is a socket/);
  mkdirSync(join(w.a, "package.d"));
  t.regex((await refusal(readContained(w.a, "package.d"))).message, /^package\.d is a directory/);
  t.regex((await refusal(readContained(w.a, "../b/.env"))).message, /^\.\.\/b\/\.env is outside/);
});

test("a file past the cap is refused from its size, before it is read", async (t) => {
  const w = twoApps();
  t.teardown(w.done);
  writeFileSync(join(w.a, "big.json"), "x".repeat(2048));
  t.is((await readContained(w.a, "big.json", { cap: 2048 }))?.length, 2048);
  const r = await refusal(readContained(w.a, "big.json", { cap: 1024 }));
  t.regex(r.message, /^big\.json is larger than 1024 bytes/);
});
