import anyTest, { type TestFn } from "ava";
import { execFile, spawnSync } from "node:child_process";
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
import { type NpmMirror, startNpmMirror } from "../helpers/npm-mirror.js";
import { getWithHost } from "../helpers/raw-http.js";
import { REPO_ROOT } from "../helpers/repo.js";
import { ALL_ROLES, hostYaml, infraYaml, writeInfra } from "../infra/fixtures.js";

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
let mirror: NpmMirror | undefined;

const ENV_NAME = "stage";
/** How long one host's link is down under the write load. */
const LINK_DOWN_MS = Number(process.env.INFRA_LINK_DOWN_MS) || 30_000;

test.before(async (t) => {
  t.timeout(600_000);
  const hosts = await startTestHosts({ count: 3 });
  t.context.hosts = hosts;
  // the nodes install apps' packages through a mirror on the bridge (the internet is closed here)
  mirror = await startNpmMirror(hosts.bridgeAddress, [
    join(REPO_ROOT, "starter", "template", "package-lock.json"),
  ]);
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
      npmRegistry: mirror.url,
      hosts: hosts.hosts.map((h) =>
        hostYaml({
          name: h.name,
          address: h.address,
          keyFile: hosts.privateKeyPath,
          roles: ALL_ROLES,
          // the test hosts' sshd reads the group's file (never the machine's own ~/.ssh)
          authorizedKeys: join(hosts.dir, "authorized_keys"),
        }),
      ),
    }),
  );
  t.context.env = { DOCKER_HOST: engine };
});

test.after.always(async (t) => {
  await mirror?.close();
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

    // status: every host up, three NATS members, every stream at 3 replicas with its peers
    const names = t.context.hosts.hosts.map((h) => h.name);
    const status = await cli(t, ["infra", "status", "--json"]);
    t.is(status.code, 0, status.stdout + status.stderr);
    t.true(status.json.result.ready, JSON.stringify(status.json.result));
    const live = status.json.result.live;
    t.deepEqual(
      live.hosts.map((h: any) => [h.name, h.reachable]),
      names.map((n) => [n, true]),
    );
    t.deepEqual(live.nats.members.map((m: any) => m.name).sort(), names);
    t.true(live.nats.streams.length > 5);
    t.true(
      live.nats.streams.every((x: any) => x.replicas === 3 && x.peers.length === 3),
      JSON.stringify(live.nats.streams.filter((x: any) => x.replicas !== 3 || x.peers.length !== 3)),
    );
    // verify: every gateway ready, a write through one read through another, streams current, proxies
    let verify = await cli(t, ["infra", "verify", "--json"]);
    for (let i = 0; i < 10 && verify.code !== 0; i++) {
      // streams made by the first requests may still be catching up: asked again, briefly
      await sleep(2000);
      verify = await cli(t, ["infra", "verify", "--json"]);
    }
    const failing = (verify.json?.result?.checks ?? []).filter((c: any) => !c.ok);
    t.is(verify.code, 0, `${JSON.stringify(failing)} ${verify.stderr}`);
    t.true(verify.json.result.ok);
    t.log(`verify: ${verify.json.result.checks.length} checks green`);
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
    // every platform container's /metrics: the metrics token reads it, no token does not
    const metricsUrls: string[] = out.json.result.metrics_urls;
    t.is(metricsUrls.length, t.context.hosts.hosts.length * 4, "node, control, data and proxy on each host");
    for (const u of metricsUrls) {
      const bare = await fetch(u, { signal: AbortSignal.timeout(10_000) });
      t.is(bare.status, 401, u);
      const m = await fetch(u, {
        headers: { authorization: `Bearer ${secrets.metrics_token}` },
        signal: AbortSignal.timeout(10_000),
      });
      t.is(m.status, 200, u);
      t.regex(await m.text(), /^slipway_eventloop_delay_seconds/m, u);
    }
  },
);
test.serial(
  "an app initialized, productionized and released through the control URLs runs on an apps host and answers through every host's proxy",
  async (t) => {
    t.timeout(420_000);
    const { hosts } = t.context.hosts;
    const out = await cli(t, ["infra", "outputs", "--json"]);
    const urls: string[] = out.json.result.control_urls;
    const proxies: string[] = out.json.result.proxy_urls;
    t.is(proxies.length, 3);
    const token = readSecrets(secretsPath(t.context.dir, ENV_NAME))!.env.SLIPWAY_CONTROL_TOKEN;
    const headers = { "content-type": "application/json", authorization: `Bearer ${token}`, ...ACTOR };
    const post = async (base: string, cap: string, body: unknown) => {
      const r = await fetch(`${base}/capabilities/${cap}`, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(60_000),
      });
      return { status: r.status, body: (await r.json()) as any };
    };
    const app = `web${Date.now().toString(36)}`;
    const host = `${app}.example.com`;
    t.is((await post(urls[0]!, "initialize-app", { name: app })).status, 200);
    const prod = await post(urls[1]!, "productionize", { app, host });
    t.is(prod.status, 200, JSON.stringify(prod.body));
    // the node exports the commit, installs from the mirror, builds, and builds the image on an
    // apps host's engine (git, npm and sh are in the platform image)
    const t0 = Date.now();
    const rel = await post(urls[2]!, "release", { app });
    t.is(rel.status, 202, JSON.stringify(rel.body));
    const id = rel.body.resource.id as string;
    let doc: any;
    for (let i = 0; i < 600; i++) {
      const r = await fetch(`${urls[0]}/resources/Release/${id}`, { headers });
      doc = r.status === 200 ? await r.json() : undefined;
      if (["succeeded", "failed"].includes(doc?.status)) break;
      await sleep(500);
    }
    t.log(
      `released ${app} in ${((Date.now() - t0) / 1000).toFixed(1)} s; npm packages from the mirror: ${mirror?.served.length}`,
    );
    if (doc?.status !== "succeeded") {
      const logs = await fetch(`${urls[0]}/logs/${id}`, { headers });
      t.log((await logs.text()).slice(-4000));
    }
    t.is(doc?.status, "succeeded", JSON.stringify({ error: doc?.error, phases: doc?.phases }));
    t.deepEqual(
      (doc.phases as { name: string; status: string }[]).map((p) => `${p.name}:${p.status}`),
      ["assess:succeeded", "publish:succeeded", "repin:succeeded", "deploy:succeeded", "verify:succeeded"],
    );
    const on = hosts.find((h) => String(doc.upstream).startsWith(`http://${h.address}:`));
    t.truthy(on, `the upstream ${doc.upstream} is on an apps host's private address`);
    t.is(doc.containers[0].engine, on?.name);
    const running = await dockerAt(`unix://${on!.dockerSocket}`).listContainers({
      filters: { label: [`slipway.app=${app}`, "slipway.role=production"] },
    });
    t.deepEqual(
      running.map((c) => c.Names[0]?.slice(1)),
      [doc.containers[0].name],
    );
    t.is(running[0]?.ImageID, doc.image_ref, "the release's image, built on that apps host's engine");
    for (const p of proxies) {
      let seen = "";
      for (let i = 0; i < 40 && !seen.startsWith("200 "); i++) {
        seen = await getWithHost(p, host, "/version");
        if (!seen.startsWith("200 ")) await sleep(500);
      }
      t.true(seen.startsWith("200 "), `${p} serves ${host}: ${seen}`);
      if (seen.startsWith("200 ")) t.is(JSON.parse(seen.slice(4)).commit, doc.commit);
    }
    t.log(`${app} runs on ${on?.name} (${doc.upstream}); served through ${proxies.join(", ")}`);
  },
);

interface Acked {
  key: string;
  /** The SecretSet event the answer named. */
  eventId: string;
  at: number;
}

/** Sequential set-secret writers through the given control gateways, retried with the same key until acknowledged. */
function writeLoad(urls: readonly string[], token: string, app: string, lanes: number) {
  const acked: Acked[] = [];
  /** Failed tries by what they got (a status, or the error's name), with their times. */
  const failures: { at: number; what: string }[] = [];
  let stop = false;
  const lane = async (k: number) => {
    for (let n = 0; !stop; n++) {
      const key = `${app}-l${k}-${n}`;
      const body = { app, name: `l${k}`, value: `v${n}` };
      for (let attempt = 0; !stop || attempt > 0; attempt++) {
        const base = urls[(k + attempt) % urls.length]!;
        try {
          const r = await fetch(`${base}/capabilities/set-secret`, {
            method: "POST",
            headers: {
              "content-type": "application/json",
              "idempotency-key": key,
              authorization: `Bearer ${token}`,
              ...ACTOR,
            },
            body: JSON.stringify(body),
            signal: AbortSignal.timeout(5000),
          });
          const text = await r.text();
          if (r.status === 200) {
            const eventId = (JSON.parse(text) as { events?: { id: string }[] }).events?.[0]?.id ?? "";
            acked.push({ key, eventId, at: Date.now() });
            break;
          }
          failures.push({ at: Date.now(), what: `${r.status} ${text.slice(0, 120)}` });
        } catch (e) {
          // a timeout or a refused connection: the next gateway, the same key
          failures.push({ at: Date.now(), what: (e as Error).name });
        }
        if (attempt > 200) break;
        await sleep(200);
      }
    }
  };
  const running = Promise.all(Array.from({ length: lanes }, (_, k) => lane(k)));
  return {
    acked,
    failures,
    async stop() {
      stop = true;
      await running;
    },
  };
}

/**
 * INFRA_LINK_DIAG=1: every 2 s, each given host's view of its JetStream (stream leaders and their
 * replicas' currency, routes' pending bytes), printed when the test ends: where a stall hangs.
 */
function sampleJetStream(
  t: { log: (...a: unknown[]) => void },
  hosts: readonly TestHosts["hosts"][number][],
) {
  let stop = false;
  const t0 = Date.now();
  const script = [
    "const g = (p) => fetch('http://127.0.0.1:8222' + p).then((r) => r.json());",
    "Promise.all([g('/jsz?streams=true&consumers=true'), g('/routez'), g('/connz'), g('/varz')]).then(([j, r, cz, v]) => {",
    "const cs = (cz.connections ?? []).map((c) => (c.name ?? c.cid) + ':p' + c.pending_bytes + ':o' + c.out_msgs + ':i' + c.in_msgs).join(' ');",
    "process.stdout.write('cpu ' + v.cpu + ' slow ' + v.slow_consumers + ' | conns ' + cs + ' | ');",
    "const by = (cs) => { const n = {}; for (const c of cs ?? []) { const l = c.cluster?.leader ?? '-'; n[l] = (n[l] ?? 0) + 1; } return Object.entries(n).map(([k, v]) => k + '=' + v).join('/'); };",
    "const s = (j.account_details ?? []).flatMap((a) => a.stream_detail ?? []).map((x) => x.name + ':' + (x.cluster?.leader ?? '-') + '[' + (x.cluster?.replicas ?? []).map((p) => p.name + (p.current ? '' : '!') + Math.round((p.active ?? 0) / 1e9)).join(',') + ']{' + by(x.consumer_detail) + '}');",
    "const rt = (r.routes ?? []).map((x) => x.remote_name + ' pend ' + x.pending_size + ' out ' + x.out_msgs);",
    "process.stdout.write('meta ' + (j.meta_cluster?.leader ?? '-') + ' | ' + rt.join('; ') + ' | ' + s.join(' '));",
    "}, (e) => process.stdout.write('error ' + e));",
  ].join("");
  const lines: string[] = [];
  const running = (async () => {
    while (!stop) {
      for (const h of hosts) {
        const at = ((Date.now() - t0) / 1000).toFixed(1);
        const out = await new Promise<string>((resolve) =>
          execFile(
            "ssh",
            h.sshArgs(
              "docker",
              "exec",
              `slipway-${ENV_NAME}-nats`,
              "/usr/local/bin/node",
              "-e",
              JSON.stringify(script),
            ),
            { encoding: "utf8", timeout: 5000 },
            (err, stdout, stderr) => resolve(stdout.trim() || stderr.trim() || String(err)),
          ),
        );
        lines.push(`+${at} ${h.name}: ${out}`);
      }
      await sleep(2000);
    }
  })();
  return {
    async stop() {
      stop = true;
      await running;
      t.log(`jetstream samples:\n${lines.join("\n")}`);
    },
  };
}

/** The ids of every SecretSet event of the app, read through one gateway. */
async function secretWrites(base: string, token: string, app: string): Promise<Set<string>> {
  const out = new Set<string>();
  let cursor: string | null = null;
  for (let page = 0; page < 100; page++) {
    const q = `/events?app_id=${app}&type=SecretSet&limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
    const r = await fetch(`${base}${q}`, { headers: { authorization: `Bearer ${token}` } });
    if (r.status !== 200) throw new Error(`GET ${q}: ${r.status} ${await r.text()}`);
    const body = (await r.json()) as { items: { id: string }[]; next_cursor: string | null };
    for (const e of body.items) out.add(e.id);
    cursor = body.next_cursor;
    if (!cursor) break;
  }
  return out;
}

test.serial(
  "one host's link down for 30 s under a write load: nothing acknowledged is lost, status shows the host down then back",
  async (t) => {
    t.timeout(420_000);
    const { hosts } = t.context.hosts;
    const token = readSecrets(secretsPath(t.context.dir, ENV_NAME))!.env.SLIPWAY_CONTROL_TOKEN;
    const out = await cli(t, ["infra", "outputs", "--json"]);
    const urls: string[] = out.json.result.control_urls;
    const app = `link${Date.now().toString(36)}`;
    const init = await fetch(`${urls[0]}/capabilities/initialize-app`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}`, ...ACTOR },
      body: JSON.stringify({ name: app }),
    });
    t.is(init.status, 200, await init.text());
    const down = hosts[2]!;
    const load = writeLoad(urls.slice(0, 2), token, app, 4);
    const diag = process.env.INFRA_LINK_DIAG === "1" ? sampleJetStream(t, hosts.slice(0, 2)) : undefined;
    await sleep(5000);
    const before = load.acked.length;
    const downAt = Date.now();
    down.stopLink();
    t.log(`link of ${down.name} down`);
    await sleep(10_000);
    const status = await cli(t, ["infra", "status", "--json"]);
    t.is(status.code, 0, "a host down is not a failure of status");
    t.false(status.json.result.ready);
    const seen = status.json.result.live.hosts.find((h: any) => h.name === down.name);
    t.false(seen.reachable, JSON.stringify(seen));
    t.log(`status while ${down.name} is down: ${seen.error?.code}`);
    await sleep(LINK_DOWN_MS - 10_000);
    const during = load.acked.filter((a) => a.at > downAt).length;
    const firstAfter = load.acked.find((a) => a.at > downAt + 1000)?.at;
    t.log(
      `link down at ${new Date(downAt).toISOString()}; first write acknowledged after it: ${firstAfter ? `+${((firstAfter - downAt) / 1000).toFixed(1)} s` : "none"}`,
    );
    down.startLink();
    const upAt = Date.now();
    t.log(`link of ${down.name} up again after ${((upAt - downAt) / 1000).toFixed(1)} s`);
    // writes are acknowledged again (at the latest once the link is back)
    let again: number | undefined;
    for (let i = 0; i < 300 && again === undefined; i++) {
      again = load.acked.find((a) => a.at > upAt)?.at;
      if (again === undefined) await sleep(500);
    }
    t.truthy(again, "writes acknowledged again within 150 s of the link's return");
    if (again)
      t.log(`writes acknowledged again ${((again - upAt) / 1000).toFixed(1)} s after the link's return`);
    // status shows the host back
    let back: any;
    for (let i = 0; i < 20 && !back?.reachable; i++) {
      const st = await cli(t, ["infra", "status", "--json"]);
      back = st.json?.result?.live?.hosts.find((h: any) => h.name === down.name);
      if (!back?.reachable) await sleep(1000);
    }
    t.true(back?.reachable, `status shows ${down.name} back: ${JSON.stringify(back)}`);
    await sleep(5000);
    await load.stop();
    await diag?.stop();
    const gaps = load.acked
      .map((a) => a.at)
      .sort((a, b) => a - b)
      .reduce((m, at, i, all) => (i ? Math.max(m, at - all[i - 1]!) : m), 0);
    t.log(
      `${before} writes before, ${during} while the link was down (30 s), ${load.acked.length} in all; longest gap ${gaps} ms`,
    );
    const kinds = new Map<string, number>();
    for (const f of load.failures) kinds.set(f.what, (kinds.get(f.what) ?? 0) + 1);
    t.log(`failed tries: ${JSON.stringify([...kinds].slice(0, 10))}`);
    if (during === 0 || gaps > 15_000) {
      // what the hosts that stayed said while the link was down
      const since = new Date(downAt - 1000).toISOString();
      const until = new Date(
        process.env.INFRA_LINK_DIAG === "1" ? Date.now() : downAt + LINK_DOWN_MS,
      ).toISOString();
      for (const h of hosts.slice(0, 2))
        for (const role of ["nats", "node"]) {
          const r = spawnSync(
            "ssh",
            h.sshArgs(
              "docker",
              "logs",
              "-t",
              "--since",
              since,
              "--until",
              until,
              `slipway-${ENV_NAME}-${role}`,
            ),
            { encoding: "utf8" },
          );
          const lines = `${r.stdout}${r.stderr}`
            .split("\n")
            .filter((l) => !/new consumer leader|Catchup for stream|Error trying to connect to route/.test(l))
            .slice(0, process.env.INFRA_LINK_DIAG === "1" ? 400 : 40);
          t.log(`--- ${h.name} ${role}:\n${lines.join("\n")}`);
        }
    }
    // not asserted: writes should go on through the other two hosts. With the routes to the silent
    // member failing in about 6 s (tcp_retries2) they do in some runs; with KV reads from the leader
    // (SLIPWAY_KV_LEADER_READS=1, opt-in) in every run measured (docs/infra.md, "A host's link cut")
    const late = load.acked.filter((a) => a.at > downAt + 20_000 && a.at < upAt).length;
    t.log(`writes acknowledged while the link was down: ${during} (${late} in its last 10 s)`);
    const stored = await secretWrites(urls[0]!, token, app);
    const lost = load.acked.filter((a) => !stored.has(a.eventId));
    t.is(lost.length, 0, `acknowledged writes lost: ${lost.map((l) => l.key).join(", ")}`);
  },
);

test.serial(
  "a host whose apply fails (its engine stopped) is tainted; untaint plus apply repairs it",
  async (t) => {
    t.timeout(300_000);
    const h = t.context.hosts.hosts[1]!;
    await h.stopEngine();
    const failed = await cli(t, ["infra", "apply", "--json"], { CI: "true" });
    t.is(failed.code, 1, failed.stdout + failed.stderr);
    t.is(failed.json.result.tainted, h.name);
    t.regex(failed.json.result.failed.message, /docker/);
    const state = readState(statePath(t.context.dir, ENV_NAME))!;
    t.truthy(state.hosts[h.name]!.taint, "the state says the host is tainted");
    const plan = await cli(t, ["infra", "plan", "--json"]);
    t.is(plan.code, 1, "the host cannot be read while its engine is stopped");

    const refused = await cli(t, ["infra", "apply", "--json"], { CI: "true" });
    t.is(refused.code, 1);
    t.is(refused.json.error.code, "host_tainted");

    await h.startEngine();
    const tainted = await cli(t, ["infra", "plan", "--json"]);
    t.is(tainted.code, 2, "a tainted host's containers are to be replaced");
    t.true(
      tainted.json.result.changes
        .filter((c: any) => c.host === h.name)
        .every((c: any) => c.action === "replace" && /tainted/.test(c.reason)),
    );
    const untaint = await cli(t, ["infra", "untaint", h.name, "--json"]);
    t.is(untaint.code, 0, untaint.stdout + untaint.stderr);
    const repaired = await cli(t, ["infra", "apply", "--json"], { CI: "true" });
    t.is(repaired.code, 0, repaired.stdout + repaired.stderr);
    const after = await cli(t, ["infra", "plan", "--json"]);
    t.is(after.code, 0, after.stdout);
    t.is(after.json.result.counts.keep, 15);
  },
);

test.serial("destroy removes every container and volume of the environment from the hosts", async (t) => {
  t.timeout(120_000);
  const r = await cli(t, ["infra", "destroy", "--env", ENV_NAME, "--yes", "--json"]);
  t.is(r.code, 0, r.stdout + r.stderr);
  for (const h of r.json.result.hosts) t.is(h.containers.length, 5, JSON.stringify(h));
  const plan = await cli(t, ["infra", "plan", "--json"]);
  t.is(plan.json.result.counts.create, 15, "everything is to be made again");
});
