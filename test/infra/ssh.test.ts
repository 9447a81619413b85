import test from "ava";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HostKeyChangedError, SshError, type SshTarget, openSsh, sshAuthFor } from "../../infra/mod.js";
import { freePort } from "../../effects/net.js";
import { type LoopbackSshd, makeKey, sshdMissing, startLoopbackSshd } from "../helpers/loopback-sshd.js";
import { NASTY_WORDS } from "./fixtures.js";

// One sshd for the file: the tests run one after another on it.
let sshd: LoopbackSshd;
test.before(async () => {
  const missing = sshdMissing();
  if (missing) throw new Error(missing);
  sshd = await startLoopbackSshd();
});
test.after.always(async () => {
  await sshd?.stop();
});

const target = (extra: Partial<SshTarget> = {}): SshTarget => ({
  name: "loop",
  address: "127.0.0.1",
  port: sshd.port,
  user: sshd.user,
  keyFile: sshd.clientKey,
  ...extra,
});

test.serial(
  "ssh: first contact gives the host key; its fingerprint is the one ssh-keygen prints",
  async (t) => {
    const s = await openSsh(target(), sshAuthFor(target(), {}, "/"));
    try {
      t.is(s.hostKey.algorithm, "ssh-ed25519");
      t.is(s.hostKey.fingerprint, sshd.hostFingerprint());
      const r = await s.exec(["id", "-un"]);
      t.is(r.code, 0);
      t.is(r.stdout.trim(), sshd.user);
      const fail = await s.exec(["sh", "-c", "echo oops >&2; exit 3"]);
      t.is(fail.code, 3);
      t.is(fail.stderr.trim(), "oops");
    } finally {
      s.close();
    }
  },
);

test.serial("ssh: every word reaches the remote command as it was, shell characters included", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "sw-quote-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const s = await openSsh(target(), sshAuthFor(target(), {}, "/"));
  try {
    const r = await s.exec(["printf", "<%s>", ...NASTY_WORDS]);
    t.is(r.code, 0, r.stderr);
    t.is(r.stdout, NASTY_WORDS.map((w) => `<${w}>`).join(""));
    // nothing in the words ran: `touch pwned` would have made a file in the login's home or cwd
    const home = (await s.exec(["pwd"])).stdout.trim();
    t.false(existsSync(join(home, "pwned")));
    // a path full of shell characters is one argument
    const nasty = join(dir, "d i r;$(touch x)'q`y`");
    mkdirSync(nasty);
    writeFileSync(join(nasty, "f *.txt"), "inside\n");
    const cat = await s.exec(["cat", join(nasty, "f *.txt")]);
    t.is(cat.code, 0, cat.stderr);
    t.is(cat.stdout, "inside\n");
    t.false(existsSync(join(dir, "x")));
    // stdin travels too
    const echo = await s.exec(["cat"], { stdin: "from stdin\n" });
    t.is(echo.stdout, "from stdin\n");
  } finally {
    s.close();
  }
});

test.serial("ssh: a command that outlives its timeout is stopped with ssh_timeout", async (t) => {
  const s = await openSsh(target(), sshAuthFor(target(), {}, "/"));
  try {
    const started = Date.now();
    const e = await t.throwsAsync(s.exec(["sleep", "30"], { timeoutMs: 400 }), { instanceOf: SshError });
    t.is(e?.code, "ssh_timeout");
    t.true(Date.now() - started < 5000);
  } finally {
    s.close();
  }
});

test.serial("ssh: a server that never speaks SSH times out; a closed port is unreachable", async (t) => {
  const silent = createServer(() => {});
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", () => r()));
  t.teardown(() => silent.close());
  const port = (silent.address() as { port: number }).port;
  const e = await t.throwsAsync(
    openSsh(target({ port }), sshAuthFor(target(), {}, "/"), { timeoutMs: 500 }),
    {
      instanceOf: SshError,
    },
  );
  t.is(e?.code, "ssh_timeout");
  const closed = await freePort();
  const e2 = await t.throwsAsync(openSsh(target({ port: closed }), sshAuthFor(target(), {}, "/")), {
    instanceOf: SshError,
  });
  t.is(e2?.code, "ssh_unreachable");
});

test.serial("ssh: an unauthorized key is refused; no key material in the message", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "sw-key-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const stranger = makeKey(dir, "stranger");
  const t2 = target({ keyFile: stranger });
  const e = await t.throwsAsync(openSsh(t2, sshAuthFor(t2, {}, "/")), { instanceOf: SshError });
  t.is(e?.code, "ssh_auth_failed");
  const keyText = readFileSync(stranger, "utf8");
  const body = keyText.split("\n").filter((l) => l && !l.startsWith("-----"))[0]!;
  t.false(e?.message.includes(body.slice(0, 20)) ?? true);
  // no agent and no key file: said so before any connection
  const none = target({ keyFile: undefined });
  t.throws(() => sshAuthFor(none, {}, "/"), { instanceOf: SshError, message: /no SSH credentials/ });
  // a relative key file is relative to the infrastructure file's folder
  t.throws(() => sshAuthFor(target({ keyFile: "missing_key" }), {}, dir), {
    message: new RegExp(`ssh.key_file ${join(dir, "missing_key")} cannot be read`),
  });
  // an encrypted key is refused: its passphrase never passes through Slipway
  const enc = join(dir, "enc");
  spawnSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "correct horse", "-f", enc]);
  t.throws(() => sshAuthFor(target({ keyFile: enc }), {}, "/"), {
    message: /is encrypted: add it to your ssh agent/,
  });
});

test.serial("ssh: the operator's agent (SSH_AUTH_SOCK) logs in without a key file", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "sw-agent-"));
  const sock = join(dir, "agent.sock");
  const agent: ChildProcess = spawn("ssh-agent", ["-D", "-a", sock], { stdio: "ignore" });
  t.teardown(() => {
    agent.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  });
  for (let i = 0; i < 50 && !existsSync(sock); i++) await new Promise((r) => setTimeout(r, 100));
  const add = spawnSync("ssh-add", [sshd.clientKey], {
    env: { ...process.env, SSH_AUTH_SOCK: sock },
    encoding: "utf8",
  });
  t.is(add.status, 0, add.stderr);
  const viaAgent = target({ keyFile: undefined });
  const s = await openSsh(viaAgent, sshAuthFor(viaAgent, { SSH_AUTH_SOCK: sock }, "/"));
  try {
    t.is((await s.exec(["id", "-un"])).stdout.trim(), sshd.user);
  } finally {
    s.close();
  }
});

// last: it changes the host key
test.serial("ssh: a changed host key is refused before logging in, both fingerprints shown", async (t) => {
  const first = await openSsh(target(), sshAuthFor(target(), {}, "/"));
  const pinned = first.hostKey;
  first.close();
  const oldFp = sshd.hostFingerprint();
  await sshd.regenerateHostKey();
  const newFp = sshd.hostFingerprint();
  t.not(oldFp, newFp);
  const e = await t.throwsAsync(openSsh(target(), sshAuthFor(target(), {}, "/"), { pinned }), {
    instanceOf: HostKeyChangedError,
  });
  t.is(e?.code, "host_key_changed");
  t.true(e?.message.includes(oldFp), e?.message);
  t.true(e?.message.includes(newFp), e?.message);
  t.is(e?.offered.fingerprint, newFp);
  // the client stopped at the key exchange: sshd never saw a login after the restart
  const afterRestart = sshd.log().split("--- start").pop() ?? "";
  t.notRegex(afterRestart, /Accepted publickey/);
  // pinned to the new key it is accepted again
  const again = await openSsh(target(), sshAuthFor(target(), {}, "/"), { pinned: e!.offered });
  again.close();
  t.pass();
});
