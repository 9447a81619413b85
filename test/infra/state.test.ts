import test from "ava";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromSeed } from "@nats-io/nkeys";
import ssh2 from "ssh2";
import {
  InfraSecretsError,
  InfraStateError,
  appsKeyComment,
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

/** `ensureSecrets` with the process's umask at 0 (what it makes must be 0600 all the same). */
function ensureUnderUmask0(base: string, env: string): ReturnType<typeof ensureSecrets> {
  const old = process.umask(0);
  try {
    return ensureSecrets(base, env);
  } finally {
    process.umask(old);
  }
}

test("secrets: made once, 0600 from creation (even under umask 0), in a 0700 directory, never overwritten", (t) => {
  const base = tempBase(t);
  const first = ensureUnderUmask0(base, "staging");
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

/** The ed25519 key of an OpenSSH private key text, or a failure. */
function parsedKey(text: string) {
  const parsed = ssh2.utils.parseKey(text);
  if (parsed instanceof Error || Array.isArray(parsed)) throw new Error("not one OpenSSH private key");
  return parsed;
}

test("secrets: the apps engine key is an unencrypted ed25519 key in OpenSSH's formats, named for the environment", (t) => {
  const base = tempBase(t);
  const { secrets } = ensureSecrets(base, "staging");
  const key = secrets.apps_engine!;
  t.regex(
    key.private_key,
    /^-----BEGIN OPENSSH PRIVATE KEY-----\n[A-Za-z0-9+/=\n]+-----END OPENSSH PRIVATE KEY-----\n$/,
  );
  t.regex(key.public_key, /^ssh-ed25519 AAAAC3NzaC1lZDI1NTE5[A-Za-z0-9+/]+={0,2} slipway-apps@staging$/);
  t.is(appsKeyComment("staging"), "slipway-apps@staging");
  const parsed = parsedKey(key.private_key);
  t.is(parsed.type, "ssh-ed25519");
  t.true(parsed.isPrivateKey());
  t.is(parsed.getPublicSSH().toString("base64"), key.public_key.split(" ")[1]!);
  // it signs, and its public half verifies
  const data = Buffer.from("dial-stdio");
  const sig = parsed.sign(data);
  if (sig instanceof Error) throw sig;
  t.true(parsed.verify(data, sig) === true);
  t.not(ensureSecrets(base, "prod").secrets.apps_engine!.private_key, key.private_key);
  // two halves of different keys are refused, without a value in the message
  const other = ensureSecrets(base, "prod").secrets.apps_engine!;
  const file = secretsPath(base, "staging");
  writeFileSync(file, JSON.stringify({ ...secrets, apps_engine: { ...key, public_key: other.public_key } }));
  const e = t.throws(() => readSecrets(file), { instanceOf: InfraSecretsError });
  t.regex(
    e?.message ?? "",
    /apps_engine\.private_key is not .* whose public half is apps_engine\.public_key/,
  );
  t.false(e?.message.includes(other.public_key.split(" ")[1]!) ?? true);
});

test("secrets: a file made before the apps engine key reads, and bootstrap's ensureSecrets adds it, keeping the rest", (t) => {
  const base = tempBase(t);
  const { file, secrets } = ensureSecrets(base, "staging");
  const { apps_engine: _key, ...older } = secrets;
  rmSync(file);
  writeFileSync(file, `${JSON.stringify(older, null, 2)}\n`, { mode: 0o600 });
  const read = readSecrets(file)!;
  t.is(read.apps_engine, undefined, "the older file still reads");
  t.deepEqual(read, older);
  const upgraded = ensureUnderUmask0(base, "staging");
  t.false(upgraded.created);
  t.deepEqual(upgraded.added, ["apps_engine"]);
  t.is(modeOf(file), 0o600, "0600 as before, even under umask 0");
  const { apps_engine: added, ...rest } = upgraded.secrets;
  t.deepEqual(rest, older, "every other value kept");
  t.truthy(added);
  t.is(parsedKey(added!.private_key).getPublicSSH().toString("base64"), added!.public_key.split(" ")[1]!);
  t.deepEqual(readSecrets(file), upgraded.secrets, "what is returned is what the file holds");
  t.deepEqual(
    readdirSync(join(base, ".slipway", "infra")),
    ["staging.secrets"],
    "no temporary file left behind",
  );
  // from then on the file is kept byte for byte
  const text = readFileSync(file, "utf8");
  const again = ensureSecrets(base, "staging");
  t.deepEqual(again.added, []);
  t.is(readFileSync(file, "utf8"), text);
});

test("secrets: a file made before the metrics token gets one from ensureSecrets, the rest kept", (t) => {
  const base = tempBase(t);
  const { file, secrets } = ensureSecrets(base, "staging");
  t.regex(secrets.metrics_token ?? "", /^slwm_[A-Za-z0-9_-]{43}$/, "a fresh file has one");
  t.not(secrets.metrics_token, secrets.env.SLIPWAY_CONTROL_TOKEN);
  const { metrics_token: _token, apps_engine: _key, ...older } = secrets;
  rmSync(file);
  writeFileSync(file, `${JSON.stringify(older, null, 2)}\n`, { mode: 0o600 });
  const upgraded = ensureSecrets(base, "staging");
  t.deepEqual(upgraded.added, ["apps_engine", "metrics_token"]);
  const { metrics_token: token, apps_engine: _added, ...rest } = upgraded.secrets;
  t.deepEqual(rest, older, "every other value kept");
  t.regex(token ?? "", /^slwm_/);
  t.is(modeOf(file), 0o600);
  t.deepEqual(ensureSecrets(base, "staging").added, []);
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
