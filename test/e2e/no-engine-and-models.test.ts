import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  call,
  eventually,
  get,
  startWorkspacePlatform,
  stopWorkspacePlatform,
  tempDir,
  type WorkspacePlatform,
} from "../helpers/infra.js";
import { SAMPLE_PLAN, SAMPLE_READING, startMessagesApi, type MessagesApi } from "../helpers/messages-api.js";
import { runSlipway } from "../helpers/cli-run.js";
import { handlerOf } from "../../actors/handlers.js";
import { registerHandler } from "../../actors/testing.js";
import type { Effect, HandlerContext } from "../../actors/context.js";

/**
 * Without a container engine run-dev-server answers 503 and the rest of the
 * loop still works; the model paths (generate-feature-plan, explain-failure's
 * reading) run the real SDK against a local Messages API server.
 */
interface Ctx extends WorkspacePlatform {
  api: MessagesApi;
  app: string;
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  // an engine that is not there
  process.env.DOCKER_HOST = `unix://${join(tempDir(), "no-docker.sock")}`;
  const api = await startMessagesApi();
  process.env.ANTHROPIC_BASE_URL = api.url;
  process.env.SLIPWAY_MODEL_MAX_RETRIES = "0";
  const base = await startWorkspacePlatform();
  const app = `nodk${randomUUID().slice(0, 6)}`;
  t.context = { ...base, api, app };
  const init = await runSlipway(base.p.controlUrl, ["init", "app", "--name", app, "--json"]);
  if (init.code !== 0) throw new Error(`init: ${init.stdout} ${init.stderr}`);
});

test.after.always(async (t) => {
  await stopWorkspacePlatform(t.context);
  await t.context.api?.close();
});

const slipway = (t: { context: Ctx }, ...argv: string[]) => runSlipway(t.context.p.controlUrl, argv);

async function waitEnd(t: { context: Ctx }, type: string, id: string) {
  return eventually(async () => {
    const r = await get(t.context.p.controlUrl, `/resources/${type}/${id}`);
    const doc = r.body as { status: string };
    return doc.status === "running" ? undefined : (doc as Record<string, any>);
  }, 30_000);
}

test.serial(
  "without a container engine run-dev-server answers 503 container_runtime_unavailable, and install, build, test, lint still work",
  async (t) => {
    const { app } = t.context;
    const dev = await call(t.context.p.controlUrl, "run-dev-server", { app, action: "start" });
    t.is(dev.status, 503);
    t.is(dev.body.error.code, "container_runtime_unavailable");
    t.regex(dev.body.error.message, /container engine/i);
    const cli = await slipway(t, "dev", "--app", app, "--json");
    t.is(cli.code, 4);
    const docker = await slipway(t, "inspect", "docker", "--app", app, "--json");
    t.is(docker.code, 0);
    t.is(docker.json.resource.result.available, false);
    for (const verb of ["install", "build", "test", "lint"]) {
      const r = await slipway(t, verb, "--app", app, "--json");
      t.is(r.code, 0, `${verb}: ${r.stdout} ${r.stderr}`);
      t.is(r.json.resource.status, "succeeded");
    }
    const scripts = await slipway(t, "inspect", "scripts", "--app", app, "--json");
    t.true(scripts.json.resource.result.items.some((s: { name: string }) => s.name === "build"));
    const routes = await slipway(t, "inspect", "routes", "--app", app, "--json");
    const paths = routes.json.resource.result.items.map(
      (r: { method: string; path: string }) => `${r.method} ${r.path}`,
    );
    t.true(paths.includes("GET /health") && paths.includes("GET /auth/config"), paths.join(", "));
  },
);

test.serial(
  "generate-feature-plan without a model key answers 503 model_unavailable before making anything",
  async (t) => {
    delete process.env.ANTHROPIC_API_KEY;
    const r = await call(t.context.p.controlUrl, "generate-feature-plan", {
      app: t.context.app,
      goal: "add todos",
    });
    t.is(r.status, 503);
    t.is(r.body.error.code, "model_unavailable");
    const plans = await get(t.context.p.controlUrl, `/resources?app_id=${t.context.app}&type=Plan`);
    t.is((plans.body as { items: unknown[] }).items.length, 0);
  },
);

test.serial(
  "generate-feature-plan: the real SDK against a local Messages API; a valid answer is a Plan, a malformed one a failed Plan",
  async (t) => {
    process.env.ANTHROPIC_API_KEY = "test-key-not-a-secret";
    const { api, app } = t.context;
    api.script({ kind: "tool", input: SAMPLE_PLAN });
    const plan = await slipway(t, "plan", "--app", app, "--goal", "add a todo list", "--json");
    t.is(plan.code, 0, plan.stderr);
    t.is(plan.json.resource.status, "succeeded");
    t.is(plan.json.resource.steps.length, SAMPLE_PLAN.steps.length);
    const req = api.requests.at(-1)!;
    t.is(req.body.tool_choice.type, "tool");
    t.is(req.headers.authorization, "Bearer test-key-not-a-secret");
    t.true(JSON.stringify(req.body.messages).includes("add a todo list"));

    api.script({ kind: "tool", input: { summary: "no steps here" } });
    const bad = await slipway(t, "plan", "--app", app, "--goal", "add search", "--json");
    t.is(bad.code, 1, "a malformed answer is a failed plan");
    t.is(bad.json.resource.status, "failed");
    t.regex(String(bad.json.resource.error), /schema|malformed|steps/i);
    t.is(bad.json.resource.steps, undefined);

    // the closed catalogue has no PlanFailed: PlanCreated ends both, the envelope's status says which
    const events = await eventually(async () => {
      const r = await get(t.context.p.controlUrl, `/events?app_id=${app}&type=PlanCreated`);
      const items = (r.body as { items: { resource_id: string; status?: string }[] }).items;
      return items.length === 2 ? items : undefined;
    });
    t.deepEqual(
      events.map((e) => [e.resource_id, e.status]).sort(),
      [
        [plan.json.resource.id, "succeeded"],
        [bad.json.resource.id, "failed"],
      ].sort(),
    );
  },
);

test.serial("explain-failure adds the model's reading when a model is configured", async (t) => {
  process.env.ANTHROPIC_API_KEY = "test-key-not-a-secret";
  const { api, app, workspaces } = t.context;
  writeFileSync(join(workspaces, app, "src", "oops.ts"), `export const x: string = 42;\n`);
  const build = await call(t.context.p.controlUrl, "build", { app });
  t.is(build.status, 202);
  const failed = await waitEnd(t, "Build", build.body.resource.id);
  t.is(failed.status, "failed");
  api.script({ kind: "tool", input: SAMPLE_READING });
  const ex = await call(t.context.p.controlUrl, "explain-failure", { resource: build.body.resource.id });
  t.is(ex.status, 202, JSON.stringify(ex.body));
  const analysis = await waitEnd(t, "Analysis", ex.body.resource.id);
  t.is(analysis.status, "succeeded");
  t.like(analysis.findings[0], { kind: "tsc", file: "src/oops.ts", line: 1 });
  t.is(analysis.model_reading.next_step, SAMPLE_READING.next_step);
  t.true(JSON.stringify(api.requests.at(-1)!.body).includes("src/oops.ts"));

  api.script({ kind: "text", text: "I think it is fine." });
  const ex2 = await call(t.context.p.controlUrl, "explain-failure", {
    app,
    resource: build.body.resource.id,
  });
  const a2 = await waitEnd(t, "Analysis", ex2.body.resource.id);
  t.is(a2.status, "succeeded", "the parsed analysis stands");
  t.is(a2.model_reading, undefined);
  t.regex(String(a2.model_error), /tool/i);
});

test.serial(
  "a failed install is a failed DependencyInstall that explain reads (npm error code) and a watcher sees (DependenciesInstalled, status failed); a build past its time bound fails as timed out",
  async (t) => {
    const app = `inst${randomUUID().slice(0, 6)}`;
    const init = await slipway(t, "init", "app", "--name", app, "--json");
    t.is(init.code, 0);
    const pkgFile = join(t.context.workspaces, app, "package.json");
    const pkg = JSON.parse(readFileSync(pkgFile, "utf8"));
    // a local package missing from the lockfile: npm ci refuses (EUSAGE) without asking any
    // registry (a registry package would make npm fetch its manifest first: ENOTCACHED offline)
    const local = join(t.context.workspaces, app, "vendor", "tiny");
    mkdirSync(local, { recursive: true });
    writeFileSync(join(local, "package.json"), JSON.stringify({ name: "tiny", version: "1.0.0" }));
    pkg.dependencies = { tiny: "file:vendor/tiny" };
    writeFileSync(pkgFile, JSON.stringify(pkg, null, 2));
    const install = await slipway(t, "install", "--app", app, "--json");
    t.is(install.code, 1, install.stdout);
    t.is(install.json.resource.status, "failed");
    t.is(install.json.resource.command, "npm ci");
    t.not(install.json.resource.exit_code, 0);
    const ex = await slipway(t, "explain", "--resource", install.json.resource.id, "--json");
    t.is(ex.code, 0, ex.stderr);
    t.true(
      ex.json.resource.findings.some(
        (f: { kind: string; code?: string }) => f.kind === "npm" && f.code === "EUSAGE",
      ),
      JSON.stringify(ex.json.resource.findings),
    );
    t.regex(ex.json.resource.next_step, /lockfile/);
    // a watcher sees the failed install: DependenciesInstalled ends every install, data.status says how
    const events = await get(t.context.p.controlUrl, `/events?resource_id=${install.json.resource.id}`);
    const items = (
      events.body as { items: { type: string; status?: string; data: Record<string, unknown> }[] }
    ).items;
    t.deepEqual(
      items.map((e) => [e.type, e.status, e.data.status]),
      [["DependenciesInstalled", "failed", "failed"]],
      "the envelope's status tells a failed install without reading data",
    );

    // a build that hangs: the time bound ends the whole process group
    const { app: ready } = t.context; // installed by the first test
    const readyPkg = join(t.context.workspaces, ready, "package.json");
    const original = readFileSync(readyPkg, "utf8");
    const slow = JSON.parse(original);
    slow.scripts.build = 'node -e "setInterval(() => {}, 1000)"';
    writeFileSync(readyPkg, JSON.stringify(slow, null, 2));
    process.env.SLIPWAY_BUILD_TIMEOUT_S = "2";
    try {
      const t0 = Date.now();
      const build = await slipway(t, "build", "--app", ready, "--json");
      t.is(build.code, 1);
      t.is(build.json.resource.status, "failed");
      t.true(build.json.resource.timed_out);
      t.regex(build.json.resource.summary, /timed out/);
      t.true(Date.now() - t0 < 20_000);
    } finally {
      delete process.env.SLIPWAY_BUILD_TIMEOUT_S;
      writeFileSync(readyPkg, original);
    }
  },
);

test.serial(
  "one workspace task at a time: a test while a build runs is 409 busy naming the build; other calls are not held up",
  async (t) => {
    const { app, workspaces } = t.context;
    const pkgFile = join(workspaces, app, "package.json");
    const original = readFileSync(pkgFile, "utf8");
    const slow = JSON.parse(original);
    slow.scripts.build = 'node -e "setTimeout(() => {}, 3000)"';
    writeFileSync(pkgFile, JSON.stringify(slow, null, 2));
    try {
      const build = await slipway(t, "build", "--app", app, "--no-wait", "--json");
      t.is(build.code, 0);
      t.is(build.json.status, "running");
      const busy = await call(t.context.p.controlUrl, "test", { app });
      t.is(busy.status, 409);
      t.is(busy.body.error.code, "busy");
      t.true(busy.body.error.message.includes(build.json.resource.id));
      const inspect = await call(t.context.p.controlUrl, "inspect", { app, type: "scripts" });
      t.is(inspect.status, 200, "the app's actor is free while the build runs");
      const done = await waitEnd(t, "Build", build.json.resource.id);
      t.is(done.status, "succeeded");
      const after = await call(t.context.p.controlUrl, "lint", { app });
      t.is(after.status, 202, "free again once the build ended");
      await waitEnd(t, "CheckRun", after.body.resource.id);
    } finally {
      writeFileSync(pkgFile, original);
    }
  },
);

/** The real handler of `name`, its long work made to fail (a log that cannot be read, an engine that gives up). */
function failingTask(name: "explain-failure" | "run-dev-server", facts?: Partial<HandlerContext["facts"]>) {
  const real = handlerOf(name)!;
  return registerHandler(
    name,
    async (ctx: HandlerContext, input: Record<string, unknown>): Promise<Effect> => {
      const c = facts ? { ...ctx, facts: { ...ctx.facts, ...facts } } : ctx;
      const e = await real.handle(c, input as never);
      if (!e.task) return e;
      return {
        ...e,
        task: {
          ...e.task,
          run: async () => {
            throw new Error(`${name} could not finish (test)`);
          },
        },
      };
    },
    real.facts as never,
  );
}

test.serial(
  "a failed explain-failure and a failed dev-server start emit their closing events (AnalysisCreated, DevServerStopped) with the envelope's status failed",
  async (t) => {
    const { app, workspaces } = t.context;
    const oops = join(workspaces, app, "src", "oops2.ts");
    writeFileSync(oops, `export const y: number = "no";\n`);
    const build = await call(t.context.p.controlUrl, "build", { app });
    rmSync(oops);
    t.is(build.status, 202, build.text);
    t.is((await waitEnd(t, "Build", build.body.resource.id)).status, "failed");
    const closing = async (id: string) =>
      eventually(async () => {
        const r = await get(t.context.p.controlUrl, `/events?resource_id=${id}`);
        const items = (
          r.body as { items: { type: string; status?: string; data: Record<string, unknown> }[] }
        ).items;
        return items.length ? items : undefined;
      });

    let restore = failingTask("explain-failure");
    try {
      const ex = await call(t.context.p.controlUrl, "explain-failure", {
        app,
        resource: build.body.resource.id,
      });
      t.is(ex.status, 202, ex.text);
      const a = await waitEnd(t, "Analysis", ex.body.resource.id);
      t.is(a.status, "failed");
      const evs = await closing(a.id);
      t.deepEqual(
        evs.map((e) => [e.type, e.status]),
        [["AnalysisCreated", "failed"]],
      );
      t.regex(String(evs[0]!.data.error), /could not finish/);
    } finally {
      restore();
    }

    // the engine is said to answer: the start is made, and its long work fails
    restore = failingTask("run-dev-server", { engine: { available: true }, containers: {} } as never);
    try {
      const dev = await call(t.context.p.controlUrl, "run-dev-server", { app, action: "start" });
      t.is(dev.status, 202, dev.text);
      const d = await waitEnd(t, "DevServer", dev.body.resource.id);
      t.is(d.status, "failed");
      const evs = await closing(d.id);
      t.deepEqual(
        evs.map((e) => [e.type, e.status]),
        [["DevServerStopped", "failed"]],
      );
      t.regex(String(evs[0]!.data.error), /could not finish/);
    } finally {
      restore();
    }
  },
);

test.serial(
  "delivery-check: the catalogue says it needs a container engine; a repo_name that is no app is accepted with a repo_root under the workspace root",
  async (t) => {
    const caps = await get(t.context.p.controlUrl, "/capabilities");
    const row = (caps.body as { items: { name: string; requires_container_runtime: boolean }[] }).items.find(
      (c) => c.name === "delivery-check",
    );
    t.true(row?.requires_container_runtime, "producer and release read the engine");
    const lib = `lib${randomUUID().slice(0, 6)}`;
    mkdirSync(join(t.context.workspaces, "libs", lib), { recursive: true });
    const noRoot = await call(t.context.p.controlUrl, "delivery-check", {
      checks: ["producer"],
      repo_name: lib,
    });
    t.is(noRoot.status, 404, noRoot.text);
    t.regex(noRoot.body.error.message, /repo_root/);
    const missing = await call(t.context.p.controlUrl, "delivery-check", {
      checks: ["producer"],
      repo_name: lib,
      repo_root: "libs/none",
    });
    t.is(missing.status, 422, missing.text);
    t.regex(missing.body.error.message, /workspace root/);
    // past the app check: here the engine is what is missing
    const producer = await call(t.context.p.controlUrl, "delivery-check", {
      checks: ["producer"],
      repo_name: lib,
      repo_root: `libs/${lib}`,
    });
    t.is(producer.status, 503, producer.text);
    t.is(producer.body.error.code, "container_runtime_unavailable");
    const consumer = await call(t.context.p.controlUrl, "delivery-check", {
      checks: ["consumer"],
      repo_name: lib,
      repo_root: `libs/${lib}`,
      consumers: ["http://127.0.0.1:9/"],
    });
    t.is(consumer.status, 202, consumer.text);
    t.like(consumer.body.resource, { type: "DeliveryCheckRun", repo_name: lib, repo_root: `libs/${lib}` });
    const run = await waitEnd(t, "DeliveryCheckRun", consumer.body.resource.id);
    t.is(run.status, "failed", "nothing answers at the consumer");
    t.is(run.release_id, null, "a repository that is no app's has no release");
  },
);
