import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { type Agent, request } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import { simpleParser } from "mailparser";
import { SMTPServer } from "smtp-server";
import { type ControlPlane, newControlToken, sleep } from "./common.js";

/**
 * bench:identity's plumbing (bench/identity.ts measures): what runs the
 * platform and how it runs as a process, the SMTP server that receives the
 * sign-up mails, and the keep-alive HTTP client of the data plane.
 */

export const REQUEST_TIMEOUT_MS = 30_000;
const require = createRequire(import.meta.url);
const repo = fileURLToPath(new URL("../", import.meta.url));

// ---- what runs the platform ----

/** The built bundle when it exists (said whether the build stamp calls it current), else the sources through tsx. */
export async function entry(): Promise<{ args: string[]; what: string }> {
  const bundle = join(repo, "dist", "bin", "slipwayd.mjs");
  if (existsSync(bundle)) {
    let state = "";
    try {
      const { buildDecision } = (await import(
        pathToFileURL(join(repo, "scripts", "build-stamp.mjs")).href
      )) as {
        buildDecision: (root: string) => { build: boolean; reason: string };
      };
      const d = buildDecision(repo);
      state = d.build ? `; the build stamp says: ${d.reason}` : "; current";
    } catch {
      /* no stamp check */
    }
    return {
      args: [bundle],
      what: `dist/bin/slipwayd.mjs (built ${statSync(bundle).mtime.toISOString()}${state})`,
    };
  }
  return {
    args: ["--import", require.resolve("tsx"), join(repo, "bin", "slipwayd.ts")],
    what: "bin/slipwayd.ts through tsx (no dist/bin/slipwayd.mjs)",
  };
}

// ---- the SMTP server that receives the sign-up mails ----

export interface Mailbox {
  url: string;
  /** Verification token by recipient address. */
  tokens: Map<string, string>;
  /** Mails without a verification link. */
  other: number;
  close(): Promise<void>;
}

const LINK = /https:\/\/bench\.example\/verify\?token=([A-Za-z0-9%._~-]+)/;

export async function startMailbox(): Promise<Mailbox> {
  const tokens = new Map<string, string>();
  const box = { other: 0 };
  const server = new SMTPServer({
    hideSTARTTLS: true,
    disabledCommands: ["AUTH"],
    authOptional: true,
    logger: false,
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => {
        simpleParser(Buffer.concat(chunks))
          .then((parsed) => {
            const m = LINK.exec(parsed.text ?? "");
            if (!m) box.other++;
            else
              for (const r of session.envelope.rcptTo)
                tokens.set(r.address.toLowerCase(), decodeURIComponent(m[1]!));
            cb();
          })
          .catch((e: Error) => cb(e));
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const port = (server.server.address() as AddressInfo).port;
  return {
    url: `smtp://127.0.0.1:${port}`,
    tokens,
    get other() {
      return box.other;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

// ---- the HTTP client ----

export interface Answer {
  status: number;
  ms: number;
  body: any;
}

/** One request with node:http on a keep-alive agent; status 0 on a connection error or a timeout. */
export function call(
  agent: Agent,
  base: URL,
  method: "GET" | "POST",
  path: string,
  headers: Record<string, string>,
  body?: unknown,
): Promise<Answer> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve) => {
    const t0 = performance.now();
    let settled = false;
    const done = (status: number, text: string) => {
      if (settled) return;
      settled = true;
      const ms = performance.now() - t0;
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        parsed = text;
      }
      resolve({ status, ms, body: parsed });
    };
    const req = request(
      {
        host: base.hostname,
        port: base.port,
        method,
        path,
        agent,
        headers:
          payload === undefined ? headers : { ...headers, "content-length": Buffer.byteLength(payload) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => done(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8")));
        res.on("error", () => done(0, ""));
      },
    );
    req.setTimeout(REQUEST_TIMEOUT_MS, () => {
      done(0, "timeout");
      req.destroy();
    });
    req.on("error", (e) => done(0, e.message));
    req.end(payload);
  });
}

export interface DataPlane {
  base: URL;
  headers: Record<string, string>;
}

export const authCall = (agent: Agent, dp: DataPlane, route: string, body: unknown) =>
  call(agent, dp.base, "POST", `/auth/${route}`, dp.headers, body);

// ---- the platform as a process ----

export interface Platform {
  child: ChildProcess;
  /** The control plane and its token (SLIPWAY_CONTROL_TOKEN of the process). */
  control: ControlPlane;
  data: string;
  /** The last lines it wrote to stderr, for a failure's report. */
  tail: () => string;
}

/** `slipwayd up` with `env` (SLIPWAY_CONTROL_TOKEN made when `env` has none), nothing SLIPWAY_ of this process's. */
export function startPlatform(args: string[], env: Record<string, string>): Platform {
  const inherited: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith("SLIPWAY_") && k !== "NATS_URL") inherited[k] = v;
  const token = env.SLIPWAY_CONTROL_TOKEN || newControlToken();
  const child = spawn(process.execPath, [...args, "up"], {
    env: { ...inherited, ...env, SLIPWAY_CONTROL_TOKEN: token },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let tail = "";
  child.stderr?.on("data", (d: Buffer) => {
    tail = (tail + String(d)).slice(-4000);
  });
  return {
    child,
    control: { url: `http://127.0.0.1:${env.SLIPWAY_CONTROL_PORT}`, token },
    data: `http://127.0.0.1:${env.SLIPWAY_DATA_PORT}`,
    tail: () => tail,
  };
}

export async function stopPlatform(p: Platform): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return;
  const exited = new Promise((r) => p.child.once("exit", r));
  p.child.kill("SIGTERM");
  await Promise.race([exited, sleep(10_000)]);
  if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
}
