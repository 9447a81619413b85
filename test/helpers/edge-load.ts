import { Agent as HttpAgent, request as httpRequest } from "node:http";

/**
 * Requests through the platform's edge proxy with the app's Host header, for
 * "production never stopped serving" checks: `n` keep-alive loops, each
 * answer counted by the JSON field `by` of the body (the version that served
 * it), every answer that is not a 200 JSON counted as failed.
 */

export interface EdgeTally {
  ok: number;
  failed: string[];
  by: Map<string, number>;
}

/** One GET through the proxy: status and body text (an error is status 0). */
export function viaEdge(port: number, host: string, path: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve) => {
    const req = httpRequest({ host: "127.0.0.1", port, path, headers: { host } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      res.on("error", (e) => resolve({ status: 0, text: String(e) }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error("timed out")));
    req.on("error", (e) => resolve({ status: 0, text: String(e) }));
    req.end();
  });
}

/** Keeps `n` loops of `GET path` going through the proxy until `stop()`. */
export function edgeLoad(port: number, host: string, path: string, by: string, n = 8) {
  const agent = new HttpAgent({ keepAlive: true, maxSockets: n });
  const tally: EdgeTally = { ok: 0, failed: [], by: new Map() };
  let running = true;
  const once = () =>
    new Promise<void>((resolve) => {
      const req = httpRequest({ host: "127.0.0.1", port, path, agent, headers: { host } }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c) => (text += c));
        res.on("end", () => {
          try {
            const j = JSON.parse(text) as Record<string, unknown>;
            if (res.statusCode !== 200) throw new Error("status");
            const key = String(j[by]);
            tally.ok++;
            tally.by.set(key, (tally.by.get(key) ?? 0) + 1);
          } catch {
            tally.failed.push(`${res.statusCode} ${text.slice(0, 200)}`);
          }
          resolve();
        });
        res.on("error", (e) => {
          tally.failed.push(String(e));
          resolve();
        });
      });
      req.setTimeout(10_000, () => req.destroy(new Error("timed out")));
      req.on("error", (e) => {
        tally.failed.push(String(e));
        resolve();
      });
      req.end();
    });
  const loops = Array.from({ length: n }, async () => {
    while (running) {
      await once();
      await new Promise((r) => setTimeout(r, 5));
    }
  });
  return {
    tally,
    async stop(): Promise<EdgeTally> {
      running = false;
      await Promise.all(loops);
      agent.destroy();
      return tally;
    },
  };
}
