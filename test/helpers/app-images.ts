import Docker from "dockerode";
import tar from "tar-stream";
import { ContainerRuntime } from "../../effects/mod.js";

/**
 * Images of a tiny production app for the deploy and release tests, built on
 * the private dockerd from the platform's own base image (the host's node; no
 * registry needed): it listens on $HOST:$PORT, answers `GET /health` (503 with
 * `neverReady`), and answers every other request with its version, method,
 * body, its hostname (the container's short id) and the GREETING variable, so a
 * test can tell which version and which container served.
 */

const SERVER = `
const http = require("node:http");
const version = process.env.APP_VERSION || "none";
const neverReady = process.env.NEVER_READY === "1";
console.log("app " + version + " starting on " + process.env.PORT);
const server = http.createServer((req, res) => {
  if (req.url === "/health") {
    res.writeHead(neverReady ? 503 : 200, { "content-type": "text/plain" });
    return res.end(neverReady ? "not ready" : "ok");
  }
  let body = "";
  req.setEncoding("utf8");
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ version, host: require("node:os").hostname(), method: req.method, path: req.url, body, greeting: process.env.GREETING || null }));
  });
});
server.keepAliveTimeout = 30000;
server.listen(Number(process.env.PORT || 3000), process.env.HOST || "127.0.0.1");
process.on("SIGTERM", () => server.close(() => process.exit(0)));
`;

export interface AppImage {
  /** `sha256:<id>`: pinned (a local image id). */
  id: string;
  tag: string;
}

function dockerOf(host: string): Docker {
  return new Docker({ socketPath: host.replace(/^unix:\/\//, "") });
}

function follow(d: Docker, stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise((resolve, reject) =>
    d.modem.followProgress(stream, (err: Error | null, events: { error?: string }[]) => {
      const bad = events?.find((e) => e.error);
      if (err || bad) reject(err ?? new Error(bad?.error));
      else resolve();
    }),
  );
}

/** Builds `<tag>` of the test app (or of `server`, a script of its own); `version` is what it reports. */
export async function buildAppImage(
  dockerHost: string,
  tag: string,
  version: string,
  opts: { neverReady?: boolean; server?: string } = {},
): Promise<AppImage> {
  const base = await new ContainerRuntime({ host: dockerHost }).ensureBaseImage();
  const pack = tar.pack();
  pack.entry(
    { name: "Dockerfile" },
    [
      `FROM ${base}`,
      "COPY server.js /srv/server.js",
      `ENV APP_VERSION=${version}${opts.neverReady ? " NEVER_READY=1" : ""}`,
      'CMD ["node", "/srv/server.js"]',
      "",
    ].join("\n"),
  );
  pack.entry({ name: "server.js" }, opts.server ?? SERVER);
  pack.finalize();
  const d = dockerOf(dockerHost);
  await follow(d, await d.buildImage(pack as unknown as NodeJS.ReadableStream, { t: tag, rm: true }));
  const info = await d.getImage(tag).inspect();
  return { id: info.Id, tag };
}

/** Pushes a local image to a registry as `<registry>/<repo>:<tag>`; the reference by digest it got. */
export async function pushImage(
  dockerHost: string,
  image: string,
  registry: string,
  repo: string,
  tag: string,
): Promise<string> {
  const d = dockerOf(dockerHost);
  const name = `${registry}/${repo}`;
  await d.getImage(image).tag({ repo: name, tag });
  // the engine's API wants an auth config even for a registry without auth (STACK.md)
  await follow(
    d,
    await d
      .getImage(`${name}:${tag}`)
      .push({ authconfig: { username: "", password: "", serveraddress: registry } }),
  );
  const info = await d.getImage(`${name}:${tag}`).inspect();
  const digest = (info.RepoDigests ?? []).find((r) => r.startsWith(`${name}@`));
  if (!digest) throw new Error(`no digest for ${name}:${tag} after the push`);
  return digest;
}

/** Removes an image from the engine (so a deploy must pull it). */
export async function removeLocalImage(dockerHost: string, ref: string): Promise<void> {
  await dockerOf(dockerHost)
    .getImage(ref)
    .remove({ force: true })
    .catch(() => {});
}
