import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { join } from "node:path";

/** nats-server is not installed. */
export class NatsServerMissingError extends Error {
  override readonly name = "NatsServerMissingError";
}
/** nats-server could not start (port taken, bad store). */
export class NatsServerStartError extends Error {
  override readonly name = "NatsServerStartError";
}

export interface EmbeddedNats {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  /** Stops the server (SIGTERM, then SIGKILL after 5 s). */
  stop(): Promise<void>;
  /** Kills the server at once (tests). */
  kill(): void;
}

export function natsServerBinary(env: NodeJS.ProcessEnv = process.env): string {
  return env.NATS_SERVER_BIN ?? "nats-server";
}

export function natsServerVersion(bin = natsServerBinary()): string | undefined {
  const r = spawnSync(bin, ["--version"], { encoding: "utf8" });
  if (r.error || r.status !== 0) return undefined;
  return r.stdout.trim();
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

/**
 * Starts `nats-server -js` on 127.0.0.1:<port> with its store in `<dir>/nats`
 * (the platform's embedded default, and every test's own server).
 */
export async function startEmbeddedNats(opts: {
  dir: string;
  port: number;
  timeoutMs?: number;
  log?: (l: string) => void;
}): Promise<EmbeddedNats> {
  const bin = natsServerBinary();
  if (!natsServerVersion(bin)) {
    throw new NatsServerMissingError(
      "nats-server was not found. Install it (Debian/Ubuntu: apt-get install -y nats-server), set NATS_SERVER_BIN to its path, or set NATS_URL to use a running server.",
    );
  }
  if (await canConnect(opts.port)) {
    throw new NatsServerStartError(
      `port ${opts.port} is already taken on 127.0.0.1: stop what uses it, or set NATS_URL to use a running server`,
    );
  }
  const store = join(opts.dir, "nats");
  mkdirSync(store, { recursive: true });
  const conf = join(opts.dir, "nats.conf");
  writeFileSync(
    conf,
    [
      "listen: 127.0.0.1:" + opts.port,
      "max_payload: 8MB",
      "jetstream {",
      `  store_dir: ${JSON.stringify(store)}`,
      "}",
      "",
    ].join("\n"),
  );
  const child: ChildProcess = spawn(bin, ["-c", conf], { stdio: ["ignore", "ignore", "pipe"] });
  let exited = false;
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    const s = d.toString();
    stderr = (stderr + s).slice(-4000);
    opts.log?.(s.trimEnd());
  });
  const exit = new Promise<void>((resolve) =>
    child.once("exit", () => {
      exited = true;
      resolve();
    }),
  );
  const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
  while (!(await canConnect(opts.port))) {
    if (exited)
      throw new NatsServerStartError(
        `nats-server exited at start: ${stderr.split("\n").filter(Boolean).slice(-3).join(" | ")}`,
      );
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new NatsServerStartError(`nats-server did not listen on port ${opts.port} in time`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  return {
    url: `nats://127.0.0.1:${opts.port}`,
    port: opts.port,
    pid: child.pid!,
    stop: async () => {
      if (exited) return;
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exit;
      clearTimeout(t);
    },
    kill: () => {
      if (!exited) child.kill("SIGKILL");
    },
  };
}
