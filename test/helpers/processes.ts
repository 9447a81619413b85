import { type ChildProcess, spawn } from "node:child_process";
import { nodeArgs } from "./repo.js";

export interface NodeProcess {
  readonly id: string;
  readonly child: ChildProcess;
  partitions: number[];
  /** Resolves when the node reports at least `n` partitions. */
  waitPartitions(pred: (p: number[]) => boolean, timeoutMs?: number): Promise<void>;
  kill9(): void;
  stop(): Promise<void>;
  stderr(): string;
}

/** Starts a runtime node in its own process (compiled, or `node --import tsx`: one pid). */
export async function spawnNode(opts: {
  /** NATS_URL and SLIPWAY_NATS_CREDS (a node's seed file): `TestNats.env("node")`. */
  nats: { NATS_URL: string; SLIPWAY_NATS_CREDS: string };
  dataDir: string;
  vaultKey: string;
  id: string;
  env?: Record<string, string>;
}): Promise<NodeProcess> {
  const child = spawn(process.execPath, nodeArgs("test", "helpers", "node-process.ts"), {
    env: {
      ...process.env,
      ...opts.nats,
      SLIPWAY_DATA_DIR: opts.dataDir,
      SLIPWAY_VAULT_KEY: opts.vaultKey,
      SLIPWAY_NODE_ID: opts.id,
      ...opts.env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => {
    err = (err + d.toString()).slice(-20_000);
  });
  const listeners: (() => void)[] = [];
  const np: NodeProcess = {
    id: opts.id,
    child,
    partitions: [],
    waitPartitions: (pred, timeoutMs = 20_000) =>
      new Promise((resolve, reject) => {
        if (pred(np.partitions)) return resolve();
        const t = setTimeout(
          () =>
            reject(
              new Error(`node ${opts.id}: partitions ${np.partitions.length} did not satisfy the condition`),
            ),
          timeoutMs,
        );
        listeners.push(() => {
          if (pred(np.partitions)) {
            clearTimeout(t);
            resolve();
          }
        });
      }),
    kill9: () => child.kill("SIGKILL"),
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const done = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 8000);
      await done;
      clearTimeout(t);
    },
    stderr: () => err,
  };
  let buf = "";
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`node ${opts.id} did not start: ${err}`)), 20_000);
    child.stdout!.on("data", (d: Buffer) => {
      buf += d.toString();
      for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.startsWith("READY")) {
          clearTimeout(t);
          resolve();
        } else if (line.startsWith("PARTITIONS")) {
          const rest = line.slice(11).trim();
          np.partitions = rest ? rest.split(",").map(Number) : [];
          for (const l of listeners) l();
        }
      }
    });
    child.once("exit", () => reject(new Error(`node ${opts.id} exited: ${err}`)));
  });
  return np;
}

/**
 * Runs `script` (an ES module body, TypeScript through tsx) in a child process that stays alive,
 * and answers the first line it prints that starts with `{`, parsed: the facts of what it made
 * (an engine, test hosts) for a test that then kills the child as an owner that died.
 */
export async function childWithFacts<F>(script: string): Promise<{ child: ChildProcess; facts: F }> {
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (c: Buffer) => (err += c.toString()));
  const line = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (c: Buffer) => {
      out += c.toString();
      const l = out.split("\n").find((x) => x.startsWith("{"));
      if (l) resolve(l);
    });
    child.once("exit", (code) => reject(new Error(`the child exited (${code}): ${err}`)));
  });
  return { child, facts: JSON.parse(line) as F };
}
