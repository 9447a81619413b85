import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync } from "node:zlib";

/**
 * A local HTTP server on 127.0.0.1 that speaks Loki's push API (`POST /loki/api/v1/push`, a JSON
 * body `{"streams":[{"stream":{labels},"values":[["<unix ns>","<line>"], ...]}]}`, gzip accepted,
 * answered 204): Grafana Loki is not installable here. It keeps every entry pushed, in arrival
 * order, and, as Loki does, knows an entry already taken (same labels, timestamp and line).
 * `failNext(n)` answers the next n pushes 500 (Loki unavailable) without keeping them;
 * `hold(true)` keeps the pushes and holds their answers until `hold(false)` (a push Loki took whose
 * answer its sender never got).
 */

export interface PushedEntry {
  labels: Record<string, string>;
  ts: string;
  line: string;
}

export interface LokiPushServer {
  /** `http://127.0.0.1:<port>/loki/api/v1/push`. */
  readonly pushUrl: string;
  /** Every entry taken, in arrival order (duplicates included). */
  readonly entries: PushedEntry[];
  /** Requests answered, by status. */
  readonly answered: Map<number, number>;
  /** The entries as Loki keeps them: the first of each (labels, timestamp, line). */
  unique(): PushedEntry[];
  /** Pushes whose body came gzipped. */
  gzipped: number;
  failNext(n: number): void;
  /** Holds the answers of the pushes it keeps (true) or sends them (false). */
  hold(on: boolean): void;
  /** Pushes kept whose answer is held. */
  readonly held: number;
  close(): Promise<void>;
}

const keyOf = (e: PushedEntry) => JSON.stringify([Object.entries(e.labels).sort(), e.ts, e.line]);

export async function startLokiPush(): Promise<LokiPushServer> {
  let failing = 0;
  let holding = false;
  let heldAnswers: (() => void)[] = [];
  const entries: PushedEntry[] = [];
  const answered = new Map<number, number>();
  const answer = (res: import("node:http").ServerResponse, status: number, text = "") => {
    answered.set(status, (answered.get(status) ?? 0) + 1);
    res.writeHead(status, { "content-type": "text/plain" }).end(text);
  };
  const self: LokiPushServer = {
    pushUrl: "",
    entries,
    answered,
    gzipped: 0,
    unique() {
      const seen = new Set<string>();
      return entries.filter((e) => {
        const k = keyOf(e);
        if (seen.has(k)) return false;
        seen.add(k);
        return true;
      });
    },
    failNext(n) {
      failing = n;
    },
    hold(on) {
      holding = on;
      if (on) return;
      const release = heldAnswers;
      heldAnswers = [];
      for (const f of release) f();
    },
    get held() {
      return heldAnswers.length;
    },
    close: () =>
      new Promise((r) => {
        self.hold(false);
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/loki/api/v1/push")
        return answer(res, 404, "404 page not found");
      if (failing > 0) {
        failing--;
        return answer(res, 500, "ingester unavailable");
      }
      let body: { streams?: { stream?: Record<string, string>; values?: [string, string][] }[] };
      try {
        let raw = Buffer.concat(chunks);
        if (req.headers["content-encoding"] === "gzip") {
          raw = gunzipSync(raw);
          self.gzipped++;
        }
        if (!String(req.headers["content-type"]).startsWith("application/json")) throw new Error("not JSON");
        body = JSON.parse(raw.toString("utf8"));
      } catch (e) {
        return answer(res, 400, `error parsing push: ${(e as Error).message}`);
      }
      for (const s of body.streams ?? []) {
        for (const [ts, line] of s.values ?? []) {
          if (!/^\d+$/.test(ts)) return answer(res, 400, `bad timestamp ${ts}`);
          entries.push({ labels: s.stream ?? {}, ts, line });
        }
      }
      if (holding) heldAnswers.push(() => (res.destroyed ? undefined : answer(res, 204)));
      else answer(res, 204);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as AddressInfo).port;
  (self as { pushUrl: string }).pushUrl = `http://127.0.0.1:${port}/loki/api/v1/push`;
  return self;
}
