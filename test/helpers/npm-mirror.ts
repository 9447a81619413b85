import { createReadStream, existsSync, readFileSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { homedir } from "node:os";
import { join } from "node:path";

/**
 * A read-only npm registry mirror for tests (the internet is closed): it
 * serves the packages a lockfile names (a packument per name, a tarball per
 * version) from this machine's npm cache, found by the lockfile's integrity
 * (cacache's content-addressed layout: `content-v2/<algo>/<hex>`). Hosts that
 * cannot reach the registry install through it as they would through an
 * operator's mirror (`npm_registry` in slipway.infra.yaml).
 */

export interface NpmMirror {
  readonly url: string;
  /** Tarballs served (name@version), for the test's log. */
  readonly served: string[];
  close(): Promise<void>;
}

interface Pkg {
  name: string;
  version: string;
  integrity: string;
}

/** The packages of a lockfile (v2/v3 `packages`) with an integrity. */
export function lockedPackages(lockfile: string): Pkg[] {
  const lock = JSON.parse(readFileSync(lockfile, "utf8")) as {
    packages?: Record<string, { version?: string; integrity?: string; name?: string }>;
  };
  const out: Pkg[] = [];
  for (const [path, p] of Object.entries(lock.packages ?? {})) {
    const at = path.lastIndexOf("node_modules/");
    if (at === -1 || !p.version || !p.integrity) continue;
    out.push({
      name: p.name ?? path.slice(at + "node_modules/".length),
      version: p.version,
      integrity: p.integrity,
    });
  }
  return out;
}

/** Where the npm cache keeps the content of `integrity` (`sha512-<base64>`), if it does. */
export function cachedContent(
  integrity: string,
  cache = join(homedir(), ".npm", "_cacache"),
): string | undefined {
  const [algo, b64] = integrity.split(/-(.*)/s, 2) as [string, string | undefined];
  if (!b64) return undefined;
  const hex = Buffer.from(b64, "base64").toString("hex");
  const path = join(cache, "content-v2", algo, hex.slice(0, 2), hex.slice(2, 4), hex.slice(4));
  return existsSync(path) ? path : undefined;
}

/** Starts the mirror on `host` (an ephemeral port) for the packages of `lockfiles`. */
export async function startNpmMirror(host: string, lockfiles: string[]): Promise<NpmMirror> {
  const byName = new Map<string, Map<string, Pkg>>();
  for (const f of lockfiles)
    for (const p of lockedPackages(f)) {
      const versions = byName.get(p.name) ?? new Map<string, Pkg>();
      versions.set(p.version, p);
      byName.set(p.name, versions);
    }
  const served: string[] = [];
  let base = "";
  const tarballName = (p: Pkg) => `${p.name.split("/").pop()}-${p.version}.tgz`;
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? "/").split("?")[0]!).replace(/^\/+/, "");
    const [name, tail] = path.includes("/-/")
      ? (path.split("/-/", 2) as [string, string])
      : [path, undefined];
    const versions = byName.get(name);
    if (req.method !== "GET" || !versions) {
      res.writeHead(404, { "content-type": "application/json" }).end('{"error":"not found"}');
      return;
    }
    if (tail === undefined) {
      const doc = {
        name,
        "dist-tags": { latest: [...versions.keys()].pop() },
        versions: Object.fromEntries(
          [...versions.values()].map((p) => [
            p.version,
            {
              name,
              version: p.version,
              dist: { tarball: `${base}/${name}/-/${tarballName(p)}`, integrity: p.integrity },
            },
          ]),
        ),
      };
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(doc));
      return;
    }
    const p = [...versions.values()].find((v) => tarballName(v) === tail);
    const file = p && cachedContent(p.integrity);
    if (!p || !file) {
      res.writeHead(404, { "content-type": "application/json" }).end('{"error":"not in the cache"}');
      return;
    }
    served.push(`${p.name}@${p.version}`);
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": statSync(file).size });
    createReadStream(file).pipe(res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, host, () => resolve());
  });
  const addr = server.address();
  if (!addr || typeof addr === "string") throw new Error("the npm mirror has no port");
  base = `http://${host}:${addr.port}`;
  return {
    url: `${base}/`,
    served,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
