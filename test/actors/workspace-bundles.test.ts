import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { WorkspaceBundles } from "../../actors/workspace-bundles.js";
import { openEnv } from "../../actors/workspace-env.js";
import { Vault } from "../../store/vault.js";
import { commitAll, git, headCommit, tagCommit } from "../../effects/git.js";
import type { Bus } from "../../store/bus.js";
import {
  call,
  eventually,
  startTestNats,
  startTestPlatform,
  type TestNats,
  type TestPlatform,
  tempDir as newTempDir,
  waitForEnd,
} from "../helpers/infra.js";

/**
 * Workspaces leave the node's disk (DESIGN §12): a workspace repository saved as a git bundle in
 * the object store `slipway_workspaces` and restored from it, against a real nats-server, as the
 * node role (its NATS permissions); and a platform whose app's workspace is wiped restores it
 * before a command that reads it, on the same node and on a node that takes the app over.
 */

/** The temp folders of this file, removed after its tests. */
const made: string[] = [];
function tempDir(prefix?: string): string {
  const d = newTempDir(prefix);
  made.push(d);
  return d;
}

// no container engine: nothing here needs one (inspect scripts reads files only)
process.env.DOCKER_HOST = `unix://${join(tempDir(), "no-docker.sock")}`;

interface Ctx {
  nats: TestNats;
  bus: Bus;
  bundles: WorkspaceBundles;
  logs: string[];
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("bundles-test", "node");
  const logs: string[] = [];
  const bundles = await WorkspaceBundles.open(bus.js, { replicas: 1, log: (m) => logs.push(m) });
  t.context = { nats, bus, bundles, logs };
});

test.after.always(async (t) => {
  await t.context.bus?.close();
  await t.context.nats?.stop();
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

const appName = (prefix: string) => `${prefix}-${randomUUID().slice(0, 8)}`;

/** A workspace repository with `files`, committed by the platform's git helper. */
async function repo(
  files: Record<string, string>,
  message = "first",
): Promise<{ dir: string; head: string }> {
  const dir = join(tempDir("slipway-ws-"), "app");
  mkdirSync(dir);
  return { dir, head: await commitFiles(dir, files, message) };
}

async function commitFiles(dir: string, files: Record<string, string>, message: string): Promise<string> {
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(dir, path, ".."), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  return (await commitAll(dir, message)).commit;
}

test("save, then restore into a wiped folder: the same HEAD, branch, tags and files", async (t) => {
  const { bundles } = t.context;
  const app = appName("save");
  const a = await repo({ "package.json": '{"name":"a"}\n', "src/server.js": "console.log(1)\n" });
  await tagCommit(a.dir, "release-x", a.head);
  t.is(await bundles.headOf(app), undefined);
  const saved = await bundles.save(app, a.dir);
  t.deepEqual(saved, { outcome: "saved", head: a.head });
  t.is(await bundles.headOf(app), a.head);

  const target = join(tempDir("slipway-ws-"), "app");
  const r = await bundles.restore(app, target);
  t.is(r.outcome, "restored");
  t.is(await headCommit(target), a.head);
  t.is(readFileSync(join(target, "src/server.js"), "utf8"), "console.log(1)\n");
  t.is(readFileSync(join(target, "package.json"), "utf8"), '{"name":"a"}\n');
  t.is((await git(target, ["symbolic-ref", "HEAD"])).stdout.trim(), "refs/heads/main");
  t.is((await git(target, ["rev-parse", "release-x"])).stdout.trim(), a.head);
  t.deepEqual((await git(target, ["status", "--porcelain"])).stdout, "");
  t.deepEqual(
    (await git(target, ["for-each-ref", "--format=%(refname)", "refs/slipway/"])).stdout,
    "",
    "no refs of the restore's own are left",
  );
  // an empty folder in place of the workspace counts as missing too
  const empty = join(tempDir("slipway-ws-"), "app");
  mkdirSync(empty);
  t.is((await bundles.restore(app, empty)).outcome, "restored");
  t.is(await headCommit(empty), a.head);
  // the restored copy is current: nothing to do
  t.deepEqual(await bundles.restore(app, target), { outcome: "current", head: a.head });
});

test("a second save without a new commit stores nothing new; a new tag or commit does", async (t) => {
  const { bundles } = t.context;
  const app = appName("again");
  const a = await repo({ "README.md": "hello\n" });
  t.is((await bundles.save(app, a.dir)).outcome, "saved");
  const first = await bundles.store.info(app);
  t.is((await bundles.save(app, a.dir)).outcome, "unchanged");
  const second = await bundles.store.info(app);
  t.is(second?.revision, first?.revision, "the object was not written again");
  t.is(second?.mtime, first?.mtime);
  await tagCommit(a.dir, "release-1", a.head);
  t.is((await bundles.save(app, a.dir)).outcome, "saved", "a new ref is saved");
  const c2 = await commitFiles(a.dir, { "README.md": "hello again\n" }, "second");
  t.deepEqual(await bundles.save(app, a.dir), { outcome: "saved", head: c2 });
  t.is(await bundles.headOf(app), c2);
});

test("restore over a copy that is behind fast-forwards it, keeping the builder's own uncommitted file", async (t) => {
  const { bundles } = t.context;
  const app = appName("behind");
  const a = await repo({ "a.txt": "one\n" });
  await bundles.save(app, a.dir);
  const b = join(tempDir("slipway-ws-"), "app");
  t.is((await bundles.restore(app, b)).outcome, "restored");
  // the app moves on elsewhere (another node commits and saves)
  const c2 = await commitFiles(a.dir, { "a.txt": "two\n", "b.txt": "new\n" }, "second");
  await tagCommit(a.dir, "release-2", c2);
  await bundles.save(app, a.dir);
  writeFileSync(join(b, "notes.txt"), "the builder's own, not committed\n");
  t.is(await headCommit(b), a.head);
  const r = await bundles.restore(app, b);
  t.deepEqual(r, { outcome: "fast-forwarded", head: c2 });
  t.is(await headCommit(b), c2);
  t.is(readFileSync(join(b, "a.txt"), "utf8"), "two\n");
  t.is(readFileSync(join(b, "b.txt"), "utf8"), "new\n");
  t.is(readFileSync(join(b, "notes.txt"), "utf8"), "the builder's own, not committed\n");
  t.is((await git(b, ["rev-parse", "release-2"])).stdout.trim(), c2);
  t.is((await git(b, ["symbolic-ref", "HEAD"])).stdout.trim(), "refs/heads/main");
  t.deepEqual((await git(b, ["for-each-ref", "--format=%(refname)", "refs/slipway/"])).stdout, "");
  t.true(t.context.logs.some((l) => l.includes(app) && l.includes("fast-forwarded")));
});

test("a copy that is ahead is kept and saved instead; a stale copy never overwrites a newer bundle", async (t) => {
  const { bundles, logs } = t.context;
  const app = appName("ahead");
  const a = await repo({ "a.txt": "one\n" });
  await bundles.save(app, a.dir);
  const b = join(tempDir("slipway-ws-"), "app");
  await bundles.restore(app, b);
  const c2 = await commitFiles(b, { "a.txt": "two, made on this node\n" }, "ahead");
  const r = await bundles.restore(app, b);
  t.is(r.outcome, "kept");
  t.is(r.reason, "ahead");
  t.is(await headCommit(b), c2, "the local copy is as it was");
  t.is(readFileSync(join(b, "a.txt"), "utf8"), "two, made on this node\n");
  t.is(await bundles.headOf(app), c2, "and it was saved instead");
  t.true(logs.some((l) => l.includes(app) && /ahead of its bundle .*kept, and saved instead/.test(l)));
  // the first copy is behind now: its save leaves the newer bundle alone
  t.is((await bundles.save(app, a.dir)).outcome, "behind");
  t.is(await bundles.headOf(app), c2);
});

test("a copy that went another way is kept and saved, the stored HEAD kept under refs/slipway/diverged", async (t) => {
  const { bundles } = t.context;
  const app = appName("fork");
  const a = await repo({ "a.txt": "one\n" });
  await bundles.save(app, a.dir);
  const b = join(tempDir("slipway-ws-"), "app");
  await bundles.restore(app, b);
  const ca = await commitFiles(a.dir, { "a.txt": "from a\n" }, "a");
  await bundles.save(app, a.dir);
  const cb = await commitFiles(b, { "b.txt": "from b\n" }, "b");
  const r = await bundles.restore(app, b);
  t.is(r.outcome, "kept");
  t.is(r.reason, "diverged");
  t.is(await headCommit(b), cb);
  t.is((await git(b, ["rev-parse", `refs/slipway/diverged/${ca}`])).stdout.trim(), ca);
  t.is(await bundles.headOf(app), cb);
});

test("a workspace whose .git is a symbolic link is neither saved nor restored over", async (t) => {
  const { bundles } = t.context;
  const app = appName("link");
  const a = await repo({ "a.txt": "one\n" });
  await bundles.save(app, a.dir);
  const elsewhere = await repo({ "x.txt": "elsewhere\n" });
  const b = join(tempDir("slipway-ws-"), "app");
  mkdirSync(b);
  writeFileSync(join(b, "a.txt"), "mine\n");
  symlinkSync(join(elsewhere.dir, ".git"), join(b, ".git"));
  await t.throwsAsync(bundles.save(appName("other"), b), { message: /\.git is not a folder/ });
  await t.throwsAsync(bundles.restore(app, b), { message: /\.git is not a folder/ });
  t.is(readFileSync(join(b, "a.txt"), "utf8"), "mine\n");
  t.is(await headCommit(elsewhere.dir), elsewhere.head, "nothing moved in the repository the link names");
});

test("a wiped workspace: the node restores it from the bundle before inspect reads it, and a node that takes the app over on a wiped disk restores it, installs and builds", async (t) => {
  const { nats, bundles } = t.context;
  const workspaces = tempDir();
  const platforms: TestPlatform[] = [];
  try {
    const p1 = await startTestPlatform(nats, { workspaceRoot: workspaces });
    platforms.push(p1);
    const app = appName("wiped");
    const init = await call(p1.controlUrl, "initialize-app", { name: app });
    t.is(init.status, 200, init.text);
    const ws = join(workspaces, app);
    // initialize-app commits the starter; the node saves the bundle right after
    const head = await eventually(async () => {
      const h = await headCommit(ws);
      return h && (await bundles.headOf(app)) === h ? h : undefined;
    }, 20_000);
    const before = await call(p1.controlUrl, "inspect", { app, type: "scripts" });
    t.is(before.status, 200, before.text);

    rmSync(ws, { recursive: true, force: true }); // a wiped disk
    const same = await call(p1.controlUrl, "inspect", { app, type: "scripts" });
    t.is(same.status, 200, same.text);
    t.deepEqual(same.body.result, before.body.result);
    t.is(await headCommit(ws), head);
    t.true(existsSync(join(ws, "package.json")));

    // the node goes away; its disk is wiped; another node takes the app over
    await p1.close();
    platforms.length = 0;
    rmSync(ws, { recursive: true, force: true });
    const p2 = await startTestPlatform(nats, { workspaceRoot: workspaces, nodeId: "n-takeover" });
    platforms.push(p2);
    // the app's first command on the new node, one that does not read the workspace: the node
    // starts the restore as it takes the app over (that command does not wait for it)
    const secret = await call(p2.controlUrl, "set-secret", { app, name: "K", value: "v" });
    t.is(secret.status, 200, secret.text);
    t.is(
      await eventually(async () => ((await headCommit(ws)) === head ? head : undefined), 15_000),
      head,
      "restored at the takeover",
    );
    const after = await call(p2.controlUrl, "inspect", { app, type: "scripts" });
    t.is(after.status, 200, after.text);
    t.deepEqual(after.body.result, before.body.result);
    t.is(await headCommit(ws), head);
    // what a builder does next on the new node: install the dependencies (not in the bundle:
    // node_modules is ignored) and build, both from the restored sources
    const install = await call(p2.controlUrl, "install-dependencies", { app });
    t.is(install.status, 202, install.text);
    const installed = await waitForEnd(p2, install.body.resource.type, install.body.resource.id, {
      timeoutMs: 180_000,
    });
    t.is(installed.doc.status, "succeeded", JSON.stringify(installed.doc));
    const build = await call(p2.controlUrl, "build", { app });
    t.is(build.status, 202, build.text);
    const built = await waitForEnd(p2, "Build", build.body.resource.id, { timeoutMs: 180_000 });
    t.is(built.doc.status, "succeeded", JSON.stringify(built.doc));
    t.is(await headCommit(ws), head, "built on the restored commit");
  } finally {
    for (const p of platforms) await p.close().catch(() => undefined);
  }
});

test("the env files travel sealed beside the bundle: a wiped workspace gets them back (0600), never a link's target", async (t) => {
  const { bus } = t.context;
  const vault = new Vault({ keys: new Map([["k1", Buffer.alloc(32, 9)]]), active: "k1", oldest: "k1" });
  const logs: string[] = [];
  const bundles = await WorkspaceBundles.open(bus.js, {
    replicas: 1,
    log: (m) => logs.push(m),
    sealer: vault,
  });
  const app = appName("env");
  // .env files are never committed (the starter's .gitignore says so)
  const a = await repo({ ".gitignore": ".env*\n", "package.json": '{"name":"e"}\n' });
  writeFileSync(join(a.dir, ".env.prod"), "API_KEY=s3cret-value\n", { mode: 0o600 });
  writeFileSync(join(a.dir, ".env"), "DEV=1\n");
  const outside = join(tempDir("slipway-ws-"), "host-file");
  writeFileSync(outside, "NOT_FOR_THE_APP=1\n");
  symlinkSync(outside, join(a.dir, ".env.local"));
  t.is((await bundles.save(app, a.dir)).outcome, "saved");
  // what the store holds is sealed: no value in clear
  const stored = Buffer.from((await bundles.store.getEnv(app))!).toString("utf8");
  t.false(stored.includes("s3cret-value"));
  t.false(stored.includes("NOT_FOR_THE_APP"));

  const target = join(tempDir("slipway-ws-"), "app");
  t.is((await bundles.restore(app, target)).outcome, "restored");
  t.is(readFileSync(join(target, ".env.prod"), "utf8"), "API_KEY=s3cret-value\n");
  t.is(statSync(join(target, ".env.prod")).mode & 0o777, 0o600);
  t.is(readFileSync(join(target, ".env"), "utf8"), "DEV=1\n");
  t.false(existsSync(join(target, ".env.local")), "a link is never saved, nor what it points at");
  t.true(
    logs.some((l) => /env files restored: \.env, \.env\.prod/.test(l)),
    logs.join("\n"),
  );

  // a changed file is saved again at the next save; a file the workspace has is never overwritten
  writeFileSync(join(target, ".env.prod"), "API_KEY=rotated\n");
  await bundles.save(app, target);
  const again = join(tempDir("slipway-ws-"), "app");
  await bundles.restore(app, again);
  t.is(readFileSync(join(again, ".env.prod"), "utf8"), "API_KEY=rotated\n");

  // another app's name does not open it (the app is in the sealed data's associated data)
  t.throws(() => openEnv(vault, `${app}x`, Buffer.from(stored)));
  // without a vault nothing is saved or restored
  const plain = await WorkspaceBundles.open(bus.js, { replicas: 1 });
  const bare = join(tempDir("slipway-ws-"), "app");
  await plain.restore(app, bare);
  t.false(existsSync(join(bare, ".env.prod")));
});
