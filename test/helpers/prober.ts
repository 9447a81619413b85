/**
 * A hostile app for the trust-boundary tests (test/e2e/hostile-app.test.ts):
 * an HTTP server (it listens on $HOST:$PORT and answers `GET /health`) that,
 * on `POST /probe` with a list of tries, attempts each from inside its
 * container and answers what happened. It is plain JavaScript for the
 * platform's base image (node, no packages), written into a dev container's
 * workspace or built into a production image.
 *
 * Tries:
 * - `{ kind: "tcp", host, port }`: a TCP connection: `open`, or the error code
 *   (`ECONNREFUSED`, `EHOSTUNREACH`, ...) or `timeout`;
 * - `{ kind: "http", url, method?, headers?, body? }`: `{ status, code }` (the
 *   platform's error code when it answered with one), or the error;
 * - `{ kind: "nats", host, port }`: a NATS client's handshake without
 *   credentials (CONNECT, PING): `PONG` (accepted), the server's `-ERR`, or the
 *   connection's error;
 * - `{ kind: "path", path }`: whether the path exists in the container, and
 *   for a socket whether it accepts a connection.
 */

export type Try =
  | { name: string; kind: "tcp"; host: string; port: number }
  | {
      name: string;
      kind: "http";
      url: string;
      method?: string;
      headers?: Record<string, string>;
      body?: unknown;
    }
  | { name: string; kind: "nats"; host: string; port: number }
  | { name: string; kind: "path"; path: string };

/** What one try found: `open`, an HTTP status and code, `PONG`, `-ERR ...`, `absent`, or an error code. */
export interface Found {
  name: string;
  result: string;
  status?: number;
  code?: string;
}

export const PROBER = String.raw`
const http = require("node:http");
const net = require("node:net");
const fs = require("node:fs");
const TIMEOUT = Number(process.env.PROBE_TIMEOUT_MS || 1500);

function tcp(host, port) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port });
    const done = (r) => { s.destroy(); resolve(r); };
    s.setTimeout(TIMEOUT, () => done("timeout"));
    s.once("connect", () => done("open"));
    s.once("error", (e) => done(e.code || e.message));
  });
}

function httpTry(t) {
  return new Promise((resolve) => {
    const body = t.body === undefined ? undefined : JSON.stringify(t.body);
    const req = http.request(t.url, {
      method: t.method || "GET",
      timeout: TIMEOUT,
      headers: Object.assign(
        { "x-platform-actor-type": "app", "x-platform-actor-id": "hostile" },
        body ? { "content-type": "application/json" } : {},
        t.headers || {},
      ),
    }, (res) => {
      let text = "";
      res.on("data", (c) => (text += c));
      res.on("end", () => {
        let code;
        try { code = JSON.parse(text).error?.code; } catch {}
        resolve({ result: String(res.statusCode), status: res.statusCode, code });
      });
    });
    req.on("timeout", () => req.destroy(Object.assign(new Error("timeout"), { code: "timeout" })));
    req.on("error", (e) => resolve({ result: e.code || e.message }));
    req.end(body);
  });
}

function natsTry(host, port) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port });
    let buf = "";
    let sent = false;
    const done = (r) => { s.destroy(); resolve(r); };
    s.setTimeout(TIMEOUT, () => done(sent ? "timeout after CONNECT" : "timeout"));
    s.on("data", (d) => {
      buf += d.toString();
      if (!sent && buf.includes("\r\n")) {
        sent = true;
        buf = "";
        s.write('CONNECT {"verbose":false,"pedantic":false,"name":"hostile"}\r\nPING\r\n');
      } else if (sent && buf.includes("\r\n")) done(buf.split("\r\n")[0]);
    });
    s.once("error", (e) => done(e.code || e.message));
    s.once("close", () => done(sent ? "closed after CONNECT" : "closed"));
  });
}

function pathTry(p) {
  if (!fs.existsSync(p)) return Promise.resolve("absent");
  return new Promise((resolve) => {
    const s = net.connect({ path: p });
    s.setTimeout(TIMEOUT, () => { s.destroy(); resolve("present, timeout"); });
    s.once("connect", () => { s.destroy(); resolve("present, open"); });
    s.once("error", (e) => resolve("present, " + (e.code || e.message)));
  });
}

async function run(t) {
  if (t.kind === "tcp") return { result: await tcp(t.host, t.port) };
  if (t.kind === "http") return httpTry(t);
  if (t.kind === "nats") return { result: await natsTry(t.host, t.port) };
  if (t.kind === "path") return { result: await pathTry(t.path) };
  return { result: "unknown kind" };
}

const server = http.createServer((req, res) => {
  if (req.url === "/health") { res.writeHead(200); return res.end("ok"); }
  if (req.method === "POST" && req.url === "/probe") {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", async () => {
      const out = [];
      for (const t of JSON.parse(body)) out.push(Object.assign({ name: t.name }, await run(t)));
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(out));
    });
    return;
  }
  res.writeHead(404);
  res.end();
});
server.listen(Number(process.env.PORT || 3000), process.env.HOST || "0.0.0.0");
process.on("SIGTERM", () => server.close(() => process.exit(0)));
`;

/** Asks a running prober at `base` to make the tries; what each found. */
export async function probe(base: string, tries: Try[]): Promise<Found[]> {
  const r = await fetch(`${base}/probe`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(tries),
    signal: AbortSignal.timeout(120_000),
  });
  if (r.status !== 200) throw new Error(`the prober answered ${r.status}`);
  return (await r.json()) as Found[];
}
