import { request as httpRequest } from "node:http";
import { connect } from "node:net";

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** The parsed body when it is JSON. */
  json: any;
}

/**
 * Sends bytes as they are over a fresh TCP connection to 127.0.0.1 and reads
 * one HTTP/1.1 answer. For requests `fetch` refuses to send (two
 * Content-Length headers, raw escapes, control characters in a path).
 */
export function rawRequest(port: number, request: string | Buffer, timeoutMs = 10_000): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: "127.0.0.1", port });
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.destroy();
      const text = Buffer.concat(chunks).toString("utf8");
      const head = text.indexOf("\r\n\r\n");
      if (head < 0) return reject(new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
      const lines = text.slice(0, head).split("\r\n");
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1] ?? 0);
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(":");
        if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      let body = text.slice(head + 4);
      const len = headers["content-length"];
      if (len !== undefined) body = Buffer.from(body).subarray(0, Number(len)).toString("utf8");
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      resolve({ status, headers, body, json });
    };
    const timer = setTimeout(() => {
      if (chunks.length) finish();
      else {
        settled = true;
        s.destroy();
        reject(new Error("raw request: no answer in time"));
      }
    }, timeoutMs);
    s.on("data", (d: Buffer) => {
      chunks.push(d);
      const text = Buffer.concat(chunks).toString("utf8");
      const head = text.indexOf("\r\n\r\n");
      if (head < 0) return;
      const m = /\r\ncontent-length: *(\d+)/i.exec(text.slice(0, head));
      if (m && Buffer.byteLength(text.slice(head + 4)) >= Number(m[1])) finish();
    });
    s.on("end", finish);
    s.on("close", finish);
    s.on("error", (e) => {
      if (chunks.length) finish();
      else if (!settled) {
        settled = true;
        clearTimeout(timer);
        reject(e);
      }
    });
    s.write(request);
  });
}

/** A GET request line with the usual headers, as raw text. */
export function rawGet(path: string, headers: Record<string, string> = {}): string {
  const h = { host: "127.0.0.1", connection: "close", ...headers };
  return `GET ${path} HTTP/1.1\r\n${Object.entries(h)
    .map(([k, v]) => `${k}: ${v}`)
    .join("\r\n")}\r\n\r\n`;
}

/**
 * `GET <path>` with a `Host` header (which `fetch` will not set) to a proxy at `at`: a port on
 * 127.0.0.1 or an `http://address:port` origin. `"<status> <body>"`, or `"error <why>"` when
 * nothing answered within 5 s.
 */
export function getWithHost(at: number | string, host: string, path: string): Promise<string> {
  const u = typeof at === "number" ? new URL(`http://127.0.0.1:${at}`) : new URL(at);
  return new Promise((resolve) => {
    const req = httpRequest(
      { host: u.hostname, port: Number(u.port || 80), path, headers: { host }, timeout: 5000 },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c) => (text += c));
        res.on("end", () => resolve(`${res.statusCode} ${text}`));
      },
    );
    req.on("timeout", () => req.destroy(new Error("no answer in 5 s")));
    req.on("error", (e) => resolve(`error ${String(e)}`));
    req.end();
  });
}
