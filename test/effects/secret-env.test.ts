import test from "ava";
import { openSecrets } from "../../actors/tasks/secrets.js";
import { Masker, runProcess } from "../../effects/process.js";
import { secretAad, type VaultEntry } from "../../proto/mod.js";
import { Vault } from "../../store/vault.js";
import { tempDir } from "../helpers/infra.js";

/**
 * Secret values on their way to a process (security review 2026-11-27, finding 8): a value a
 * process cannot take (a NUL) never reaches spawn, whose refusal quotes the value; the platform's
 * own names (`SLIPWAY_*`, where an older version kept the signing key) are never injected.
 */

/** The review's value: a NUL in the middle of a long secret. */
const VALUE = "sk_live_SUPERSECRETVALUE_0123456789abcdefghijklmnopqrstuvwxyz\u0000tail";

test("runProcess: an environment value with a NUL fails the run naming the variable, never quoting the value", async (t) => {
  const r = await runProcess({
    cwd: tempDir(),
    command: process.execPath,
    args: ["-e", "process.exit(0)"],
    env: { PATH: process.env.PATH ?? "", NULTEST: VALUE },
    timeoutMs: 10_000,
    masker: new Masker([VALUE]),
    onLine: () => {},
  });
  t.is(r.exit_code, null);
  t.regex(r.error ?? "", /NULTEST holds a NUL/);
  t.false(JSON.stringify(r).includes("SUPERSECRET"), JSON.stringify(r));
});

test("runProcess: a command that cannot start is reported masked", async (t) => {
  const secret = "no-such-command-SUPERSECRET";
  const r = await runProcess({
    cwd: tempDir(),
    command: `/nonexistent/${secret}`,
    args: [],
    env: { PATH: "" },
    timeoutMs: 10_000,
    masker: new Masker([secret]),
    onLine: () => {},
  });
  t.truthy(r.error);
  t.false(JSON.stringify(r).includes("SUPERSECRET"), JSON.stringify(r));
});

test("openSecrets: SLIPWAY_* names and values with a NUL are left out; the masker still knows every value", (t) => {
  const vault = new Vault({ keys: new Map([["k1", Buffer.alloc(32, 7)]]), active: "k1", oldest: "k1" });
  const entry = (name: string, value: string): [string, VaultEntry] => [
    name,
    {
      sealed: vault.seal(value, secretAad("shop", name)),
      resource_id: "sec_1",
      version: 1,
      updated_at: new Date().toISOString(),
    },
  ];
  const { env, masker, skipped } = openSecrets({ vault, app: "shop" }, [
    entry("PAYMENT_KEY", "pay-0123456789"),
    entry("SLIPWAY_AUTH_SIGNING_KEY", "the-platform-signing-key"),
    entry("slipway_lower", "lower-case-reserved"),
    entry("NULTEST", VALUE),
  ]);
  t.deepEqual(env, { PAYMENT_KEY: "pay-0123456789" });
  t.deepEqual(skipped, ["NULTEST"]);
  t.is(masker.mask("x sk_live_SUPERSECRETVALUE_0123456789abcdefghijklmnopqrstuvwxyz y"), "x *** y");
});
