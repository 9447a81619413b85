import test from "ava";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromSeed } from "@nats-io/nkeys";
import {
  InfraSecretsError,
  InfraStateError,
  emptyState,
  ensureSecrets,
  readSecrets,
  readState,
  secretsPath,
  statePath,
  writeState,
} from "../../infra/mod.js";
import { NATS_ROLES } from "../../store/mod.js";

function tempBase(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), "slipway-infra-state-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const modeOf = (p: string) => statSync(p).mode & 0o777;

test("secrets: made once, 0600 from creation (even under umask 0), in a 0700 directory, never overwritten", (t) => {
  const base = tempBase(t);
  const old = process.umask(0);
  let first: ReturnType<typeof ensureSecrets>;
  try {
    first = ensureSecrets(base, "staging");
  } finally {
    process.umask(old);
  }
  t.true(first.created);
  t.is(first.file, secretsPath(base, "staging"));
  t.is(first.file, join(base, ".slipway", "infra", "staging.secrets"));
  // with umask 0 a chmod-after-write would have shown a 0644/0666 moment; the mode is the creation's
  t.is(modeOf(first.file), 0o600);
  t.is(modeOf(join(base, ".slipway", "infra")), 0o700);
  const s = first.secrets;
  t.is(s.environment, "staging");
  t.true(s.nats_cluster.password.length >= 40);
  t.is(Buffer.from(s.env.SLIPWAY_VAULT_KEY, "base64").length, 32);
  t.regex(s.env.SLIPWAY_CONTROL_TOKEN, /^slwc_[A-Za-z0-9_-]{43}$/);
  for (const role of NATS_ROLES) {
    const kp = fromSeed(new TextEncoder().encode(s.nats_roles[role].seed));
    t.is(kp.getPublicKey(), s.nats_roles[role].public_key, role);
  }
  const before = readFileSync(first.file, "utf8");
  const again = ensureSecrets(base, "staging");
  t.false(again.created);
  t.is(readFileSync(first.file, "utf8"), before, "existing secrets are kept byte for byte");
  t.deepEqual(again.secrets, s);
  t.deepEqual(
    readdirSync(join(base, ".slipway", "infra")).sort(),
    ["staging.secrets"],
    "no temporary file left behind",
  );
  // another environment has its own secrets
  const other = ensureSecrets(base, "prod");
  t.not(other.secrets.env.SLIPWAY_VAULT_KEY, s.env.SLIPWAY_VAULT_KEY);
});

test("secrets: a file readable by others is refused, and no message carries a secret", (t) => {
  const base = tempBase(t);
  const { file, secrets } = ensureSecrets(base, "staging");
  const text = readFileSync(file, "utf8");
  rmSync(file);
  writeFileSync(file, text, { mode: 0o644 });
  const e = t.throws(() => readSecrets(file), { instanceOf: InfraSecretsError });
  t.regex(e?.message ?? "", /readable by others \(mode 0644\)/);
  t.throws(() => ensureSecrets(base, "staging"), { instanceOf: InfraSecretsError });
  t.is(readFileSync(file, "utf8"), text, "the refused file is not rewritten");
  // a damaged file: named by its fields, never by its values
  rmSync(file);
  const broken = { ...secrets, env: { ...secrets.env, SLIPWAY_CONTROL_TOKEN: "short" } };
  writeFileSync(file, JSON.stringify(broken), { mode: 0o600 });
  const bad = t.throws(() => readSecrets(file), { instanceOf: InfraSecretsError });
  t.regex(bad?.message ?? "", /SLIPWAY_CONTROL_TOKEN/);
  for (const secret of [secrets.env.SLIPWAY_VAULT_KEY, secrets.nats_cluster.password, "short"])
    t.false(bad?.message.includes(secret) ?? true);
});

test("state: written whole and atomically (0600), read back, a broken file is refused", (t) => {
  const base = tempBase(t);
  const file = statePath(base, "staging");
  t.is(readState(file), undefined);
  const state = emptyState("staging");
  state.hosts.a = {
    address: "10.0.0.1",
    port: 22,
    taint: { reason: "apply failed", at: new Date().toISOString() },
  };
  writeState(file, state);
  t.is(modeOf(file), 0o600);
  const back = readState(file);
  t.is(back?.hosts.a?.taint?.reason, "apply failed");
  t.deepEqual(readdirSync(join(base, ".slipway", "infra")), ["staging.json"]);
  writeFileSync(file, "{not json");
  t.throws(() => readState(file), { instanceOf: InfraStateError, message: /not a state file/ });
  t.true(existsSync(file));
});
