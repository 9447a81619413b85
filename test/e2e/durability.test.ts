import { spawnSync } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import test, { type ExecutionContext } from "ava";
import { type PlatformHandle, startPlatform } from "../../bin/platform.js";
import { encode } from "../../proto/codec.js";
import { type Bus, openBus } from "../../store/bus.js";
import { secretAad, VaultTamperedError } from "../../store/vault.js";
import { resealAll } from "../../store/vault-rotate.js";
import {
  call,
  eventually,
  freePort,
  get,
  rememberControlToken,
  tempDir,
  testNatsLog,
} from "../helpers/infra.js";
import { nodeArgs } from "../helpers/repo.js";
import { busHaystacks, fileHaystacks, foundIn, type Haystack } from "../helpers/store-scan.js";

const refusals = testNatsLog("test/e2e/durability.test.ts");

async function up(dataDir: string, natsPort: number): Promise<Platform> {
  const h = await startPlatform({
    role: "up",
    dataDir,
    natsPort,
    controlPort: 0,
    dataPort: 0,
    // only the embedded server's refusals, into a whole run's sweep (test/helpers/infra.ts)
    log: (m) => m.startsWith("nats-server:") && refusals(m),
    env: {},
  });
  rememberControlToken(`http://127.0.0.1:${h.control!.port}`, h.controlToken);
  // the test's own reads and writes behind the platform's back, as the NATS admin
  const admin = await openBus({ servers: h.natsUrl, name: "durability-admin", auth: h.nats!.auth("admin") });
  const close = h.close;
  return Object.assign(h, {
    url: `http://127.0.0.1:${h.control!.port}`,
    dataUrl: `http://127.0.0.1:${h.data!.port}`,
    admin,
    close: async () => {
      await admin.close().catch(() => {});
      await close();
    },
  });
}

/** Ids of the app's resources other than Inspections (inspect makes new ones). */
async function ids(url: string, app: string): Promise<string[]> {
  const r = await get(url, `/resources?app_id=${app}&limit=500`);
  return r.body.items
    .filter((x: { type: string }) => x.type !== "Inspection")
    .map((x: { id: string }) => x.id);
}

type Platform = PlatformHandle & { url: string; dataUrl: string; admin: Bus };

/** One data dir through several lives of the platform; `keep` records every answer for the final scan. */
interface Lives {
  readonly dataDir: string;
  readonly natsPort: number;
  readonly app: string;
  readonly secrets: string[];
  readonly bodies: string[];
  /** The platform of the current life. */
  p: Platform;
  keep<R extends { text: string }>(r: R): R;
}

/** What the first life left: the ids the later lives must find again, and the app's token. */
interface Before {
  token: string;
  resources: string[];
  events: string[];
}

/** Starts the next life on the same data dir and waits until it is ready. */
async function nextLife(l: Lives): Promise<Platform> {
  l.p = await up(l.dataDir, l.natsPort);
  await eventually(async () => (await get(l.p.url, "/readyz")).status === 200, 30_000, 20);
  return l.p;
}

async function eventIds(p: Platform, app: string): Promise<string[]> {
  return (await get(p.url, `/events?app_id=${app}&limit=500`)).body.items.map((e: { id: string }) => e.id);
}

/** 1. first life: an app, secrets set on both planes, one unset, one replayed. */
async function firstLife(t: ExecutionContext, l: Lives): Promise<Before> {
  const { p, app, secrets, keep } = l;
  const init = keep(await call(p.url, "initialize-app", { name: app }));
  const token = init.body.result.token as string;
  for (let i = 0; i < 4; i++)
    keep(
      await call(
        p.url,
        "set-secret",
        { app, name: `S${i}`, value: secrets[i] },
        { "idempotency-key": `k${i}` },
      ),
    );
  keep(
    await call(
      p.dataUrl,
      "set-secret",
      { app, name: "S4", value: secrets[4] },
      { authorization: `Bearer ${token}` },
    ),
  );
  keep(await call(p.url, "set-secret", { app, name: "GONE", value: secrets[5] }));
  keep(await call(p.url, "unset-secret", { app, name: "GONE" }));
  keep(await call(p.url, "set-secret", { app, name: "S0", value: secrets[0] }, { "idempotency-key": "k0" })); // replay
  const resources = await ids(p.url, app);
  const events = await eventIds(p, app);
  t.is(resources.length, 6); // Application + S0..S4
  t.true(events.length >= 8);
  await p.close();
  return { token, resources, events };
}

/** 2. second life on the same data dir: the same resources and events, the vault and token still open. */
async function secondLife(t: ExecutionContext, l: Lives, before: Before): Promise<void> {
  const { app, secrets, keep } = l;
  const p = await nextLife(l);
  t.deepEqual(await ids(p.url, app), before.resources);
  t.deepEqual((await eventIds(p, app)).slice(-before.events.length), before.events);
  const listed = keep(await call(p.url, "inspect", { app, type: "secrets" }));
  t.deepEqual(
    listed.body.resource.result.items.map(
      (i: { name: string; integrity: string }) => `${i.name}:${i.integrity}`,
    ),
    ["S0:ok", "S1:ok", "S2:ok", "S3:ok", "S4:ok"],
  );
  // the vault opens the value sealed in the first life
  const e0 = await p.admin.kv.vault.get(`${app}.S1`);
  t.is(p.vault.openString(e0!.json<{ sealed: never }>().sealed, secretAad(app, "S1")), secrets[1]!);
  // the token minted in the first life still works
  t.is(
    (await call(p.dataUrl, "inspect", { app, type: "app" }, { authorization: `Bearer ${before.token}` }))
      .status,
    200,
  );
  await p.close();
}

/** 3. a deleted read index is rebuilt from NATS (the platform stays up for step 4). */
async function rebuiltIndex(t: ExecutionContext, l: Lives, before: Before): Promise<void> {
  rmSync(join(l.dataDir, "index"), { recursive: true, force: true });
  const p = await nextLife(l);
  t.deepEqual(await ids(p.url, l.app), before.resources);
  t.deepEqual((await eventIds(p, l.app)).slice(-before.events.length), before.events);
}

/** 4. a tampered sealed value is refused, never decrypted. */
async function tampering(t: ExecutionContext, l: Lives): Promise<void> {
  const { p, app, keep } = l;
  const entry = await p.admin.kv.vault.get(`${app}.S2`);
  const doc = entry!.json<{ sealed: { ct: string } }>();
  const ct = Buffer.from(doc.sealed.ct, "base64");
  ct[0] = ct[0]! ^ 0xff;
  const tampered = { ...doc, sealed: { ...doc.sealed, ct: ct.toString("base64") } };
  await p.admin.kv.vault.put(`${app}.S2`, encode(tampered));
  const stored = (await p.admin.kv.vault.get(`${app}.S2`))!.json<{ sealed: never }>().sealed;
  t.throws(() => p.vault.open(stored, secretAad(app, "S2")), { instanceOf: VaultTamperedError });
  // moving a sealed value to another name is refused too (AAD names it)
  const s3 = (await p.admin.kv.vault.get(`${app}.S3`))!.json<{ sealed: never }>().sealed;
  t.throws(() => p.vault.open(s3, secretAad(app, "S4")), { instanceOf: VaultTamperedError });
  const afterTamper = keep(await call(p.url, "inspect", { app, type: "secrets" }));
  t.is(
    afterTamper.body.resource.result.items.find((i: { name: string }) => i.name === "S2").integrity,
    "tampered",
  );
  await p.close();
}

/** 5. slipwayd vault rotate: new active key, every intact value re-sealed, the tampered one reported and left alone. */
async function rotation(t: ExecutionContext, l: Lives): Promise<void> {
  const { app, keep } = l;
  const rot = spawnSync(process.execPath, [...nodeArgs("bin", "slipwayd.ts"), "vault", "rotate"], {
    env: {
      ...process.env,
      SLIPWAY_DATA_DIR: l.dataDir,
      SLIPWAY_NATS_PORT: String(l.natsPort),
      SLIPWAY_VAULT_KEY: "",
    },
    encoding: "utf8",
    timeout: 60_000,
  });
  const report = JSON.parse(rot.stdout.trim().split("\n").pop()!);
  t.is(rot.status, 1, "non-zero: a tampered value was found");
  t.is(report.resealed, 5, "four intact secrets and the app's service key");
  t.deepEqual(report.tampered, [`${app}.S2`]);
  const p = await nextLife(l);
  const rotated = keep(await call(p.url, "inspect", { app, type: "secrets" }));
  const items = rotated.body.resource.result.items as { name: string; key_id: string; integrity: string }[];
  const intact = items.filter((i) => i.name !== "S2");
  t.is(intact.length, 4, "the four intact secrets are listed");
  t.true(intact.every((i) => i.key_id === report.active_key_id && i.integrity === "ok"));
  const r2 = await resealAll(p.admin, p.vault);
  t.is(r2.resealed, 0, "nothing left to re-seal");
}

/**
 * 6. the scan: no secret value in any answer, event, log line, KV value, stream message or file of
 * the data dir; the app's token in none of them but the answer that handed it out and the app's
 * own `.env` (the platform keeps its SHA-256).
 */
async function scan(t: ExecutionContext, l: Lives, token: string): Promise<void> {
  const { p, dataDir } = l;
  const answers: Haystack[] = l.bodies.map((b, i) => ({ where: `response ${i}`, text: b }));
  const stored = await busHaystacks(p.admin);
  await p.close();
  stored.push(...fileHaystacks(dataDir));
  t.true(stored.length > 50, `scanned ${stored.length} places`);
  for (const s of l.secrets) {
    const found = foundIn([...answers, ...stored], s);
    t.deepEqual(found, [], `secret value found in ${found.join(", ")}`);
  }
  // the app's own workspace .env hands it to the app's processes (mode 0600, never committed)
  t.deepEqual(
    foundIn(stored, token),
    [`/apps/${l.app}/.env`],
    "the app token is stored nowhere else in clear",
  );
  const hash = createHash("sha256").update(token).digest("hex");
  t.true(foundIn(stored, hash).length > 0, "its SHA-256 is what is kept");
}

test("restart keeps resources, events and secrets; a deleted index is rebuilt; tampering is refused; rotation re-seals; no secret value is stored anywhere in clear", async (t) => {
  const bodies: string[] = [];
  const l: Lives = {
    dataDir: tempDir(),
    natsPort: await freePort(),
    app: `d${randomUUID().slice(0, 8)}`,
    secrets: Array.from({ length: 6 }, (_, i) => `SECRET-${i}-${randomUUID()}`),
    bodies,
    p: undefined as unknown as Platform,
    keep: (r) => {
      bodies.push(r.text);
      return r;
    },
  };
  // (start-up time is a figure of bench/restart.ts, not a test's deadline)
  l.p = await up(l.dataDir, l.natsPort);
  t.teardown(() => l.p.close());
  await eventually(async () => (await get(l.p.url, "/readyz")).status === 200, 30_000, 20);
  const before = await firstLife(t, l);
  await secondLife(t, l, before);
  await rebuiltIndex(t, l, before);
  await tampering(t, l);
  await rotation(t, l);
  await scan(t, l, before.token);
  rmSync(l.dataDir, { recursive: true, force: true });
});
