/**
 * The SSH layer of the infrastructure verbs (DESIGN §12), on `ssh2` (pure JavaScript, maintained,
 * already in the tree under dockerode's ssh transport): no `ssh` binary, no ~/.ssh/known_hosts
 * and no ssh config of the operator's are read, so what is trusted is only what the state pins.
 *
 * - Credentials: the operator's agent (`SSH_AUTH_SOCK`) and/or the host's `ssh.key_file`; they are
 *   handed to ssh2 only, never written anywhere, never part of a message.
 * - Host keys: the key a host offers is compared with the one pinned in the state; a different key
 *   is refused before authentication (nothing is sent), both SHA256 fingerprints in the message.
 * - Commands: always an argv array, each word quoted for the remote POSIX shell
 *   ({@link shellQuote}); never a string made by the caller.
 * - Timeouts: on the handshake (`readyTimeout`) and on every command.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import type { Duplex } from "node:stream";
import ssh2, { type ClientChannel, type ConnectConfig } from "ssh2";
import type { HostKey } from "./state.js";

const { Client, utils } = ssh2;

/** Words that need no quoting in a POSIX shell. */
const PLAIN_WORD = /^[A-Za-z0-9_@%+=:,./-]+$/;

/**
 * One word for a POSIX shell: as it is when it holds only harmless characters, else in single
 * quotes (inside which nothing is special), each `'` written as `'\''`.
 */
export function shellQuote(word: string): string {
  if (word === "") return "''";
  if (PLAIN_WORD.test(word)) return word;
  return `'${word.replace(/'/g, "'\\''")}'`;
}

/** The command line of an argv, every word quoted (the remote shell splits it back into argv). */
export function commandLine(argv: readonly string[]): string {
  if (argv.length === 0) throw new Error("a remote command needs at least one word");
  for (const w of argv)
    if (w.includes("\0")) throw new Error("a word of a remote command cannot hold a NUL character");
  return argv.map(shellQuote).join(" ");
}

/** `SHA256:<base64 without padding>` of a public key blob: what `ssh-keygen -l` prints. */
export function fingerprintOf(blob: Buffer): string {
  return `SHA256:${createHash("sha256").update(blob).digest("base64").replace(/=+$/, "")}`;
}

/** The pinnable form of a public key blob (its type is the blob's first string). */
export function hostKeyOf(blob: Buffer): HostKey {
  const len = blob.length >= 4 ? blob.readUInt32BE(0) : 0;
  const algorithm =
    len > 0 && 4 + len <= blob.length ? blob.subarray(4, 4 + len).toString("latin1") : "unknown";
  return { algorithm, fingerprint: fingerprintOf(blob), key: blob.toString("base64") };
}

/** Why an SSH step failed; `code` is stable, the message never holds a secret. */
export type SshErrorCode =
  | "ssh_no_credentials"
  | "ssh_key_file"
  | "ssh_unreachable"
  | "ssh_auth_failed"
  | "ssh_timeout"
  | "ssh_failed"
  | "host_key_changed";

export class SshError extends Error {
  override readonly name = "SshError";
  constructor(
    readonly code: SshErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** The host offered a key other than the pinned one. */
export class HostKeyChangedError extends SshError {
  constructor(
    readonly host: string,
    readonly pinned: HostKey,
    readonly offered: HostKey,
  ) {
    super(
      "host_key_changed",
      `host '${host}': its SSH host key changed, connection refused before logging in: pinned ${pinned.algorithm} ${pinned.fingerprint}, offered ${offered.algorithm} ${offered.fingerprint}. If the host was reinstalled on purpose, check the new fingerprint on its console (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) and remove hosts.${host}.host_key from the state; otherwise someone may be in the middle`,
    );
  }
}

/** Where and as whom to log in. */
export interface SshTarget {
  /** The host's name in the infrastructure file (messages only). */
  readonly name: string;
  readonly address: string;
  readonly port: number;
  readonly user: string;
  /** A private key file: absolute, `~/...`, or relative to `baseDir`. */
  readonly keyFile?: string;
}

/** How to log in, resolved from the operator's environment. */
export interface SshAuth {
  readonly agent?: string;
  readonly privateKey?: Buffer;
}

/** Expands `~/` and makes a key file path absolute (relative to the infrastructure file's folder). */
export function keyFilePath(keyFile: string, baseDir: string): string {
  if (keyFile === "~" || keyFile.startsWith("~/")) return join(homedir(), keyFile.slice(2));
  return isAbsolute(keyFile) ? keyFile : resolve(baseDir, keyFile);
}

/**
 * The credentials for a target: its key file when it names one, and the agent of `SSH_AUTH_SOCK`
 * when it is set. An encrypted key file is refused (load it into the agent instead: no
 * passphrase ever passes through Slipway).
 */
export function sshAuthFor(
  target: SshTarget,
  env: Readonly<Record<string, string | undefined>>,
  baseDir: string,
): SshAuth {
  const agent = env.SSH_AUTH_SOCK || undefined;
  if (target.keyFile === undefined) {
    if (!agent)
      throw new SshError(
        "ssh_no_credentials",
        `host '${target.name}': no SSH credentials: start an ssh agent holding your key (SSH_AUTH_SOCK) or set ssh.key_file for the host`,
      );
    return { agent };
  }
  const path = keyFilePath(target.keyFile, baseDir);
  let privateKey: Buffer;
  try {
    privateKey = readFileSync(path);
  } catch (e) {
    throw new SshError(
      "ssh_key_file",
      `host '${target.name}': ssh.key_file ${path} cannot be read (${(e as NodeJS.ErrnoException).code ?? "error"})`,
    );
  }
  const parsed = utils.parseKey(privateKey);
  if (parsed instanceof Error) {
    const encrypted = /passphrase|encrypted/i.test(parsed.message);
    throw new SshError(
      "ssh_key_file",
      encrypted
        ? `host '${target.name}': ssh.key_file ${path} is encrypted: add it to your ssh agent (ssh-add) and leave key_file out`
        : `host '${target.name}': ssh.key_file ${path} is not a private key ssh2 can read`,
    );
  }
  return agent ? { agent, privateKey } : { privateKey };
}

/** What one remote command did. */
export interface ExecResult {
  /** Exit status; null when it ended by a signal. */
  readonly code: number | null;
  readonly signal: string | undefined;
  readonly stdout: string;
  readonly stderr: string;
}

/** A remote command's bound and input (a stream is piped: an image for `docker load`). */
export interface ExecOptions {
  readonly timeoutMs?: number;
  readonly stdin?: string | Buffer | NodeJS.ReadableStream;
}

/** An open SSH connection to one host. */
export interface SshSession {
  readonly target: SshTarget;
  /** The key the host offered (pinned or to be pinned). */
  readonly hostKey: HostKey;
  /** Runs one command given as argv; rejects on a timeout or a broken connection, not on a non-zero exit. */
  exec(argv: readonly string[], opts?: ExecOptions): Promise<ExecResult>;
  /**
   * A TCP connection the host opens to `address:port` (as the host sees it: its private network),
   * carried in this session (`direct-tcpip`, what `ssh -L` uses); rejects when the host refuses it.
   */
  forwardOut(address: string, port: number): Promise<Duplex>;
  close(): void;
}

export interface OpenOptions {
  /** The key pinned for this host; absent on first contact (bootstrap pins what is offered). */
  readonly pinned?: HostKey;
  /** Bound on the TCP connect, handshake and login. */
  readonly timeoutMs?: number;
}

const DEFAULT_CONNECT_MS = 15_000;
const DEFAULT_EXEC_MS = 60_000;
/** At most this much of a command's output is kept. */
const MAX_OUTPUT = 4 * 1024 * 1024;

function connectError(target: SshTarget, e: Error & { level?: string; code?: string }): SshError {
  const where = `host '${target.name}' (${target.address}:${target.port})`;
  if (e.level === "client-authentication")
    return new SshError(
      "ssh_auth_failed",
      `${where}: login as '${target.user}' refused: none of the offered keys (agent or ssh.key_file) is authorized on the host`,
    );
  if (e.level === "client-timeout" || /timed out/i.test(e.message))
    return new SshError("ssh_timeout", `${where}: no SSH handshake in time`);
  if (
    e.code === "ECONNREFUSED" ||
    e.code === "EHOSTUNREACH" ||
    e.code === "ENOTFOUND" ||
    e.code === "ETIMEDOUT"
  )
    return new SshError("ssh_unreachable", `${where}: cannot be reached (${e.code})`);
  return new SshError("ssh_failed", `${where}: SSH failed (${e.message.split("\n")[0]})`);
}

/** Runs one command on an open client. */
function runOn(
  client: InstanceType<typeof Client>,
  target: SshTarget,
  argv: readonly string[],
  opts: ExecOptions,
): Promise<ExecResult> {
  const line = commandLine(argv);
  const what = `host '${target.name}': '${argv[0]}'`;
  return new Promise((resolvePromise, reject) => {
    let channel: ClientChannel | undefined;
    const timer = setTimeout(() => {
      channel?.close();
      reject(
        new SshError("ssh_timeout", `${what} did not end within ${opts.timeoutMs ?? DEFAULT_EXEC_MS} ms`),
      );
    }, opts.timeoutMs ?? DEFAULT_EXEC_MS);
    client.exec(line, (err, ch) => {
      if (err) {
        clearTimeout(timer);
        reject(new SshError("ssh_failed", `${what} could not start (${err.message})`));
        return;
      }
      channel = ch;
      const out: Buffer[] = [];
      const errs: Buffer[] = [];
      let size = 0;
      const keep = (into: Buffer[]) => (d: Buffer) => {
        if (size >= MAX_OUTPUT) return;
        size += d.length;
        into.push(d);
      };
      ch.on("data", keep(out));
      ch.stderr.on("data", keep(errs));
      ch.on("close", (code: number | null, signal?: string) => {
        clearTimeout(timer);
        resolvePromise({
          code: typeof code === "number" ? code : null,
          signal: signal || undefined,
          stdout: Buffer.concat(out).toString("utf8"),
          stderr: Buffer.concat(errs).toString("utf8"),
        });
      });
      const input = opts.stdin;
      if (input === undefined) ch.end();
      else if (typeof input === "string" || Buffer.isBuffer(input)) ch.end(input);
      else {
        input.on("error", (e: Error) => {
          ch.close();
          reject(new SshError("ssh_failed", `${what}: its input failed (${e.message})`));
        });
        input.pipe(ch);
      }
    });
  });
}

/**
 * Connects and logs in. The host's key is checked against `opts.pinned` before any credential is
 * offered: a different key rejects with {@link HostKeyChangedError}.
 */
export function openSsh(target: SshTarget, auth: SshAuth, opts: OpenOptions = {}): Promise<SshSession> {
  const client = new Client();
  let offered: HostKey | undefined;
  let refused: HostKeyChangedError | undefined;
  const config: ConnectConfig = {
    host: target.address,
    port: target.port,
    username: target.user,
    readyTimeout: opts.timeoutMs ?? DEFAULT_CONNECT_MS,
    ...(auth.agent ? { agent: auth.agent } : {}),
    ...(auth.privateKey ? { privateKey: auth.privateKey } : {}),
    hostVerifier: (blob: Buffer) => {
      offered = hostKeyOf(blob);
      if (opts.pinned && offered.key !== opts.pinned.key) {
        refused = new HostKeyChangedError(target.name, opts.pinned, offered);
        return false;
      }
      return true;
    },
  };
  return new Promise((resolvePromise, reject) => {
    let settled = false;
    client.once("ready", () => {
      settled = true;
      const hostKey = offered;
      if (!hostKey) {
        client.end();
        reject(new SshError("ssh_failed", `host '${target.name}': the server offered no host key`));
        return;
      }
      resolvePromise({
        target,
        hostKey,
        exec: (argv, execOpts = {}) => runOn(client, target, argv, execOpts),
        forwardOut: (address, port) =>
          new Promise((ok, fail) =>
            client.forwardOut("127.0.0.1", 0, address, port, (err, channel) =>
              err
                ? fail(
                    new SshError(
                      "ssh_failed",
                      `host '${target.name}': it did not open a connection to ${address}:${port} (${err.message})`,
                    ),
                  )
                : ok(channel),
            ),
          ),
        close: () => client.end(),
      });
    });
    client.on("error", (e: Error & { level?: string; code?: string }) => {
      if (settled) return;
      settled = true;
      client.end();
      reject(refused ?? connectError(target, e));
    });
    client.once("close", () => {
      if (settled) return;
      settled = true;
      reject(
        refused ?? new SshError("ssh_failed", `host '${target.name}': the connection closed during login`),
      );
    });
    client.connect(config);
  });
}
