/**
 * The scheduler benchmark's target (bench/scheduler.ts): a node:http server on
 * 127.0.0.1 in a worker thread, so that its arrival times do not wait for the
 * platform's event loop. It answers 200 at once and records, for every call,
 * the job (`x-slipway-job`), the nominal tick (`x-slipway-tick`), the arrival
 * time and the TCP connection it came on, and counts calls of one job in
 * flight at once.
 */
import { Worker } from "node:worker_threads";

const TARGET_CODE = `
const { parentPort } = require("node:worker_threads");
const http = require("node:http");
const now = () => performance.timeOrigin + performance.now();
let n = 0;
let job = new Int32Array(1 << 16), tick = new Float64Array(1 << 16), at = new Float64Array(1 << 16), conn = new Int32Array(1 << 16);
function grow() {
  const g = (A, a) => { const b = new A(a.length * 2); b.set(a); return b; };
  job = g(Int32Array, job); tick = g(Float64Array, tick); at = g(Float64Array, at); conn = g(Int32Array, conn);
}
const cur = new Map(), maxc = new Map(), connIds = new WeakMap();
let overlapEvents = 0, bad = 0, connSeq = 0;
const server = http.createServer((req, res) => {
  const t = now();
  const name = req.headers["x-slipway-job"];
  const tk = Date.parse(String(req.headers["x-slipway-tick"] || ""));
  const j = typeof name === "string" && /^j[0-9]+$/.test(name) ? Number(name.slice(1)) : -1;
  if (j < 0 || Number.isNaN(tk)) { bad++; res.writeHead(400).end(); return; }
  if (n === job.length) grow();
  job[n] = j; tick[n] = tk; at[n] = t; conn[n] = connIds.get(req.socket) || 0; n++;
  const c = (cur.get(j) || 0) + 1;
  cur.set(j, c);
  if (c > 1) overlapEvents++;
  if (c > (maxc.get(j) || 0)) maxc.set(j, c);
  let done = false;
  const end = () => { if (!done) { done = true; cur.set(j, cur.get(j) - 1); } };
  res.once("finish", end);
  res.once("close", end);
  res.writeHead(200, { "content-type": "text/plain" }).end("ok");
});
server.keepAliveTimeout = 10000;
server.on("connection", (s) => { connIds.set(s, ++connSeq); });
server.listen(0, "127.0.0.1", () => parentPort.postMessage({ type: "ready", port: server.address().port }));
parentPort.on("message", (m) => {
  if (m.type === "mark") parentPort.postMessage({ type: "mark", conn: connSeq, at: now() });
  else if (m.type === "collect") {
    const out = { type: "collect", n, job: job.slice(0, n), tick: tick.slice(0, n), at: at.slice(0, n), conn: conn.slice(0, n),
      maxConc: [...maxc.entries()], overlapEvents, bad, connections: connSeq };
    parentPort.postMessage(out, [out.job.buffer, out.tick.buffer, out.at.buffer, out.conn.buffer]);
  } else if (m.type === "close") {
    server.closeAllConnections();
    server.close(() => parentPort.postMessage({ type: "closed" }));
  }
});
`;

export interface Hits {
  n: number;
  job: Int32Array;
  tick: Float64Array;
  at: Float64Array;
  conn: Int32Array;
  maxConc: [number, number][];
  overlapEvents: number;
  bad: number;
  connections: number;
}

export class Target {
  private readonly worker: Worker;
  private readonly waiting = new Map<string, (m: any) => void>();
  port = 0;

  constructor() {
    this.worker = new Worker(TARGET_CODE, { eval: true });
    this.worker.on("message", (m: { type: string }) => {
      const w = this.waiting.get(m.type);
      this.waiting.delete(m.type);
      w?.(m);
    });
  }

  private ask<T>(type: string, timeoutMs = 10_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.waiting.delete(type);
        reject(new Error(`target: no answer to ${type} in ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.set(type, (m) => {
        clearTimeout(t);
        resolve(m as T);
      });
      if (type !== "ready") this.worker.postMessage({ type });
    });
  }

  async start(): Promise<string> {
    const r = await this.ask<{ port: number }>("ready");
    this.port = r.port;
    return `http://127.0.0.1:${r.port}`;
  }

  /** The highest connection id so far: later connections were accepted after this moment. */
  mark(): Promise<{ conn: number; at: number }> {
    return this.ask("mark");
  }

  collect(): Promise<Hits> {
    return this.ask("collect");
  }

  async close(): Promise<void> {
    await this.ask("close", 3000).catch(() => {});
    await this.worker.terminate();
  }
}
