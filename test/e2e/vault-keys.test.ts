import test from "ava";
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadControlToken } from "../../gateway/auth.js";
import { addKeyToFile, keyFilePath, keyId, Vault, VaultKeyMissingError } from "../../store/vault.js";
import {
  call,
  eventually,
  freePort,
  startTestNats,
  startTestPlatform,
  type TestNats,
  type TestPlatform,
  tempDir,
} from "../helpers/infra.js";
import { spawnSlipwayd, type SlipwaydProcess, slipwaydEnv } from "../helpers/slipwayd-process.js";

/**
 * The vault key and control token claims of docs/security.md: a rotated key file is picked up by a
 * running platform without a restart; a value sealed under a key the ring lacks is
 * VaultKeyMissingError, after one reload of the key file; a key of any length but 32 bytes stops
 * the process at startup; generated control tokens are 48 characters.
 */

const started: SlipwaydProcess[] = [];
test.after.always(async () => {
  await Promise.all(started.map((p) => p.stop()));
});

const baseEnv = slipwaydEnv;

/** Exit code and output of a process expected to refuse to start ("started" when it did start). */
async function refused(p: SlipwaydProcess): Promise<{ code: number | string; out: string }> {
  const up = p.ready(60_000).then(
    () => "started",
    () => undefined,
  );
  const code = await Promise.race([p.exited(), up.then((s) => s ?? p.exited())]);
  return { code, out: p.out() };
}

/** The first line of a key file: the active key's id. */
const activeIdOf = (dataDir: string) =>
  keyId(Buffer.from(readFileSync(keyFilePath(dataDir), "utf8").split("\n")[0]!, "base64"));

test.serial("a rotated key file is picked up by a running platform without a restart", async (t) => {
  let nats: TestNats | undefined;
  let p: TestPlatform | undefined;
  t.teardown(async () => {
    await p?.close();
    await nats?.stop();
  });
  nats = await startTestNats();
  const dataDir = tempDir();
  // no SLIPWAY_VAULT_KEY: the keys come from <data>/vault.key, made at first boot
  p = await startTestPlatform(nats, { dataDir, env: { SLIPWAY_VAULT_KEY: "" } });
  const app = `vk${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app })).status, 200);
  const first = activeIdOf(dataDir);
  const keyOf = async (name: string) => {
    const r = await call(p!.controlUrl, "inspect", { app, type: "secrets" });
    const items = r.body.resource.result.items as { name: string; key_id: string; integrity: string }[];
    return items.find((i) => i.name === name);
  };
  t.is((await call(p.controlUrl, "set-secret", { app, name: "OLD", value: "sealed-before" })).status, 200);
  t.is((await keyOf("OLD"))?.key_id, first);

  // another process (slipwayd vault rotate) adds a new active key to the file
  const added = addKeyToFile(dataDir);
  t.not(added, first);
  t.is(activeIdOf(dataDir), added);
  // new seals use it once the running process has looked at the file again (at most once a second)
  let n = 0;
  const sealed = await eventually(
    async () => {
      const name = `NEW${n++}`;
      const r = await call(p!.controlUrl, "set-secret", { app, name, value: `sealed-after-${n}` });
      if (r.status !== 200) throw new Error(r.text);
      const k = await keyOf(name);
      return k?.key_id === added ? k : undefined;
    },
    20_000,
    200,
  );
  t.is(sealed.integrity, "ok");
  // the value sealed under the first key still opens
  t.like(await keyOf("OLD"), { key_id: first, integrity: "ok" });
});

test.serial(
  "a value sealed under a key the ring lacks is VaultKeyMissingError, after one reload of the key file",
  (t) => {
    const other = Vault.open(tempDir(), {});
    const mine = Vault.open(tempDir(), {});
    const foreign = other.seal("x", "app/NAME");
    t.throws(() => mine.open(foreign, "app/NAME"), { instanceOf: VaultKeyMissingError });

    // a key another process added since this vault read the file: the ring is read again first
    const dir = tempDir();
    const before = Vault.open(dir, {});
    addKeyToFile(dir);
    const after = Vault.open(dir, {});
    const s = after.seal("fresh", "app/NAME");
    t.is(s.kid, activeIdOf(dir));
    t.is(before.openString(s, "app/NAME"), "fresh");
  },
);

test.serial(
  "a vault key of another length than 32 bytes stops the process at startup, in one line",
  async (t) => {
    const cases: [string, NodeJS.ProcessEnv, (dir: string) => void][] = [
      ["SLIPWAY_VAULT_KEY of 16 bytes", { SLIPWAY_VAULT_KEY: randomBytes(16).toString("base64") }, () => {}],
      [
        "a key file line of 31 bytes",
        {},
        (dir) =>
          writeFileSync(join(dir, "vault.key"), `${randomBytes(31).toString("base64")}\n`, { mode: 0o600 }),
      ],
    ];
    for (const [what, env, prepare] of cases) {
      const dataDir = tempDir();
      prepare(dataDir);
      const proc = spawnSlipwayd(
        ["up"],
        baseEnv({ ...env, SLIPWAY_DATA_DIR: dataDir, SLIPWAY_NATS_PORT: String(await freePort()) }),
      );
      started.push(proc);
      const r = await refused(proc);
      t.not(r.code, 0, `${what}: ${r.out}`);
      t.not(r.code, "started", what);
      t.regex(r.out, /vault keys must be 256 bits \(32 bytes, base64\)/, what);
      t.is(r.out.trim().split("\n").length, 1, `one line: ${r.out}`);
      t.false(r.out.includes("    at "), "no stack trace");
    }
  },
);

test.serial("a generated control token is 48 characters: slwc_ and 32 random bytes in base64url", (t) => {
  const tokens = Array.from({ length: 5 }, () => loadControlToken(tempDir(), {}));
  for (const token of tokens) {
    t.is(token.length, 48, token.slice(0, 5));
    t.regex(token, /^slwc_[A-Za-z0-9_-]{43}$/);
  }
  t.is(new Set(tokens).size, tokens.length);
});
