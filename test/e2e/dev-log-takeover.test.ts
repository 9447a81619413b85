import anyTest, { type TestFn } from "ava";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ContainerRuntime } from "../../effects/docker.js";
import { devContainerName, type LogLine, STREAMS, subjects } from "../../proto/mod.js";
import type { Bus } from "../../store/bus.js";
import { readStream } from "../../store/read-stream.js";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import {
  call,
  eventually,
  newApp,
  type PlatformContext,
  platformPerFile,
  sleep,
  startTestPlatform,
  stopStub,
  tempDir,
  type TestPlatform,
  waitForEnd,
} from "../helpers/infra.js";

/**
 * Known gap 6 (docs/architecture.md), fixed: the log of a dev container is
 * followed by a node; when that node stops, the node that takes the app's
 * partition over follows it again from where its collection stopped, without
 * any call of the app. A real dev container on a private dockerd prints a
 * numbered line every 200 ms; node A starts it and stops; nothing is collected
 * while no node runs; node B starts and takes the partition over. Every line,
 * those printed while no node followed among them, reaches the resource's log
 * exactly once, stamped with the time it was printed.
 */
interface Ctx extends PlatformContext {
  dockerd: TestDockerd;
  /** An observer's bus (the platforms' own close with them). */
  admin: Bus;
  workspaces: string;
  /** The platforms a test starts itself (nodes B and C), stopped after the file. */
  more: TestPlatform[];
}
const test = anyTest as TestFn<Ctx>;

platformPerFile(test, {
  stubs: async (started) => {
    const engine = await startTestDockerd();
    if (!engine)
      throw new Error(
        `this test needs a real container engine (a private dockerd) for the dev container, and none can run here: ${dockerdMissing()}`,
      );
    return { dockerd: started(stopStub(engine)) };
  },
  // the node reads its engine from its environment (it runs in this process)
  processEnv: ({ dockerd }) => ({ DOCKER_HOST: dockerd.host }),
  platform: (ctx) => {
    ctx.workspaces = tempDir();
    return { workspaceRoot: ctx.workspaces, bridgeAddress: ctx.dockerd.hostAddress };
  },
  extra: async (_p, nats, ctx) => {
    ctx.more = [];
    return { admin: await nats.bus("test-dev-logs") };
  },
  teardown: async ({ more, admin, workspaces }) => {
    for (const p of more ?? []) await p.close().catch(() => {});
    await admin?.close().catch(() => {});
    if (workspaces) rmSync(workspaces, { recursive: true, force: true });
  },
});

/** Another platform (gateway and node, a node id of its own) on the file's NATS, its node's log kept. */
async function platform(t: { context: Ctx }, logs: string[]): Promise<TestPlatform> {
  const p = await startTestPlatform(t.context.nats, {
    workspaceRoot: t.context.workspaces,
    bridgeAddress: t.context.dockerd.hostAddress,
    log: (m) => logs.push(m),
  });
  t.context.more.push(p);
  return p;
}

interface Stored {
  line: LogLine;
  id: string;
}

/** The resource's stored log, with each line's message id. */
async function storedLog(bus: Bus, resourceId: string): Promise<Stored[]> {
  const out: Stored[] = [];
  for await (const m of readStream(bus, STREAMS.logs, subjects.log(resourceId)))
    out.push({ line: m.json<LogLine>(), id: m.headers?.get("Nats-Msg-Id") ?? "" });
  return out;
}

/** The container's numbered lines: `tick <n> <printed at, ms>`. */
function ticks(log: Stored[]): { n: number; printed: number; ts: number; id: string }[] {
  return log.flatMap((s) => {
    const m = /^tick (\d+) (\d+)$/.exec(s.line.line);
    return m ? [{ n: Number(m[1]), printed: Number(m[2]), ts: Date.parse(s.line.ts), id: s.id }] : [];
  });
}

test.serial(
  "a node that takes the partition over follows the running dev container's log again from where it stopped: the lines printed while no node followed reach the log, once, with the time they were printed",
  async (t) => {
    const nodeA = t.context.p;
    const app = await newApp(nodeA, "devlog");
    // the app's dev script: a server answering /health, and a numbered line every 200 ms
    const ws = join(t.context.workspaces, app.name);
    writeFileSync(
      join(ws, "package.json"),
      JSON.stringify({ name: app.name, private: true, scripts: { dev: "node ticker.cjs" } }),
    );
    writeFileSync(
      join(ws, "ticker.cjs"),
      [
        `let n = 0;`,
        `setInterval(() => console.log("tick " + n++ + " " + Date.now()), 200);`,
        `require("node:http").createServer((req, res) => res.end("ok")).listen(3000, "0.0.0.0");`,
      ].join("\n"),
    );
    mkdirSync(join(ws, "node_modules"), { recursive: true });

    const started = await call(nodeA.controlUrl, "run-dev-server", { app: app.name });
    t.is(started.status, 202, started.text);
    const id = started.body.resource.id as string;
    // the first start builds the platform's base image on the private engine
    const end = await waitForEnd(nodeA, "DevServer", id, {
      timeoutMs: 240_000,
      closing: ["DevServerStarted", "DevServerStopped"],
    });
    t.is(end.doc.status, "succeeded", JSON.stringify(end.doc));
    const bus = t.context.admin;
    await eventually(async () => ticks(await storedLog(bus, id)).length >= 5, 20_000, 100);

    // node A stops; its follower with it. The container goes on, and nobody collects its lines.
    await nodeA.close();
    const stoppedAt = Date.now();
    const before = ticks(await storedLog(bus, id));
    await sleep(2500);
    t.is(ticks(await storedLog(bus, id)).length, before.length, "nothing is collected while no node runs");

    // node B starts: it takes the partitions over; nobody calls the app
    const logsB: string[] = [];
    const nodeB = await platform(t, logsB);
    const tookOverAt = Date.now();
    const log = await eventually(
      async () => {
        const l = await storedLog(bus, id);
        return ticks(l).some((x) => x.printed > tookOverAt + 1500) ? l : undefined;
      },
      30_000,
      200,
    ).catch(async () => {
      const l = await storedLog(bus, id);
      t.fail(
        `no line printed after the takeover reached the log\n${l
          .slice(-5)
          .map((s) => s.line.line)
          .join("\n")}\nnode B: ${logsB.join("\n")}`,
      );
      return l;
    });
    const got = ticks(log);
    const numbers = got.map((x) => x.n);
    const max = Math.max(...numbers);
    t.deepEqual(
      [...numbers].sort((a, b) => a - b),
      Array.from({ length: max + 1 }, (_, i) => i),
      "every line from the first to the last, each once",
    );
    const meanwhile = got.filter((x) => x.printed > stoppedAt && x.printed < tookOverAt);
    t.true(meanwhile.length >= 8, `lines printed while no node followed: ${meanwhile.length}`);
    t.true(
      got.every((x) => Math.abs(x.ts - x.printed) < 1000),
      "each line is stamped with the time the container printed it, not the time it was collected",
    );
    t.true(new Set(got.map((x) => x.id)).size === got.length, "one message id per line");
    const notices = log.filter((s) => s.line.line.startsWith("following the container's log again"));
    t.is(notices.length, 1);
    t.regex(notices[0]!.line.line, /from the last line collected/);

    // a node that follows the container already does nothing on a second follow (status asks for one)
    const status = await call(nodeB.controlUrl, "run-dev-server", { app: app.name, action: "status" });
    t.is(status.status, 200, status.text);
    t.true(status.body.resource.container_running);
    await sleep(1000);
    const after = await storedLog(bus, id);
    const again = ticks(after).map((x) => x.n);
    t.is(new Set(again).size, again.length, "no line twice after the status call");
    t.is(after.filter((s) => s.line.line.startsWith("following the container's log again")).length, 1);

    // a node whose engine is another (here: none answers) says so and goes on with the app's commands
    await nodeB.close();
    process.env.DOCKER_HOST = `unix://${join(t.context.dockerd.dir, "elsewhere.sock")}`;
    try {
      const logsC: string[] = [];
      const nodeC = await platform(t, logsC);
      await eventually(
        async () => logsC.some((m) => m.includes(`cannot reach the engine of ${app.name}'s dev container`)),
        20_000,
        100,
      ).catch(() => t.fail(`node C did not say it cannot follow the container:\n${logsC.join("\n")}`));
      const set = await call(nodeC.controlUrl, "set-secret", { app: app.name, name: "AFTER", value: "x" });
      t.is(set.status, 200, set.text);
      await nodeC.close();
    } finally {
      process.env.DOCKER_HOST = t.context.dockerd.host;
    }
    await new ContainerRuntime({ host: t.context.dockerd.host }).stop(devContainerName(app.name));
  },
);
