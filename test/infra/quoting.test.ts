import test from "ava";
import { spawnSync } from "node:child_process";
import { commandLine, fingerprintOf, hostKeyOf, shellQuote } from "../../infra/mod.js";
import { NASTY_WORDS } from "./fixtures.js";

test("shellQuote: plain words stay as they are, others are single-quoted", (t) => {
  t.is(shellQuote("docker"), "docker");
  t.is(shellQuote("--format"), "--format");
  t.is(shellQuote("unix:///run/docker.sock"), "unix:///run/docker.sock");
  t.is(shellQuote(""), "''");
  t.is(shellQuote("{{json .}}"), "'{{json .}}'");
  t.is(shellQuote("it's"), "'it'\\''s'");
  t.is(shellQuote("$(id)"), "'$(id)'");
  t.is(shellQuote("~"), "'~'", "no tilde expansion");
  t.is(shellQuote("*"), "'*'", "no globbing");
});

test("commandLine: a POSIX shell splits it back into exactly the argv (sh, locally)", (t) => {
  // the same shell family the hosts run (sh -c on Debian is dash); printf shows each word between markers
  const argv = ["printf", "<%s>", ...NASTY_WORDS];
  const r = spawnSync("sh", ["-c", commandLine(argv)], { encoding: "utf8", cwd: "/" });
  t.is(r.status, 0, r.stderr);
  t.is(r.stdout, NASTY_WORDS.map((w) => `<${w}>`).join(""));
});

test("commandLine: refuses an empty argv and NUL bytes", (t) => {
  t.throws(() => commandLine([]), { message: /at least one word/ });
  t.throws(() => commandLine(["echo", "a\0b"]), { message: /NUL/ });
});

test("fingerprints are OpenSSH's SHA256 form; the key type comes from the blob", (t) => {
  // an ssh-ed25519 blob: string "ssh-ed25519", string <32 bytes>
  const type = Buffer.from("ssh-ed25519");
  const key = Buffer.alloc(32, 7);
  const blob = Buffer.concat([Buffer.from([0, 0, 0, type.length]), type, Buffer.from([0, 0, 0, 32]), key]);
  const fp = fingerprintOf(blob);
  t.regex(fp, /^SHA256:[A-Za-z0-9+/]{43}$/);
  t.false(fp.endsWith("="));
  const hk = hostKeyOf(blob);
  t.is(hk.algorithm, "ssh-ed25519");
  t.is(hk.fingerprint, fp);
  t.is(Buffer.from(hk.key, "base64").compare(blob), 0);
});
