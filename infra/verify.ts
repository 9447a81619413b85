/**
 * `infra verify` (DESIGN §12, docs/infra.md): does the environment work, end to end, from the
 * operator's machine? Every gateway of the outputs ready (`GET /readyz` 200); a write through one
 * control gateway read back through the others; every JetStream stream at the file's `replicas`
 * with a leader and every replica current (through SSH tunnels to the NATS servers); every proxy
 * answering HTTP. Each check is a function of explicit endpoints (URLs, a NATS connection), so it
 * runs against any ports; the verb takes the endpoints from the state's outputs.
 */
import { request as httpRequestRaw, type IncomingHttpHeaders } from "node:http";
import { request as httpsRequestRaw } from "node:https";
import type { NatsConnection } from "@nats-io/transport-node";
import { hostsWithRole } from "./config.js";
import {
  type NatsReport,
  closeAll,
  natsEndpoints,
  natsReport,
  natsThrough,
  reachHosts,
  streamProblems,
} from "./live.js";
import { type InfraContext, type InfraOutcome, errorOutcome, resultOutcome } from "./outcome.js";
import { failedToLoad, loadBootstrapped } from "./loaded.js";

/** One check: what was checked, whether it passed, what was seen. */
export interface VerifyCheck {
  readonly name: string;
  readonly ok: boolean;
  readonly detail: string;
}

/** The app verify writes to (made once by its first run) and the secret it sets on each run. */
export const VERIFY_APP = "slipway-verify";
export const VERIFY_SECRET = "VERIFY_PROBE";
/** The host name a proxy is asked for: no route has it (`.invalid` is never a real name). */
export const VERIFY_PROXY_HOST = "slipway-verify.invalid";

const HTTP_TIMEOUT_MS = 5000;
const READ_BACK_MS = 10_000;
/** A capability call's answer (the gateway itself gives up after 30 s with 504). */
const WRITE_TIMEOUT_MS = 15_000;
/** How long stream replicas may take to be current again before verify reports them. */
const NATS_SETTLE_MS = 5000;

interface HttpAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** One HTTP request (node:http, so that `Host` can be set); rejects on no answer within the timeout. */
export function httpCall(
  url: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string; timeoutMs?: number } = {},
): Promise<HttpAnswer> {
  const u = new URL(url);
  const send = u.protocol === "https:" ? httpsRequestRaw : httpRequestRaw;
  return new Promise((resolve, reject) => {
    const req = send(
      u,
      {
        method: opts.method ?? "GET",
        headers: {
          ...(opts.body !== undefined ? { "content-length": String(Buffer.byteLength(opts.body)) } : {}),
          ...opts.headers,
        },
        timeout: opts.timeoutMs ?? HTTP_TIMEOUT_MS,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks).toString("utf8"),
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("timeout", () =>
      req.destroy(new Error(`no answer within ${opts.timeoutMs ?? HTTP_TIMEOUT_MS} ms`)),
    );
    req.on("error", reject);
    req.end(opts.body);
  });
}

/** Why a request got no answer: the error's code (ECONNREFUSED...) or its message. */
const noAnswer = (e: unknown) =>
  `no answer: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message ?? String(e)}`;

function json(body: string): Record<string, unknown> | undefined {
  try {
    const v = JSON.parse(body) as unknown;
    return typeof v === "object" && v !== null ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** `<status> <code>: <message>` of an error answer in the platform's shape, else the status. */
function answerText(a: HttpAnswer): string {
  const err = json(a.body)?.error as { code?: string; message?: string } | undefined;
  return err?.code ? `${a.status} ${err.code}: ${err.message ?? ""}` : `HTTP ${a.status}`;
}

/** A gateway's `GET /readyz`: 200 `{"status":"ready"}` once its bus is up and its read index caught up. */
export async function checkGateway(
  url: string,
  plane: "control" | "data",
  timeoutMs = HTTP_TIMEOUT_MS,
): Promise<VerifyCheck> {
  const name = `gateway ${url}`;
  try {
    const a = await httpCall(new URL("/readyz", url).href, { timeoutMs });
    const b = json(a.body);
    if (a.status === 200 && b?.status === "ready") return { name, ok: true, detail: `${plane} plane, ready` };
    const why =
      b && "bus" in b ? `${b.status} (bus ${String(b.bus)}, index ${String(b.index)})` : answerText(a);
    return { name, ok: false, detail: `${plane} plane, ${a.status === 200 ? "" : `${a.status} `}${why}` };
  } catch (e) {
    return { name, ok: false, detail: `${plane} plane, ${noAnswer(e)}` };
  }
}

/** What the platform's edge proxy answers: any HTTP answer passes (an unknown host gets 404 not_found). */
export async function checkProxy(url: string, timeoutMs = HTTP_TIMEOUT_MS): Promise<VerifyCheck> {
  const name = `proxy ${url}`;
  try {
    const a = await httpCall(url, { headers: { host: VERIFY_PROXY_HOST }, timeoutMs });
    const err = json(a.body)?.error as { code?: string } | undefined;
    const known = a.status === 404 && err?.code === "not_found";
    return {
      name,
      ok: true,
      detail: known
        ? `answers 404 not_found for the unknown host ${VERIFY_PROXY_HOST}`
        : `answers ${answerText(a)} for the host ${VERIFY_PROXY_HOST}`,
    };
  } catch (e) {
    return { name, ok: false, detail: noAnswer(e) };
  }
}

/**
 * The write check: through `writer`, the app {@link VERIFY_APP} is made when it is missing
 * (initialize-app; `409 already_exists` is fine) and its secret {@link VERIFY_SECRET} is set to the
 * time of the run (set-secret: one Secret whose version grows by one per run, one SecretSet
 * event). Then each of `readers` must show that version of the Secret (`GET
 * /resources/Secret/<id>`) within 10 s: the command went over the bus to a runtime node, the
 * result was replicated, and every other gateway's read index follows. No reader: read back
 * through the writer.
 */
export async function checkControlWrite(
  writer: string,
  readers: readonly string[],
  token: string,
  opts: { timeoutMs?: number; readBackMs?: number } = {},
): Promise<VerifyCheck> {
  const others = readers.filter((r) => r !== writer);
  const via = others.length ? others : [writer];
  const name = `write ${writer} -> ${via.join(", ")}`;
  const timeoutMs = opts.timeoutMs ?? WRITE_TIMEOUT_MS;
  const headers = {
    authorization: `Bearer ${token}`,
    "content-type": "application/json",
    "x-platform-actor-type": "operator",
    "x-platform-actor-id": "slipway-infra-verify",
  };
  const post = (path: string, body: unknown) =>
    httpCall(new URL(path, writer).href, { method: "POST", headers, body: JSON.stringify(body), timeoutMs });
  try {
    const made = await post("/capabilities/initialize-app", { name: VERIFY_APP });
    if (made.status !== 200 && !(made.status === 409 && /already_exists/.test(made.body)))
      return {
        name,
        ok: false,
        detail: `initialize-app ${VERIFY_APP} through ${writer}: ${answerText(made)}`,
      };
    const set = await post("/capabilities/set-secret", {
      app: VERIFY_APP,
      name: VERIFY_SECRET,
      value: `infra verify ${new Date().toISOString()}`,
    });
    const resource = json(set.body)?.resource as { id?: string; version?: number } | undefined;
    if (set.status !== 200 || !resource?.id || typeof resource.version !== "number")
      return { name, ok: false, detail: `set-secret through ${writer}: ${answerText(set)}` };
    const { id, version } = resource;
    const started = Date.now();
    const readBack = async (reader: string): Promise<string | undefined> => {
      let last = "";
      for (;;) {
        try {
          const a = await httpCall(new URL(`/resources/Secret/${id}`, reader).href, {
            headers: { authorization: headers.authorization },
            timeoutMs: HTTP_TIMEOUT_MS,
          });
          const seen = json(a.body)?.version;
          if (a.status === 200 && typeof seen === "number" && seen >= version) return undefined;
          last = a.status === 200 ? `version ${String(seen)}` : answerText(a);
        } catch (e) {
          last = noAnswer(e);
        }
        if (Date.now() - started > (opts.readBackMs ?? READ_BACK_MS))
          return `${reader} did not show version ${version} within ${opts.readBackMs ?? READ_BACK_MS} ms (last: ${last})`;
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    const failed = (await Promise.all(via.map(readBack))).filter((x): x is string => x !== undefined);
    if (failed.length) return { name, ok: false, detail: failed.join("; ") };
    return {
      name,
      ok: true,
      detail: `${VERIFY_SECRET} of app ${VERIFY_APP} set to version ${version} through ${writer}, read back through ${via.join(", ")} in ${Date.now() - started} ms${others.length ? "" : " (no other control gateway ready)"}`,
    };
  } catch (e) {
    return { name, ok: false, detail: `through ${writer}: ${noAnswer(e)}` };
  }
}

/** The NATS checks of a report: every stream at `replicas`, led, every replica current; the members. */
export function natsChecks(report: NatsReport, replicas: number): VerifyCheck[] {
  const problems = streamProblems(report, replicas);
  const n = report.streams.length;
  const streams: VerifyCheck =
    n === 0
      ? {
          name: "nats streams",
          ok: false,
          detail: "no stream at all: the platform has not made its streams yet",
        }
      : problems.length
        ? {
            name: "nats streams",
            ok: false,
            detail: `${problems.length} of ${n} streams not at ${replicas} current replicas: ${problems.slice(0, 8).join("; ")}${problems.length > 8 ? `; and ${problems.length - 8} more` : ""}`,
          }
        : {
            name: "nats streams",
            ok: true,
            detail: `${n} streams (KV and object stores included) at ${replicas} replicas, each with a leader and every replica current`,
          };
  const behind = report.members.filter((m) => !m.current).map((m) => m.name);
  const fine = report.members.filter((m) => m.current).map((m) => m.name);
  const members: VerifyCheck = {
    name: "nats members",
    ok: behind.length === 0 && report.members.length >= replicas,
    detail: [
      behind.length ? `not current: ${behind.join(", ")}` : "",
      fine.length ? `current: ${fine.join(", ")}` : "",
      report.members.length < replicas ? `${report.members.length} servers seen, ${replicas} wanted` : "",
    ]
      .filter(Boolean)
      .join("; "),
  };
  return [streams, members];
}

/**
 * The NATS checks on a connection. A replica a few operations behind under load is not current for
 * a moment: the streams are looked at again (every 250 ms, for at most `settleMs`) until every check
 * passes; the last look is reported.
 */
export async function checkNats(
  nc: NatsConnection,
  replicas: number,
  settleMs = NATS_SETTLE_MS,
): Promise<VerifyCheck[]> {
  const started = Date.now();
  for (;;) {
    let checks: VerifyCheck[];
    try {
      checks = natsChecks(await natsReport(nc), replicas);
    } catch (e) {
      checks = [
        {
          name: "nats streams",
          ok: false,
          detail: `the streams could not be listed: ${(e as Error).message}`,
        },
      ];
    }
    if (checks.every((c) => c.ok) || Date.now() - started >= settleMs) return checks;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Gateways, the write and the proxies, from explicit URLs. */
export async function httpChecks(
  urls: { control: readonly string[]; data: readonly string[]; proxy: readonly string[] },
  token: string,
): Promise<VerifyCheck[]> {
  const [control, data, proxy] = await Promise.all([
    Promise.all(urls.control.map((u) => checkGateway(u, "control"))),
    Promise.all(urls.data.map((u) => checkGateway(u, "data"))),
    Promise.all(urls.proxy.map((u) => checkProxy(u))),
  ]);
  const ready = urls.control.filter((_, i) => control[i]!.ok);
  const write: VerifyCheck = ready[0]
    ? await checkControlWrite(ready[0], ready, token)
    : { name: "write", ok: false, detail: "no control gateway is ready to write through" };
  return [...control, ...data, write, ...proxy];
}

/** Runs `infra verify`. */
export async function runVerify(ctx: InfraContext): Promise<InfraOutcome> {
  const got = loadBootstrapped(ctx);
  if (failedToLoad(got)) return got;
  const { file, state, baseDir, secrets: keys } = got;
  const env = file.environment.name;
  const outputs = state.outputs;
  if (!outputs)
    return errorOutcome(
      "no_infra_outputs",
      `environment '${env}' has no outputs yet: run slipway infra bootstrap`,
    );
  ctx.progress(
    `${outputs.control_urls.length} control and ${outputs.data_urls.length} data gateways, ${outputs.proxy_urls.length} proxies; NATS through ${hostsWithRole(file, "nats").length} hosts`,
  );
  const started = Date.now();
  const natsPart = async (): Promise<VerifyCheck[]> => {
    const reached = await reachHosts(ctx, baseDir, hostsWithRole(file, "nats"), state);
    try {
      for (const r of reached)
        ctx.progress(
          `host ${r.host.name}: ${"session" in r ? "reached over SSH" : `not reached: ${r.error.message}`}`,
        );
      const through = await natsThrough(reached, natsEndpoints(file, outputs), keys.nats_roles.admin.seed, {
        name: "slipway-infra-verify",
      });
      try {
        const down = through.tunnels.filter((t) => t.error).map((t) => `${t.host}: ${t.error}`);
        if (!through.nc)
          return [{ name: "nats connection", ok: false, detail: through.error ?? "not connected" }];
        ctx.progress(`NATS: connected to ${through.server ?? "?"} through host ${through.via ?? "?"}`);
        const conn: VerifyCheck = {
          name: "nats connection",
          ok: true,
          detail: `admin connection to ${through.server ?? "a server"} through host ${through.via ?? "?"}${down.length ? `; not reached: ${down.join("; ")}` : ""}`,
        };
        return [conn, ...(await checkNats(through.nc, file.replicas))];
      } finally {
        await through.close();
      }
    } finally {
      closeAll(reached);
    }
  };
  const httpPart = httpChecks(
    { control: outputs.control_urls, data: outputs.data_urls, proxy: outputs.proxy_urls },
    keys.env.SLIPWAY_CONTROL_TOKEN,
  );
  const [http, nats] = await Promise.all([httpPart, natsPart()]);
  const checks = [...http, ...nats];
  const ok = checks.every((c) => c.ok);
  const passed = checks.filter((c) => c.ok).length;
  const width = Math.max(...checks.map((c) => c.name.length));
  const lines = [
    `environment ${env}: ${passed} of ${checks.length} checks passed (${Date.now() - started} ms)`,
    ...checks.map((c) => `${c.ok ? "ok  " : "FAIL"}  ${c.name.padEnd(width)}  ${c.detail}`),
  ];
  return resultOutcome("verify", ok, { environment: env, ok, checks }, lines);
}
