/**
 * What `infra apply` does on one host, over its SSH session and the host's own `docker` command
 * (docs/infra.md, "infra apply"): the image made present (pulled by digest, or streamed from the
 * operator's engine with `docker save | docker load`), a container made from its description
 * (infra/containers.ts) with its files copied in and its secrets passed as an env file on stdin,
 * never on a command line, and the wait until it is ready.
 */
import { DATA_MOUNT, LABELS, NATS_MONITOR_PORT, RUN_DIR, type WantedContainer } from "./containers.js";
import { stderrTail } from "./engine.js";
import type { SshSession } from "./ssh.js";
import tar from "tar-stream";

/** A step of apply that failed on a host: the host gets tainted with this message. */
export class ApplyStepError extends Error {
  override readonly name = "ApplyStepError";
}

/** The operator's engine, where a bare image id is loaded from (DOCKER_HOST, else the local socket). */
export interface ImageSource {
  /** `docker save` of the image, as a stream; undefined when the engine does not have it. */
  save(image: string): Promise<NodeJS.ReadableStream | undefined>;
}

const PULL_MS = 10 * 60_000;
const LOAD_MS = 10 * 60_000;
const READY_MS = 120_000;
const POLL_MS = 500;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function docker(s: SshSession, args: readonly string[], what: string, timeoutMs = 60_000) {
  const r = await s.exec(["docker", ...args], { timeoutMs });
  if (r.code !== 0) throw new ApplyStepError(`host '${s.target.name}': ${what} failed: ${stderrTail(r)}`);
  return r.stdout;
}

/** Makes the image present on the host; says whether it had to be brought there. */
export async function ensureImage(
  s: SshSession,
  image: string,
  source: ImageSource,
  say: (line: string) => void,
): Promise<"present" | "pulled" | "loaded"> {
  const have = await s.exec(["docker", "image", "inspect", "--format", "{{.Id}}", image], {
    timeoutMs: 30_000,
  });
  if (have.code === 0) return "present";
  if (image.includes("@")) {
    say(`pulling ${image}`);
    await docker(s, ["pull", image], `docker pull ${image}`, PULL_MS);
    return "pulled";
  }
  const stream = await source.save(image);
  if (!stream)
    throw new ApplyStepError(
      `host '${s.target.name}': the image ${image} is neither on the host nor in the operator's engine (DOCKER_HOST): run slipway infra release-image, or pin a pushed image by digest`,
    );
  say(`loading ${image} from the operator's engine (docker save | docker load over SSH)`);
  const r = await s.exec(["docker", "load"], { timeoutMs: LOAD_MS, stdin: stream });
  if (r.code !== 0) throw new ApplyStepError(`host '${s.target.name}': docker load failed: ${stderrTail(r)}`);
  const got = await s.exec(["docker", "image", "inspect", "--format", "{{.Id}}", image], {
    timeoutMs: 30_000,
  });
  if (got.code !== 0)
    throw new ApplyStepError(`host '${s.target.name}': docker load did not give the image ${image}`);
  return "loaded";
}

/** The data volume of a container: it survives a replace (a NATS member keeps its store). */
export function volumeName(w: WantedContainer): string {
  return `${w.name}-data`;
}

/**
 * The tar of the container's files. `docker cp` (without `--archive`, which fails on an image whose
 * user is numeric: it looks the user up with getent) makes them root's: they are 0444 in 0755
 * folders, readable by the container's one user; nothing outside the container sees them (its
 * layer under the engine's root-only data dir).
 */
async function filesTar(files: Readonly<Record<string, string>>): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  pack.on("data", (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((res, rej) => {
    pack.on("end", () => res());
    pack.on("error", rej);
  });
  const owner = { uid: 0, gid: 0, mtime: new Date(0) };
  const dirs = new Set<string>();
  for (const path of Object.keys(files)) {
    if (!path.startsWith(`${RUN_DIR}/`)) throw new Error(`a container file outside ${RUN_DIR}: ${path}`);
    const parts = path.split("/").slice(1, -1);
    for (let i = 1; i <= parts.length; i++) dirs.add(parts.slice(0, i).join("/"));
  }
  for (const d of [...dirs].sort()) pack.entry({ name: `${d}/`, type: "directory", mode: 0o755, ...owner });
  for (const [path, text] of Object.entries(files))
    pack.entry({ name: path.slice(1), type: "file", mode: 0o444, ...owner }, text);
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** Removes the container (keeping its named volume). */
export async function removeContainer(s: SshSession, name: string): Promise<void> {
  await docker(s, ["rm", "-f", name], `docker rm -f ${name}`);
}

/** Creates, fills and starts the container; a container of that name is removed first. */
export async function makeContainer(s: SshSession, w: WantedContainer, env: string): Promise<void> {
  const exists = await s.exec(["docker", "container", "inspect", "--format", "{{.Id}}", w.name], {
    timeoutMs: 30_000,
  });
  if (exists.code === 0) await removeContainer(s, w.name);
  const volume = volumeName(w);
  await docker(
    s,
    ["volume", "create", "--label", `${LABELS.env}=${env}`, "--label", `${LABELS.host}=${w.host}`, volume],
    `docker volume create ${volume}`,
  );
  const args = ["create", "--name", w.name, "--restart", "unless-stopped", "--no-healthcheck"];
  for (const [k, v] of Object.entries(w.labels)) args.push("--label", `${k}=${v}`);
  for (const p of w.ports) args.push("--publish", p);
  for (const [k, v] of Object.entries(w.sysctls ?? {})) args.push("--sysctl", `${k}=${v}`);
  args.push("--volume", `${volume}:${DATA_MOUNT}`, "--env-file", "/dev/stdin");
  args.push("--log-opt", "max-size=10m", "--log-opt", "max-file=3");
  if (w.entrypoint) args.push("--entrypoint", w.entrypoint[0]!);
  args.push(w.image, ...(w.entrypoint?.slice(1) ?? []), ...w.command);
  // the environment, secrets included, goes as an env file read from stdin: never on a command line
  const envFile = Object.entries(w.env)
    .map(([k, v]) => {
      if (/[\r\n]/.test(v)) throw new Error(`${w.name}: ${k} holds a line break`);
      return `${k}=${v}\n`;
    })
    .join("");
  const created = await s.exec(["docker", ...args], { timeoutMs: 60_000, stdin: envFile });
  if (created.code !== 0)
    throw new ApplyStepError(
      `host '${s.target.name}': docker create ${w.name} failed: ${stderrTail(created)}`,
    );
  if (Object.keys(w.files).length > 0) {
    const r = await s.exec(["docker", "cp", "-", `${w.name}:/`], {
      timeoutMs: 60_000,
      stdin: await filesTar(w.files),
    });
    if (r.code !== 0)
      throw new ApplyStepError(`host '${s.target.name}': copying ${w.name}'s files failed: ${stderrTail(r)}`);
  }
  await docker(s, ["start", w.name], `docker start ${w.name}`);
}

interface Running {
  running: boolean;
  restarts: number;
  status: string;
}

async function inspectState(s: SshSession, name: string): Promise<Running> {
  const out = await docker(
    s,
    ["container", "inspect", "--format", "{{.State.Running}} {{.RestartCount}} {{.State.Status}}", name],
    `docker inspect ${name}`,
  );
  const [running, restarts, status] = out.trim().split(" ");
  return { running: running === "true", restarts: Number(restarts) || 0, status: status ?? "?" };
}

async function logsOf(s: SshSession, name: string, tail = 200): Promise<string> {
  const r = await s.exec(["docker", "logs", "--tail", String(tail), name], { timeoutMs: 30_000 });
  return `${r.stdout}${r.stderr}`;
}

const lastLines = (text: string, n = 6) => text.trim().split("\n").slice(-n).join(" / ");

/**
 * Waits until the container's process says it is ready (`ready in` from slipwayd, `Server is
 * ready` from nats-server); a container that stopped or restarts fails with its last lines.
 */
export async function waitStarted(s: SshSession, w: WantedContainer, timeoutMs = READY_MS): Promise<void> {
  const marker = w.role === "nats" ? "Server is ready" : "ready in";
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const st = await inspectState(s, w.name);
    const logs = await logsOf(s, w.name);
    if (st.running && st.restarts === 0 && logs.includes(marker)) return;
    if (st.restarts >= 3 || (!st.running && st.status !== "restarting" && st.status !== "created"))
      throw new ApplyStepError(
        `host '${s.target.name}': ${w.name} does not stay up (${st.status}, ${st.restarts} restarts): ${lastLines(logs)}`,
      );
    if (Date.now() > deadline)
      throw new ApplyStepError(
        `host '${s.target.name}': ${w.name} not ready within ${timeoutMs / 1000} s: ${lastLines(logs)}`,
      );
    await sleep(POLL_MS);
  }
}

/** The NATS member's `/healthz` (JetStream current with its cluster), asked inside its container. */
export async function natsHealth(s: SshSession, name: string): Promise<{ ok: boolean; body: string }> {
  const script = `fetch('http://127.0.0.1:${NATS_MONITOR_PORT}/healthz').then(async (r) => { process.stdout.write(String(r.status) + ' ' + (await r.text())) }, (e) => { process.stdout.write('0 ' + e.message) })`;
  const r = await s.exec(["docker", "exec", name, "/usr/local/bin/node", "-e", script], {
    timeoutMs: 30_000,
  });
  if (r.code !== 0) return { ok: false, body: stderrTail(r) };
  const status = r.stdout.slice(0, r.stdout.indexOf(" "));
  return { ok: status === "200", body: r.stdout.slice(status.length + 1).trim() };
}

/** Waits until the NATS member reports itself healthy (its JetStream current with the cluster). */
export async function waitNatsCurrent(s: SshSession, name: string, timeoutMs = READY_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    const h = await natsHealth(s, name);
    if (h.ok) return;
    last = h.body;
    if (Date.now() > deadline)
      throw new ApplyStepError(
        `host '${s.target.name}': NATS member ${name} not current within ${timeoutMs / 1000} s: ${last.slice(0, 300)}`,
      );
    await sleep(1000);
  }
}
