import test from "ava";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadControlToken, MIN_CONTROL_TOKEN_LENGTH } from "../../gateway/auth.js";
import { Vault } from "../../store/vault.js";
import { freePort, startTestNats, type TestNats } from "../helpers/infra.js";
import { spawnSlipwayd, type SlipwaydProcess, slipwaydEnv, tempDirs } from "../helpers/slipwayd-process.js";

// Start-up refusals of slipwayd: vault keys that differ from the deployment's, a short control token.

const started: SlipwaydProcess[] = [];
let nats: TestNats | undefined;
test.before(async () => {
  nats = await startTestNats();
});
const dirs = tempDirs();
const tempDir = dirs.make;
test.after.always(async () => {
  await Promise.all(started.map((p) => p.stop()));
  await nats?.stop();
  dirs.removeAll();
});

const key = () => randomBytes(32).toString("base64");
const natsOf = () => nats!;
/** The deployment's key: the first process on the test NATS records its fingerprint. */
const shared = key();

const baseEnv = slipwaydEnv;

function slipwayd(args: string[], env: NodeJS.ProcessEnv): SlipwaydProcess {
  const p = spawnSlipwayd(args, env);
  started.push(p);
  return p;
}

/** Exit code and output of a process expected to refuse to start (code "started" when it did start). */
async function refused(p: SlipwaydProcess): Promise<{ code: number | string; out: string }> {
  const started = p.ready(30_000).then(
    () => "started",
    () => undefined,
  );
  const code = await Promise.race([p.exited(), started.then((s) => s ?? p.exited())]);
  return { code, out: p.out() };
}

test.serial(
  "processes of one NATS with different vault keys: the second refuses to start and names SLIPWAY_VAULT_KEY; the same key starts",
  async (t) => {
    const nats = natsOf();
    const a = shared;
    const gateway = slipwayd(
      ["gateway", "--plane", "control"],
      baseEnv({ ...nats.env("gateway"), SLIPWAY_DATA_DIR: tempDir(), SLIPWAY_VAULT_KEY: a }),
    );
    await gateway.ready();

    // another key in SLIPWAY_VAULT_KEY
    const other = await refused(
      slipwayd(
        ["node"],
        baseEnv({ ...nats.env("node"), SLIPWAY_DATA_DIR: tempDir(), SLIPWAY_VAULT_KEY: key() }),
      ),
    );
    t.not(other.code, 0);
    t.regex(other.out, /vault key mismatch: .*SLIPWAY_VAULT_KEY/);
    t.is(other.out.trim().split("\n").length, 1, `one line: ${other.out}`);
    t.false(other.out.includes("    at "), "no stack trace");
    t.false(other.out.includes(a), "the key is not shown");

    // another key from a data dir's vault.key (SLIPWAY_VAULT_KEY unset): names the file, and the variable
    const dir = tempDir();
    const fromFile = await refused(
      slipwayd(["node"], baseEnv({ ...nats.env("node"), SLIPWAY_DATA_DIR: dir })),
    );
    t.not(fromFile.code, 0);
    t.true(fromFile.out.includes(join(dir, "vault.key")), fromFile.out);
    t.regex(fromFile.out, /SLIPWAY_VAULT_KEY/);
    t.false(fromFile.out.includes("    at "));

    // vault rotate with a key of its own refuses before it adds a key to the file
    const rotate = await refused(
      slipwayd(["vault", "rotate"], baseEnv({ ...nats.env("admin"), SLIPWAY_DATA_DIR: dir })),
    );
    t.not(rotate.code, 0);
    t.regex(rotate.out, /vault key mismatch/);
    t.is(readFileSync(join(dir, "vault.key"), "utf8").trim().split("\n").length, 1, "no key was added");

    // the same key, twice: starts, and a rotation of that deployment works
    const node = slipwayd(
      ["node"],
      baseEnv({ ...nats.env("node"), SLIPWAY_DATA_DIR: tempDir(), SLIPWAY_VAULT_KEY: a }),
    );
    await node.ready();
    t.regex(node.out(), /slipwayd node ready in/);
    const rotated = slipwayd(
      ["vault", "rotate"],
      baseEnv({ ...nats.env("admin"), SLIPWAY_DATA_DIR: tempDir(), SLIPWAY_VAULT_KEY: `${key()},${a}` }),
    );
    t.is(await rotated.exited(), 0, rotated.out());
    t.regex(rotated.out(), /"active_key_id"/);
  },
);

test.serial(
  "a second up on a data dir in use refuses to start (its node would share the node id)",
  async (t) => {
    const env = baseEnv({ ...natsOf().env("admin"), SLIPWAY_DATA_DIR: tempDir(), SLIPWAY_VAULT_KEY: shared });
    const first = slipwayd(["up"], env);
    await first.ready();
    const second = await refused(slipwayd(["up"], env));
    t.is(second.code, 1);
    t.regex(second.out, /the read index .* is in use by another slipwayd/);
    t.false(second.out.includes("    at "));
    await first.stop();
  },
);

test.serial("the fingerprint reveals nothing of the key, and survives a rotation (same oldest key)", (t) => {
  const dir = tempDir();
  const old = key();
  const fp = Vault.open(dir, { SLIPWAY_VAULT_KEY: old }).fingerprint();
  t.is(Vault.open(dir, { SLIPWAY_VAULT_KEY: `${key()},${old}` }).fingerprint(), fp);
  t.not(Vault.open(dir, { SLIPWAY_VAULT_KEY: key() }).fingerprint(), fp);
  const raw = Buffer.from(old, "base64");
  t.false(fp.includes(old) || fp.includes(raw.toString("hex")) || fp.includes(raw.toString("base64url")));
});

test.serial("a control token shorter than 32 characters is refused at startup", async (t) => {
  const short = await refused(
    slipwayd(
      ["up"],
      baseEnv({
        SLIPWAY_DATA_DIR: tempDir(),
        SLIPWAY_NATS_PORT: String(await freePort()),
        SLIPWAY_CONTROL_TOKEN: "0123456789",
      }),
    ),
  );
  t.is(short.code, 1);
  t.regex(short.out, /SLIPWAY_CONTROL_TOKEN is 10 characters long; a control token needs at least 32/);
  t.is(short.out.trim().split("\n").length, 1, `one line: ${short.out}`);
  t.false(short.out.includes("    at "), "no stack trace");

  // a hand-edited <data>/control.token
  const dir = tempDir();
  writeFileSync(join(dir, "control.token"), "secret\n", { mode: 0o600 });
  t.throws(() => loadControlToken(dir, {}), {
    message: /control\.token holds a control token of 6 characters/,
  });
  t.throws(() => loadControlToken(dir, { SLIPWAY_CONTROL_TOKEN: "x".repeat(MIN_CONTROL_TOKEN_LENGTH - 1) }));
  t.is(loadControlToken(dir, { SLIPWAY_CONTROL_TOKEN: "x".repeat(MIN_CONTROL_TOKEN_LENGTH) }).length, 32);
  // generated tokens pass
  t.true(loadControlToken(tempDir(), {}).length >= MIN_CONTROL_TOKEN_LENGTH);
});
