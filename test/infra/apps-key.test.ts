import test from "ava";
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  APPS_KEY_COMMAND,
  type ExecResult,
  type InfraHost,
  SshError,
  type SshSession,
  appsKeyLine,
  authorizeAppsKey,
  authorizedKeyComment,
  editAuthorizedKeys,
  generateAppsEngineKey,
  revokeAppsKey,
  commandLine,
} from "../../infra/mod.js";

const OPERATOR =
  "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOPERATORoperatorOPERATORoperatorOPERATORop operator@laptop";
const PROD = `restrict,command="${APPS_KEY_COMMAND}" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPRODprod slipway-apps@prod`;

test("the environment's line: restrict, the forced dial-stdio command, the key, the environment's comment", (t) => {
  const key = generateAppsEngineKey("staging");
  const line = appsKeyLine(key.public_key, "staging");
  const blob = key.public_key.split(" ")[1]!;
  t.is(line, `restrict,command="docker system dial-stdio" ssh-ed25519 ${blob} slipway-apps@staging`);
  t.is(authorizedKeyComment(line), "slipway-apps@staging");
  // the comment is the environment's whatever the public key's own comment says
  t.is(appsKeyLine(`ssh-ed25519 ${blob} someone@else`, "prod"), line.replace("@staging", "@prod"));
  t.throws(() => appsKeyLine("ssh-rsa AAAAB3Nza x", "staging"), { message: /not an ssh-ed25519 key/ });
});

test("authorized keys lines: the comment after options with quoted blanks, none for comments and blank lines", (t) => {
  t.is(authorizedKeyComment(OPERATOR), "operator@laptop");
  t.is(authorizedKeyComment(PROD), "slipway-apps@prod");
  t.is(authorizedKeyComment('from="10.0.0.1",command="echo a b c" ssh-rsa AAAAB3 two words'), "two words");
  t.is(authorizedKeyComment('command="say \\"x y\\"",no-pty ecdsa-sha2-nistp256 AAAAE2 c@d\r'), "c@d");
  t.is(authorizedKeyComment("sk-ssh-ed25519@openssh.com AAAAGnNr"), "");
  t.is(authorizedKeyComment("   ssh-ed25519 AAAAC3 slipway-apps@staging   "), "slipway-apps@staging");
  t.is(authorizedKeyComment("# ssh-ed25519 AAAAC3 slipway-apps@staging"), undefined);
  t.is(authorizedKeyComment(""), undefined);
  t.is(authorizedKeyComment("not a key line"), undefined);
});

test("editing the file: added, the same comment replaced in place, every other line kept byte for byte, removed", (t) => {
  const ours = (n: number) =>
    `restrict,command="${APPS_KEY_COMMAND}" ssh-ed25519 AAAA${n} slipway-apps@staging`;
  const c = "slipway-apps@staging";
  // added to a missing or empty file, and to one without a final newline
  t.is(editAuthorizedKeys("", c, ours(1)), `${ours(1)}\n`);
  t.is(editAuthorizedKeys(OPERATOR, c, ours(1)), `${OPERATOR}\n${ours(1)}\n`);
  const others = [
    "# the operator's keys",
    OPERATOR,
    "",
    PROD,
    "ssh-ed25519 AAAAC3x slipway-apps@staging2",
    "ssh-ed25519 AAAAC3y slipway-apps@staging and more",
    "ssh-rsa AAAAB3 windows@box\r",
    "  weird line that is no key  ",
  ];
  const text = `${others.join("\n")}\n`;
  const added = editAuthorizedKeys(text, c, ours(1));
  t.is(added, `${text}${ours(1)}\n`);
  t.is(editAuthorizedKeys(added, c, ours(1)), added, "nothing to do the second time");
  // an older line of the environment is replaced where it is; a second one goes
  const older = [others[0], `${ours(0).replace("restrict,", "")}`, ...others.slice(1), `${ours(7)}  `].join(
    "\n",
  );
  t.is(
    editAuthorizedKeys(`${older}\n`, c, ours(1)),
    `${[others[0], ours(1), ...others.slice(1)].join("\n")}\n`,
  );
  // destroy: the environment's lines go, nothing else changes
  t.is(editAuthorizedKeys(added, c, undefined), text);
  t.is(editAuthorizedKeys(`${older}\n`, c, undefined), text);
  t.is(editAuthorizedKeys(text, c, undefined), text, "no line of ours: the same text");
  t.is(editAuthorizedKeys(`${ours(1)}\n`, c, undefined), "");
  t.is(editAuthorizedKeys(`${OPERATOR}\n${ours(1)}`, c, undefined), OPERATOR, "no final newline stays none");
  // another environment's key is left alone when this one is removed, and the other way round
  t.is(editAuthorizedKeys(added, "slipway-apps@prod", undefined), added.replace(`${PROD}\n`, ""));
});

/** A session whose commands run in the local POSIX shell, as sshd would run them, with `home` as HOME. */
function localSession(home: string, log: string[][] = []): SshSession {
  return {
    target: { name: "app-1", address: "127.0.0.1", port: 22, user: "deploy" },
    hostKey: { algorithm: "ssh-ed25519", fingerprint: `SHA256:${"A".repeat(43)}`, key: "" },
    async exec(argv, opts = {}): Promise<ExecResult> {
      log.push([...argv]);
      const stdin = opts.stdin;
      if (stdin !== undefined && typeof stdin !== "string" && !Buffer.isBuffer(stdin))
        throw new Error("the test session takes text input only");
      const r = spawnSync("sh", ["-c", commandLine(argv)], {
        env: { PATH: process.env.PATH, HOME: home },
        cwd: "/",
        input: stdin ?? "",
      });
      return {
        code: r.status,
        signal: r.signal ?? undefined,
        stdout: r.stdout.toString("utf8"),
        stderr: r.stderr.toString("utf8"),
      };
    },
    forwardOut: () => Promise.reject(new Error("not in this test")),
    close() {},
  };
}

function appsHost(authorizedKeys?: string): InfraHost {
  return {
    name: "app-1",
    address: "127.0.0.1",
    ssh: { user: "deploy", port: 22, ...(authorizedKeys ? { authorized_keys: authorizedKeys } : {}) },
    // the schema's role union is built from a list: TypeScript sees its items only as strings
    roles: ["apps"] as unknown as InfraHost["roles"],
  };
}

function tempHome(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), "slipway-apps-key-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const modeOf = (p: string) => statSync(p).mode & 0o777;

test("on the host: ~/.ssh made 0700 and the file 0600 when missing, kept, replaced, revoked; other lines stay", async (t) => {
  const home = tempHome(t);
  const log: string[][] = [];
  const s = localSession(home, log);
  const host = appsHost();
  const first = generateAppsEngineKey("staging");
  t.is(await authorizeAppsKey(s, host, "staging", first.public_key), "added");
  const file = join(home, ".ssh", "authorized_keys");
  t.is(modeOf(join(home, ".ssh")), 0o700);
  t.is(modeOf(file), 0o600);
  t.is(readFileSync(file, "utf8"), `${appsKeyLine(first.public_key, "staging")}\n`);
  t.is(await authorizeAppsKey(s, host, "staging", first.public_key), "kept");
  // the operator's own line and another environment's are there; a new key replaces the old line only
  writeFileSync(file, `${OPERATOR}\n${appsKeyLine(first.public_key, "staging")}\n${PROD}\n`);
  chmodSync(file, 0o640);
  const second = generateAppsEngineKey("staging");
  t.is(await authorizeAppsKey(s, host, "staging", second.public_key), "replaced");
  t.is(readFileSync(file, "utf8"), `${OPERATOR}\n${appsKeyLine(second.public_key, "staging")}\n${PROD}\n`);
  t.is(modeOf(file), 0o640, "an existing file keeps its mode");
  t.deepEqual(readdirSync(join(home, ".ssh")), ["authorized_keys"], "no temporary file left");
  t.true(await revokeAppsKey(s, host, "staging"));
  t.is(readFileSync(file, "utf8"), `${OPERATOR}\n${PROD}\n`);
  t.false(await revokeAppsKey(s, host, "staging"), "nothing left to remove");
  // the key never travels on a command line: it is the written file's text, on stdin
  const words = log.flat().join(" ");
  t.false(words.includes(second.public_key.split(" ")[1]!));
  t.false(words.includes(first.public_key.split(" ")[1]!));
});

test("on the host: an absolute file with shell characters, a symbolic link followed, a missing file left missing", async (t) => {
  const home = tempHome(t);
  const s = localSession(home);
  const key = generateAppsEngineKey("staging");
  const odd = join(home, "d i r $(touch pwned)", "it's", "keys");
  t.is(await authorizeAppsKey(s, appsHost(odd), "staging", key.public_key), "added");
  t.is(readFileSync(odd, "utf8"), `${appsKeyLine(key.public_key, "staging")}\n`);
  t.is(modeOf(join(home, "d i r $(touch pwned)", "it's")), 0o700);
  t.false(existsSync(join(home, "pwned")) || existsSync("/pwned"));
  // a link (as some setups keep the keys elsewhere): the target is edited, the link stays
  const target = join(home, "real_keys");
  writeFileSync(target, `${OPERATOR}\n`, { mode: 0o600 });
  mkdirSync(join(home, ".ssh"), { mode: 0o700 });
  symlinkSync(target, join(home, ".ssh", "authorized_keys"));
  t.is(await authorizeAppsKey(s, appsHost("~/.ssh/authorized_keys"), "staging", key.public_key), "added");
  t.true(lstatSync(join(home, ".ssh", "authorized_keys")).isSymbolicLink());
  t.is(readFileSync(target, "utf8"), `${OPERATOR}\n${appsKeyLine(key.public_key, "staging")}\n`);
  // destroy on a host that never had the file makes none
  const bare = tempHome(t);
  t.false(await revokeAppsKey(localSession(bare), appsHost(), "staging"));
  t.false(existsSync(join(bare, ".ssh")));
});

test("on the host: a file that is not UTF-8 is refused and left as it was", async (t) => {
  const home = tempHome(t);
  mkdirSync(join(home, ".ssh"), { mode: 0o700 });
  const file = join(home, ".ssh", "authorized_keys");
  const bytes = Buffer.concat([Buffer.from(`${OPERATOR}\n# caf`), Buffer.from([0xe9, 0x0a])]);
  writeFileSync(file, bytes, { mode: 0o600 });
  const key = generateAppsEngineKey("staging");
  const e = await t.throwsAsync(authorizeAppsKey(localSession(home), appsHost(), "staging", key.public_key), {
    instanceOf: SshError,
  });
  t.regex(e?.message ?? "", /not UTF-8 text/);
  t.deepEqual(readFileSync(file), bytes);
});
