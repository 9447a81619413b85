import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import type Docker from "dockerode";
import { IMAGE_LABELS, type ReleaseImageResult, releaseImage } from "../../infra/image.js";
import { PLATFORM_MODEL } from "../../proto/mod.js";
import { natsServerBinary } from "../../store/embedded-nats.js";
import { dockerAt } from "../helpers/busybox.js";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import { registryMissing, startTestRegistry, type TestRegistry } from "../helpers/registry.js";
import { REPO_ROOT } from "../helpers/repo.js";

/**
 * `releaseImage` (infra/image.ts, docs/release-image.md) on a private dockerd
 * (test/helpers/dockerd.ts) with Debian's registry beside it: the image is
 * built from this checkout (`npm run build` first), its binaries answer in a
 * container, `slipwayd up` in it answers /readyz at the container's address,
 * a second build gives the same image id, and the image pushed and pulled back
 * by digest into an engine that no longer has it has that id again. Needs
 * root, docker.io, docker-registry and nats-server.
 */

interface Ctx {
  dockerd: TestDockerd;
  registry: TestRegistry;
  d: Docker;
}
const test = anyTest as TestFn<Ctx>;
type T = ExecutionContext<Ctx>;
/** The first build (each test gets its own copy of the context: shared here). */
let built: ReleaseImageResult | undefined;

test.before(async (t) => {
  const missing = dockerdMissing() ?? registryMissing();
  if (missing) throw new Error(`no private dockerd and registry here: ${missing}`);
  for (const f of ["dist/bin/slipwayd.mjs", "dist/bin/node-thread.mjs", "dist/client/slipway.mjs"])
    if (!existsSync(join(REPO_ROOT, f))) throw new Error(`${f} is missing: run npm run build first`);
  const dockerd = await startTestDockerd();
  if (!dockerd) throw new Error(`a private dockerd cannot run here: ${dockerdMissing()}`);
  t.context.dockerd = dockerd;
  t.context.registry = await startTestRegistry(dockerd.hostAddress);
  t.context.d = dockerAt(dockerd.host);
});

test.after.always(async (t) => {
  await t.context.registry?.stop();
  await t.context.dockerd?.stop();
});

/** Runs the image to its end with no network; its exit code and output. */
async function runOnce(
  d: Docker,
  image: string,
  cmd: string[],
  entrypoint?: string[],
): Promise<{ exitCode: number; output: string }> {
  const c = await d.createContainer({
    Image: image,
    Cmd: cmd,
    ...(entrypoint ? { Entrypoint: entrypoint } : {}),
    Tty: true,
    HostConfig: { NetworkMode: "none" },
  });
  try {
    await c.start();
    const { StatusCode } = (await c.wait()) as { StatusCode: number };
    const logs = (await c.logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer;
    return { exitCode: StatusCode, output: logs.toString("utf8").replace(/\r/g, "").trim() };
  } finally {
    await c.remove({ force: true }).catch(() => {});
  }
}

const build = (t: T, push?: string) =>
  releaseImage({
    checkout: REPO_ROOT,
    engine: t.context.d,
    ...(push ? { push } : {}),
    progress: (l) => t.log(l),
  });

test.serial("builds the image from the checkout: versions, labels, a non-root user", async (t) => {
  const t0 = Date.now();
  const r = await build(t);
  t.log(
    `built in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${r.image_id}, ${(r.size_bytes / 1e6).toFixed(1)} MB`,
  );
  built = r;
  t.regex(r.image_id, /^sha256:[0-9a-f]{64}$/);
  t.is(r.reference, r.image_id);
  t.is(r.digest, undefined);
  t.is(r.contents.node, process.versions.node);
  const hostNats = spawnSync(natsServerBinary(), ["--version"], { encoding: "utf8" }).stdout.trim();
  t.true(hostNats.includes(r.contents.nats_server), `${hostNats} vs ${r.contents.nats_server}`);
  const head = spawnSync("git", ["-C", REPO_ROOT, "rev-parse", "HEAD"], { encoding: "utf8" }).stdout.trim();
  const { version } = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as {
    version: string;
  };
  t.true(r.contents.slipwayd.startsWith(`${version}+${head.slice(0, 12)}`), r.contents.slipwayd);

  const info = await t.context.d.getImage(r.image_id).inspect();
  t.is(info.Size, r.size_bytes);
  t.is(info.Config.User, "10001:10001");
  t.deepEqual(info.Config.Entrypoint, ["/usr/local/bin/node", "/app/dist/bin/slipwayd.mjs"]);
  const labels = info.Config.Labels ?? {};
  t.is(labels["org.opencontainers.image.revision"], head);
  t.is(labels[IMAGE_LABELS.node], r.contents.node);
  t.is(labels[IMAGE_LABELS.natsServer], r.contents.nats_server);
  t.is(labels[IMAGE_LABELS.slipwayd], r.contents.slipwayd);
  t.is(labels[IMAGE_LABELS.platformModel], PLATFORM_MODEL);

  // what runs in it: nats-server, slipwayd's usage, node as the image's user
  const nats = await runOnce(t.context.d, r.image_id, ["--version"], ["nats-server"]);
  t.log(`nats-server --version in the image: ${nats.output}`);
  t.is(nats.exitCode, 0);
  t.is(nats.output, hostNats);
  const help = await runOnce(t.context.d, r.image_id, ["--help"]);
  t.is(help.exitCode, 0, help.output);
  t.true(help.output.startsWith(`slipwayd: the Slipway platform (model ${PLATFORM_MODEL})`), help.output);
  const who = await runOnce(
    t.context.d,
    r.image_id,
    ["-p", "[process.getuid(), require('/app/package.json').version].join(' ')"],
    ["node"],
  );
  t.is(who.exitCode, 0, who.output);
  t.is(who.output, `10001 ${version}`);

  // the packages the bundles leave external load, native addons included (uWebSockets.js warns and
  // falls back to JavaScript when its binary cannot load), with this node's uws binary only
  const load = [
    "import { readdirSync } from 'node:fs';",
    "for (const p of ['uWebSockets.js', 'classic-level', '@node-rs/argon2', 'dockerode', '@anthropic-ai/sdk']) await import(p);",
    "console.log(readdirSync('/app/node_modules/uWebSockets.js/binaries').join(','));",
  ].join(" ");
  const loaded = await runOnce(t.context.d, r.image_id, ["--input-type=module", "-e", load], ["node"]);
  t.is(loaded.exitCode, 0, loaded.output);
  t.is(loaded.output, `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`);

  // the build tools a node runs for apps: git (a commit in a fresh repository), npm (its entry
  // through /usr/bin/env node), sh and tar (busybox)
  const tools = await runOnce(
    t.context.d,
    r.image_id,
    [
      "-c",
      "cd /tmp && git init -q r && cd r && echo x > f && git -c user.name=a -c user.email=a@b add f && git -c user.name=a -c user.email=a@b commit -qm m && git archive HEAD | tar -t && npm --version && echo ok",
    ],
    ["/bin/sh"],
  );
  t.is(tools.exitCode, 0, tools.output);
  t.regex(tools.output, /(^|\n)f\n\d+\.\d+\.\d+\nok$/);
});

test.serial("slipwayd up in the image answers /readyz at the container's address", async (t) => {
  const { d } = t.context;
  const r = built;
  if (!r) return t.fail("the image was not built");
  const c = await d.createContainer({ Image: r.image_id, HostConfig: { NetworkMode: "bridge" } });
  try {
    await c.start();
    const address = (await c.inspect()).NetworkSettings.Networks.bridge?.IPAddress ?? "";
    t.truthy(address);
    const base = `http://${address}:3717`;
    const deadline = Date.now() + 60_000;
    let status = 0;
    let body: unknown;
    while (Date.now() < deadline) {
      try {
        const res = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(2000) });
        status = res.status;
        body = await res.json();
        if (status === 200) break;
      } catch {
        // not listening yet
      }
      await new Promise((res) => setTimeout(res, 250));
    }
    const logs = async () =>
      ((await c.logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer).toString("utf8");
    t.is(status, 200, `readyz ${status} ${JSON.stringify(body)}\n${await logs()}`);
    t.like(body, { status: "ready", bus: true });
    const version = (await (await fetch(`${base}/version`)).json()) as { platform_model: string };
    t.is(version.platform_model, PLATFORM_MODEL);
    // slipwayd (pid 1: no init) takes SIGTERM once it has said it is ready; stopped then, it shuts down
    // gracefully and exits 0
    const said = Date.now() + 30_000;
    while (!(await logs()).includes("slipwayd up ready in") && Date.now() < said)
      await new Promise((res) => setTimeout(res, 100));
    const s0 = Date.now();
    await c.stop({ t: 20 });
    const state = (await c.inspect()).State;
    const out = (await logs()).replace(/[^\n\t\x20-\x7e]/g, "");
    t.log(`stopped in ${Date.now() - s0} ms, exit ${state.ExitCode}`);
    t.log(
      out
        .split("\n")
        .filter((l) => /ready in|shutting down/.test(l))
        .join(" | "),
    );
    t.regex(out, /slipwayd up ready in \d+ ms: nats nats:\/\/127\.0\.0\.1:\d+/);
    t.regex(out, /slipwayd: SIGTERM, shutting down/);
    t.is(state.ExitCode, 0, out);
  } finally {
    await c.remove({ force: true }).catch(() => {});
  }
});

test.serial(
  "a second build gives the same image id; pushed and pulled back by digest, it is that image",
  async (t) => {
    const { d, registry } = t.context;
    const first = built;
    if (!first) return t.fail("the image was not built");
    const r = await build(t, registry.host);
    t.is(r.image_id, first.image_id, "the same checkout gives the same image id");
    t.regex(r.digest ?? "", /^sha256:[0-9a-f]{64}$/);
    t.is(r.reference, `${registry.host}/slipway/platform@${r.digest}`);

    // the registry serves that manifest, whose config is the image
    const res = await fetch(`http://${registry.host}/v2/slipway/platform/manifests/${r.digest}`, {
      headers: { accept: "application/vnd.docker.distribution.manifest.v2+json" },
    });
    t.is(res.status, 200);
    t.is(res.headers.get("docker-content-digest"), r.digest ?? "");
    const manifest = (await res.json()) as { config: { digest: string }; layers: Array<{ size: number }> };
    t.log(`the registry holds one layer of ${((manifest.layers[0]?.size ?? 0) / 1e6).toFixed(1)} MB (gzip)`);
    t.is(manifest.config.digest, r.image_id);
    t.is(manifest.layers.length, 1);

    // a clean engine state: the image gone under every name, then pulled by digest
    await d.getImage(r.image_id).remove({ force: true });
    const gone = await d
      .getImage(r.image_id)
      .inspect()
      .then(
        () => 200,
        (e: { statusCode?: number }) => e.statusCode ?? 0,
      );
    t.is(gone, 404);
    const stream = await d.pull(r.reference, {});
    await new Promise<void>((resolve, reject) =>
      d.modem.followProgress(stream, (err: Error | null, events: Array<{ error?: string }>) => {
        const bad = events?.find((e) => e.error);
        if (err || bad) reject(err ?? new Error(bad?.error));
        else resolve();
      }),
    );
    const pulled = await d.getImage(r.reference).inspect();
    t.is(pulled.Id, first.image_id);
    t.true((pulled.RepoDigests ?? []).includes(r.reference));
    const nats = await runOnce(d, r.reference, ["--version"], ["nats-server"]);
    t.is(nats.exitCode, 0);
    t.true(nats.output.includes(r.contents.nats_server));
  },
);
