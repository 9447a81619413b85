/**
 * The `apps` engine key on the `apps` hosts (docs/infra.md, "Apps hosts: the engine key"): the
 * node containers log in to every `apps` host with the environment's key (infra/secrets.ts) and
 * talk to that host's Docker engine through `docker system dial-stdio`. Apply makes the host's
 * authorized keys file (`ssh.authorized_keys`, default `~/.ssh/authorized_keys` of the login user)
 * hold exactly one line for the environment:
 *
 *     restrict,command="docker system dial-stdio" ssh-ed25519 AAAA... slipway-apps@<env>
 *
 * `restrict` takes away forwarding, a terminal, agent and X11; the forced command makes the key
 * good for nothing but a stream to the engine, whatever the client asks to run. That engine is
 * root on the host: the key is root-equivalent there, and only there. The line is found by its
 * comment: an older line of the environment is replaced, every other line is left as it was.
 * `destroy` removes it. The file is read, edited here ({@link editAuthorizedKeys}, pure), and
 * written back whole through a temporary file renamed over it on the host, only if nobody changed
 * it in between.
 */
import { createHash } from "node:crypto";
import { DEFAULT_AUTHORIZED_KEYS, type InfraHost } from "./config.js";
import { stderrTail } from "./engine.js";
import { appsKeyComment } from "./secrets.js";
import { SshError, type SshSession } from "./ssh.js";

/** The only command the key may run on an `apps` host. */
export const APPS_KEY_COMMAND = "docker system dial-stdio";

/** The authorized keys file apply edits on a host (as the file says it: `~/...` or absolute). */
export function authorizedKeysFile(host: InfraHost): string {
  return host.ssh.authorized_keys ?? DEFAULT_AUTHORIZED_KEYS;
}

/** The environment's line: the public key with the options, named by the environment's comment. */
export function appsKeyLine(publicKey: string, environment: string): string {
  const [type, blob] = publicKey.trim().split(/\s+/);
  if (type !== "ssh-ed25519" || !blob || !/^[A-Za-z0-9+/]+={0,2}$/.test(blob))
    throw new Error("the apps engine public key is not an ssh-ed25519 key line");
  return `restrict,command="${APPS_KEY_COMMAND}" ${type} ${blob} ${appsKeyComment(environment)}`;
}

const KEY_TYPE = /^(?:ssh-|ecdsa-sha2-|sk-)[A-Za-z0-9@.-]+$/;

/**
 * The comment of an authorized keys line (`[options] type base64 [comment]`), or undefined for a
 * blank line, a `#` line, or one without a key. Options may hold quoted spaces (`command="a b"`).
 */
export function authorizedKeyComment(line: string): string | undefined {
  let rest = line.replace(/\r$/, "").trimStart();
  if (rest === "" || rest.startsWith("#")) return undefined;
  const first = rest.split(/\s/, 1)[0]!;
  if (!KEY_TYPE.test(first)) {
    // the options: up to the first blank outside double quotes (a \" inside them is no quote)
    let i = 0;
    let quoted = false;
    for (; i < rest.length; i++) {
      const c = rest[i]!;
      if (quoted && c === "\\") i++;
      else if (c === '"') quoted = !quoted;
      else if (!quoted && (c === " " || c === "\t")) break;
    }
    rest = rest.slice(i).trimStart();
  }
  const m = /^(\S+)\s+(\S+)(?:\s+(.*))?$/.exec(rest);
  if (!m || !KEY_TYPE.test(m[1]!)) return undefined;
  return (m[3] ?? "").trim();
}

/**
 * The authorized keys file with the lines commented `comment` replaced by `line` (the first one
 * in its place, the others dropped; appended when there was none), or all of them removed when
 * `line` is undefined. Every other line stays byte for byte, in its place.
 */
export function editAuthorizedKeys(text: string, comment: string, line: string | undefined): string {
  const lines = text === "" ? [] : text.split("\n");
  const endsWithNewline = text.endsWith("\n");
  if (endsWithNewline) lines.pop();
  const out: string[] = [];
  let placed = false;
  for (const l of lines) {
    if (authorizedKeyComment(l) !== comment) out.push(l);
    else if (line !== undefined && !placed) {
      out.push(line);
      placed = true;
    }
  }
  let appended = false;
  if (line !== undefined && !placed) {
    out.push(line);
    appended = true;
  }
  if (out.length === 0) return "";
  return `${out.join("\n")}${endsWithNewline || appended ? "\n" : ""}`;
}

/** The largest authorized keys file apply edits (the session keeps at most 4 MiB of output). */
const MAX_FILE = 1024 * 1024;
const EXEC_MS = 30_000;

/** `$f`: the file of `$1` (`~/...` is under the login user's home), a symbolic link followed. */
const RESOLVE = `set -eu
case $1 in '~/'*) f=$HOME/\${1#'~/'} ;; *) f=$1 ;; esac
if [ -L "$f" ]; then f=$(readlink -f -- "$f"); fi`;

/** Prints `absent`, or `present` and the file. */
const READ_SCRIPT = `${RESOLVE}
if [ ! -e "$f" ]; then echo absent; exit 0; fi
[ "$(wc -c < "$f")" -le ${MAX_FILE} ] || { echo "$f is larger than ${MAX_FILE} bytes" >&2; exit 3; }
echo present
cat -- "$f"`;

/**
 * Writes stdin as the file when it still has the SHA-256 `$2` (`absent`: still missing; exit 4
 * otherwise): a temporary file in its folder (mktemp: 0600), given the old file's mode and owner
 * when there was one, renamed over it. A missing folder is made 0700.
 */
const WRITE_SCRIPT = `${RESOLVE}
command -v sha256sum > /dev/null || { echo "sha256sum is missing on the host" >&2; exit 5; }
digest() { if [ -e "$f" ]; then sha256sum < "$f" | cut -d ' ' -f 1; else echo absent; fi; }
d=$(dirname -- "$f")
[ -d "$d" ] || mkdir -p -m 700 -- "$d"
t=$(mktemp "$d/.slipway-authorized-keys.XXXXXX")
trap 'rm -f -- "$t"' EXIT
cat > "$t"
[ "$(digest)" = "$2" ] || { echo "$f changed while it was being edited" >&2; exit 4; }
if [ -e "$f" ]; then
  chmod "$(stat -c %a -- "$f")" "$t"
  chown "$(stat -c %u:%g -- "$f")" "$t" 2> /dev/null || :
fi
mv -f -- "$t" "$f"
trap - EXIT`;

const digestOf = (text: string | undefined) =>
  text === undefined ? "absent" : createHash("sha256").update(text, "utf8").digest("hex");

/** The host's file, or undefined when it does not exist. */
async function readKeys(s: SshSession, path: string): Promise<string | undefined> {
  const r = await s.exec(["sh", "-c", READ_SCRIPT, "slipway", path], { timeoutMs: EXEC_MS });
  if (r.code !== 0)
    throw new SshError("ssh_failed", `host '${s.target.name}': reading ${path} failed: ${stderrTail(r)}`);
  if (r.stdout === "absent\n") return undefined;
  if (!r.stdout.startsWith("present\n"))
    throw new SshError("ssh_failed", `host '${s.target.name}': reading ${path} gave no answer`);
  const text = r.stdout.slice("present\n".length);
  // a file that is not UTF-8 could not be written back as it was
  if (text.includes("\uFFFD"))
    throw new SshError("ssh_failed", `host '${s.target.name}': ${path} is not UTF-8 text: left as it is`);
  return text;
}

/** Edits the host's file with `edit`; says whether it changed. Retries when it changed under us. */
async function editOnHost(
  s: SshSession,
  path: string,
  edit: (text: string) => string,
): Promise<{ before: string | undefined; changed: boolean }> {
  for (let attempt = 1; ; attempt++) {
    const before = await readKeys(s, path);
    const after = edit(before ?? "");
    if (after === (before ?? "")) return { before, changed: false };
    const r = await s.exec(["sh", "-c", WRITE_SCRIPT, "slipway", path, digestOf(before)], {
      timeoutMs: EXEC_MS,
      stdin: after,
    });
    if (r.code === 0) return { before, changed: true };
    if (r.code !== 4 || attempt >= 3)
      throw new SshError("ssh_failed", `host '${s.target.name}': writing ${path} failed: ${stderrTail(r)}`);
  }
}

/** What authorizing the key did to the host's file. */
export type AuthorizeChange = "added" | "replaced" | "kept";

/**
 * Makes the host's authorized keys file hold exactly the environment's line (the file and its
 * folder made when missing); other lines are kept. Throws {@link SshError} when it cannot.
 */
export async function authorizeAppsKey(
  s: SshSession,
  host: InfraHost,
  environment: string,
  publicKey: string,
): Promise<AuthorizeChange> {
  const line = appsKeyLine(publicKey, environment);
  const comment = appsKeyComment(environment);
  const r = await editOnHost(s, authorizedKeysFile(host), (text) => editAuthorizedKeys(text, comment, line));
  if (!r.changed) return "kept";
  const had = (r.before ?? "").split("\n").some((l) => authorizedKeyComment(l) === comment);
  return had ? "replaced" : "added";
}

/** Removes the environment's line from the host's file; says whether there was one. */
export async function revokeAppsKey(s: SshSession, host: InfraHost, environment: string): Promise<boolean> {
  const comment = appsKeyComment(environment);
  const r = await editOnHost(s, authorizedKeysFile(host), (text) =>
    editAuthorizedKeys(text, comment, undefined),
  );
  return r.changed;
}
