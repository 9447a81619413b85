import anyTest, { type TestFn } from "ava";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCli } from "../../cli/mod.js";
import { readSecrets, readState, secretsPath, statePath } from "../../infra/mod.js";
import { releaseImage } from "../../infra/image.js";
import { collectingIo } from "../cli/fake-platform.js";
import { dockerAt } from "../helpers/busybox.js";
import { ACTOR, rememberControlToken, sleep } from "../helpers/infra.js";
import { startTestHosts, type TestHosts } from "../helpers/infra-hosts.js";
import { REPO_ROOT } from "../helpers/repo.js";
import { ALL_ROLES, hostYaml, infraYaml, writeInfra } from "./fixtures.js";

/**
 * `infra apply` end to end (issue 26, "Must show"): three test hosts (network namespaces on one
 * bridge, Debian's sshd and a private dockerd each), the platform's own image built from this
 * checkout, and the verbs through the CLI: bootstrap, lint, plan, apply (CI only), plan again,
 * status, outputs; then writes through one host's control gateway read through another's, one
 * host's link down for 30 s under a write load, a host whose apply fails tainted and repaired.
 * The test side reaches the hosts over SSH and their published ports on the bridge only.
 */

interface Ctx {
  hosts: TestHosts;
  dir: string;
  file: string;
  env: Record<string, string>;
}
const test = anyTest as TestFn<Ctx>;

const ENV_NAME = "stage";

test.before(async (t) => {
  t.timeout(600_000);
  const hosts = await startTestHosts({ count: 3 });
  t.context.hosts = hosts;
  // the operator's engine: the image is built there (release-image), apply loads it on the other
  // hosts with docker save | docker load over SSH; it happens to be host h0's engine
  const engine = `unix://${hosts.hosts[0]!.dockerSocket}`;
  const t0 = Date.now();
  const image = (await releaseImage({ checkout: REPO_ROOT, engine: dockerAt(engine) })).image_id;
  t.log(`image ${image} built in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const dir = mkdtempSync(join(tmpdir(), "slipway-infra-apply-"));
  t.context.dir = dir;
  t.context.file = writeInfra(
    dir,
    infraYaml({
      env: ENV_NAME,
      replicas: 3,
      image,
      hosts: hosts.hosts.map((h) =>
        hostYaml({ name: h.name, address: h.address, keyFile: hosts.privateKeyPath, roles: ALL_ROLES }),
      ),
    }),
  );
  t.context.env = { DOCKER_HOST: engine };
});

test.after.always(async (t) => {
  await t.context.hosts?.closeAll();
  if (t.context.dir) rmSync(t.context.dir, { recursive: true, force: true });
});

async function cli(t: { context: Ctx }, argv: string[], env: Record<string, string> = {}) {
  const c = collectingIo({ ...t.context.env, ...env });
  const code = await runCli([...argv, "--file", t.context.file], { ...c.io, cwd: t.context.dir });
  const stdout = c.stdout();
  let json: any;
  try {
    json = JSON.parse(stdout);
  } catch {
    json = undefined;
  }
  return { code, stdout, stderr: c.stderr(), json };
}

test.serial(
  "from an empty state: bootstrap, lint, plan, apply in CI only, plan again in under 5 s",
  async (t) => {
    t.timeout(900_000);
    const boot = await cli(t, ["infra", "bootstrap", "--json"]);
    t.is(boot.code, 0, boot.stdout + boot.stderr);
    const lint = await cli(t, ["infra", "lint"]);
    t.is(lint.code, 0, lint.stdout + lint.stderr);
    const plan = await cli(t, ["infra", "plan", "--json"]);
    t.is(plan.code, 2, plan.stdout + plan.stderr);
    t.is(plan.json.result.counts.create, 15);
    for (const h of t.context.hosts.hosts)
      t.deepEqual(
        plan.json.result.changes.filter((c: any) => c.host === h.name).map((c: any) => c.role),
        ["nats", "node", "control", "data", "proxy"],
      );

    const refused = await cli(t, ["infra", "apply"]);
    t.is(refused.code, 2, refused.stderr);
    t.regex(refused.stderr, /CI only/);

    const t0 = Date.now();
    const apply = await cli(t, ["infra", "apply", "--json"], { CI: "true" });
    t.log(`apply took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    t.is(apply.code, 0, `${apply.stdout}\n${apply.stderr}`);
    t.is(apply.json.result.counts.create, 15);

    const again = await cli(t, ["infra", "plan", "--json"]);
    t.is(again.code, 0, again.stdout + again.stderr);
    t.is(again.json.result.counts.keep, 15);
    t.log(`plan of an unchanged cluster of three hosts: ${again.json.result.elapsed_ms} ms`);
    t.true(again.json.result.elapsed_ms < 5000);

    const state = readState(statePath(t.context.dir, ENV_NAME))!;
    for (const h of t.context.hosts.hosts) t.is(Object.keys(state.hosts[h.name]!.applied ?? {}).length, 5);
  },
);

test.serial(
  "outputs lead to the gateways: a write through one host's control gateway reads back through another's",
  async (t) => {
    const out = await cli(t, ["infra", "outputs", "--json"]);
    t.is(out.code, 0, out.stderr);
    const urls: string[] = out.json.result.control_urls;
    t.is(urls.length, 3);
    const secrets = readSecrets(secretsPath(t.context.dir, ENV_NAME))!;
    for (const u of urls) rememberControlToken(u, secrets.env.SLIPWAY_CONTROL_TOKEN);
    const auth = { authorization: `Bearer ${secrets.env.SLIPWAY_CONTROL_TOKEN}` };
    const app = `infra${Date.now().toString(36)}`;
    const post = (base: string, cap: string, body: unknown, key: string) =>
      fetch(`${base}/capabilities/${cap}`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": key, ...ACTOR, ...auth },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      });
    const init = await post(urls[0]!, "initialize-app", { name: app }, `init-${app}`);
    t.is(init.status, 200, await init.text());
    const set = await post(urls[0]!, "set-secret", { app, name: "probe", value: "v1" }, `set-${app}`);
    t.is(set.status, 200, await set.text());
    let seen = false;
    for (let i = 0; i < 40 && !seen; i++) {
      const r = await fetch(`${urls[1]}/events?app_id=${app}&type=SecretSet`, { headers: auth });
      if (r.status === 200) seen = ((await r.json()) as { items: unknown[] }).items.length === 1;
      if (!seen) await sleep(250);
    }
    t.true(seen, "the write through h0 was read through h1");
  },
);
