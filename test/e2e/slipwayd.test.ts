import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import test from "ava";
import { freePort, get, tempDir } from "../helpers/infra.js";
import { nodeArgs } from "../helpers/repo.js";

interface Up {
  child: ChildProcess;
  /** Where it runs: its data dir is `<home>/.slipway`. */
  home: string;
  control: string;
  data: string;
  env: NodeJS.ProcessEnv;
  out: () => string;
}

/** The environment of a user's shell: none of the platform's own variables set. */
function userEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of [
    "SLIPWAY_DATA_DIR",
    "SLIPWAY_CONTROL_TOKEN",
    "SLIPWAY_TOKEN",
    "NATS_URL",
    "SLIPWAY_VAULT_KEY",
  ])
    delete env[k];
  return env;
}

/** `slipwayd up` as `npm start` runs it: in a folder of its own, the data dir `./.slipway` there. */
async function startUp(): Promise<Up> {
  const [natsPort, controlPort, dataPort] = [await freePort(), await freePort(), await freePort()];
  const home = tempDir();
  const env = {
    ...userEnv(),
    SLIPWAY_NATS_PORT: String(natsPort),
    SLIPWAY_CONTROL_PORT: String(controlPort),
    SLIPWAY_DATA_PORT: String(dataPort),
  };
  const child = spawn(process.execPath, [...nodeArgs("bin", "slipwayd.ts"), "up"], {
    env,
    cwd: home,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const deadline = Date.now() + 20_000;
  while (!out.includes("ready in")) {
    if (child.exitCode !== null) throw new Error(`slipwayd exited: ${out}`);
    if (Date.now() > deadline) throw new Error(`slipwayd not ready: ${out}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    child,
    home,
    control: `http://127.0.0.1:${controlPort}`,
    data: `http://127.0.0.1:${dataPort}`,
    env,
    out: () => out,
  };
}

/** The CLI as a user runs it, from `cwd` (a folder under the one `slipwayd up` runs in, by default). */
function cli(
  args: string[],
  env: NodeJS.ProcessEnv,
  cwd?: string,
): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [...nodeArgs("bin", "slipway.ts"), ...args], {
    env,
    encoding: "utf8",
    timeout: 60_000,
    ...(cwd ? { cwd } : {}),
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

async function stop(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const done = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  child.kill("SIGTERM");
  return done;
}

test("slipwayd up serves, and the CLI drives it with no token typed: init app, secrets set --from-env, exit codes for success, rejection, usage and unreachable; curl without the token is 401", async (t) => {
  const up = await startUp();
  t.teardown(() => void stop(up.child));
  // the start-up figure is measured by npm run bench:restart, not held to a deadline here
  t.regex(up.out(), /ready in (\d+) ms/);
  t.log(up.out().match(/ready in \d+ ms/)![0]);
  // the control token was made at first boot, readable by its owner only; without it: 401
  const tokenFile = join(up.home, ".slipway", "control.token");
  t.is(statSync(tokenFile).mode & 0o777, 0o600);
  const bare = await fetch(`${up.control}/resources`);
  t.is(bare.status, 401);
  t.is(((await bare.json()) as { error: { code: string } }).error.code, "unauthenticated");
  const env = {
    ...userEnv(),
    SLIPWAY_CONTROL_URL: up.control,
    SLIPWAY_DATA_URL: up.data,
    SLIPWAY_ACTOR_ID: "ci",
  };
  // the CLI run from a folder below where slipwayd runs finds the token by itself
  const work = join(up.home, "projects", "shop");
  mkdirSync(work, { recursive: true });
  const cliHere = (args: string[], e: NodeJS.ProcessEnv = env) => cli(args, e, work);
  const name = `c${randomUUID().slice(0, 8)}`;
  const init = cliHere(["init", "app", "--name", name, "--json"]);
  t.is(init.code, 0, init.stderr);
  const body = JSON.parse(init.stdout);
  t.is(body.status, "succeeded");
  t.is(body.resource.app_id, name);
  t.is(body.events[0].actor.type, "cli");
  t.is(body.events[0].actor.id, "ci");
  const secret = `cli-secret-${randomUUID()}`;
  const set = cliHere(["secrets", "set", "--app", name, "--name", "K", "--from-env", "MY_VALUE", "--json"], {
    ...env,
    MY_VALUE: secret,
  });
  t.is(set.code, 0, set.stderr);
  const s = JSON.parse(set.stdout);
  t.is(s.resource.type, "Secret");
  t.is(s.resource.name, "K");
  t.false(set.stdout.includes(secret) || set.stderr.includes(secret));
  // the data plane with the app's token
  const viaData = cli(
    ["secrets", "set", "--app", name, "--name", "D", "--from-env", "MY_VALUE", "--plane", "data", "--json"],
    {
      ...env,
      MY_VALUE: "x",
      SLIPWAY_TOKEN: body.result.token,
    },
  );
  t.is(viaData.code, 0, viaData.stderr);
  const list = cliHere(["secrets", "list", "--app", name, "--json"]);
  t.is(list.code, 0);
  t.deepEqual(
    JSON.parse(list.stdout).resource.result.items.map((i: { name: string }) => i.name),
    ["D", "K"],
  );
  // schedule and jobs
  const sch = cliHere([
    "schedule",
    "--app",
    name,
    "--name",
    "nightly",
    "--target",
    "/cron/nightly",
    "--cron",
    "0 3 * * *",
    "--json",
  ]);
  t.is(sch.code, 0, sch.stderr);
  t.deepEqual(JSON.parse(sch.stdout).resource.schedule, { cron: "0 3 * * *", time_zone: "UTC" });
  const jobs = cliHere(["jobs", "--app", name, "--json"]);
  t.is(jobs.code, 0, jobs.stderr);
  t.deepEqual(
    JSON.parse(jobs.stdout).resource.result.items.map((j: { name: string }) => j.name),
    ["nightly"],
  );
  t.is(
    cliHere(["schedule", "--app", name, "--name", "bad", "--target", "/x", "--every", "0s"]).code,
    3,
    "400 is exit 3",
  );
  t.is(cliHere(["schedule", "--app", name, "--name", "nightly", "--remove", "--json"]).code, 0);
  // rejected (4xx): exit 3, error on stdout with --json
  const again = cliHere(["init", "app", "--name", name, "--json"]);
  t.is(again.code, 3);
  t.is(JSON.parse(again.stdout).error.code, "already_exists");
  // usage: exit 2 (missing env var; no --value flag exists)
  t.is(cliHere(["secrets", "set", "--app", name, "--name", "K", "--from-env", "NOT_SET_ANYWHERE"]).code, 2);
  t.is(cliHere(["secrets", "set", "--app", name, "--name", "K", "--value", "x"]).code, 2);
  // reads
  const res = cliHere(["resources", "--app", name, "--json"]);
  t.is(res.code, 0);
  t.is(JSON.parse(res.stdout).items.length, 3); // Application, K, D (an inspect stores nothing)
  const logs = cliHere(["logs", body.resource.id]);
  t.is(logs.code, 0);
  t.regex(logs.stdout, /initialized app/);
  const caps = cliHere(["capabilities", "--json"]);
  t.is(JSON.parse(caps.stdout).items.length, 24);
  // unreachable: exit 4
  t.is(
    cliHere(["capabilities"], { ...env, SLIPWAY_CONTROL_URL: `http://127.0.0.1:${await freePort()}` }).code,
    4,
  );
  // graceful shutdown
  const code = await stop(up.child);
  t.is(code, 0);
  t.regex(up.out(), /shutting down/);
  t.is((await get(up.control, "/healthz").catch(() => ({ status: 0 }))).status, 0, "stopped listening");
});

test("slipwayd says clearly when a port is taken or nats-server is missing", async (t) => {
  const taken = createServer();
  await new Promise<void>((r) => taken.listen(0, "127.0.0.1", r));
  const port = (taken.address() as { port: number }).port;
  const base = { ...process.env, SLIPWAY_DATA_DIR: tempDir() };
  const natsTaken = spawnSync(process.execPath, [...nodeArgs("bin", "slipwayd.ts"), "up"], {
    env: { ...base, SLIPWAY_NATS_PORT: String(port) },
    encoding: "utf8",
    timeout: 30_000,
  });
  t.is(natsTaken.status, 1);
  t.regex(natsTaken.stderr, /port \d+ is already taken/);
  t.false(natsTaken.stderr.includes("    at "), "no stack trace");
  const controlTaken = spawnSync(process.execPath, [...nodeArgs("bin", "slipwayd.ts"), "up"], {
    env: {
      ...base,
      SLIPWAY_NATS_PORT: String(await freePort()),
      SLIPWAY_CONTROL_PORT: String(port),
      SLIPWAY_DATA_PORT: String(await freePort()),
    },
    encoding: "utf8",
    timeout: 30_000,
  });
  t.is(controlTaken.status, 1);
  t.regex(controlTaken.stderr, /cannot listen on 127\.0\.0\.1:\d+ \(control plane\)/);
  t.false(controlTaken.stderr.includes("    at "));
  taken.close();
  const missing = spawnSync(process.execPath, [...nodeArgs("bin", "slipwayd.ts"), "up"], {
    env: {
      ...base,
      NATS_SERVER_BIN: "/nonexistent/nats-server",
      SLIPWAY_NATS_PORT: String(await freePort()),
    },
    encoding: "utf8",
    timeout: 30_000,
  });
  t.is(missing.status, 1);
  t.regex(missing.stderr, /nats-server was not found.*apt-get install -y nats-server/);
});
