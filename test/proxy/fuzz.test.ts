import anyTest, { type TestFn } from "ava";
import { connect } from "node:net";
import { keys, type RouteApplied, subjects } from "../../proto/mod.js";
import type { Bus } from "../../store/mod.js";
import {
  eventually,
  freePort,
  startTestNats,
  type TestNats,
  TEST_VAULT_KEY,
  tempDir,
} from "../helpers/infra.js";
import { prng } from "../helpers/prng.js";
import { type SlipwaydProcess, spawnSlipwayd } from "../helpers/slipwayd-process.js";
import { routeOf, send, startUpstream, type TestUpstream, testHost, upstreamOf } from "./support.js";

/**
 * Raw bytes a browser would never send, to a `slipwayd proxy` process: garbage methods and paths,
 * malformed escapes, huge and numerous headers, bad Host headers, broken framing, bodies cut short,
 * upgrades without a handshake. Every answer is one the proxy documents (never a 500), every
 * request that was sent whole is answered, and the process lives on and serves afterwards.
 */

interface Ctx {
  nats: TestNats;
  bus: Bus;
  proxy: SlipwaydProcess;
  port: number;
  host: string;
  up: TestUpstream;
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("proxy-fuzz");
  const port = await freePort();
  const proxy = spawnSlipwayd(["proxy"], {
    ...process.env,
    ...nats.env("proxy"),
    SLIPWAY_DATA_DIR: tempDir(),
    SLIPWAY_VAULT_KEY: TEST_VAULT_KEY,
    SLIPWAY_HTTP_PORT: String(port),
    SLIPWAY_HTTPS_PORT: "0",
    SLIPWAY_PROXY_ID: "fuzzproxy",
  });
  const up = await startUpstream("v1");
  t.context = { nats, bus, proxy, port, host: testHost("fuzz"), up };
  await proxy.ready(30_000);
  const acks: RouteApplied[] = [];
  bus.nc.subscribe(subjects.proxyApplied, {
    callback: (e, m) => {
      if (!e) acks.push(m.json<RouteApplied>());
    },
  });
  const rev = await bus.kv.routes.put(
    keys.route(t.context.host),
    JSON.stringify(routeOf(t.context.host, [upstreamOf(up)])),
  );
  await eventually(
    async () => acks.some((a) => a.host === t.context.host && a.revision === rev && a.ok),
    20_000,
  );
});

test.after.always(async (t) => {
  await t.context.proxy?.stop();
  await t.context.up?.close();
  await t.context.bus?.close();
  await t.context.nats?.stop();
});

interface Raw {
  status: number;
  /** No answer came before the connection closed or the time ran out. */
  unanswered: boolean;
}

/** Sends bytes (optionally closing after `cutAfter` of them) and reads the status line of the answer. */
function raw(port: number, bytes: Buffer, cutAfter?: number, waitMs = 5000): Promise<Raw> {
  return new Promise((resolve) => {
    const s = connect({ host: "127.0.0.1", port });
    let buf = "";
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(buf);
      resolve({ status: m ? Number(m[1]) : 0, unanswered: !m });
    };
    const timer = setTimeout(finish, waitMs);
    s.on("data", (d: Buffer) => {
      buf += d.toString("latin1");
      if (/^HTTP\/1\.[01] \d{3}/.test(buf) && buf.includes("\r\n\r\n")) finish();
    });
    s.on("close", finish);
    s.on("error", finish);
    if (cutAfter !== undefined) s.end(bytes.subarray(0, cutAfter), () => s.destroy());
    else s.write(bytes);
  });
}

const pick = <T>(r: () => number, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

/** A raw request; `incomplete` when its framing announces more body than it carries (it may wait for it). */
function requestOf(r: () => number, host: string): { bytes: Buffer; cut?: number; incomplete: boolean } {
  const method = pick(r, [
    "GET",
    "GET",
    "POST",
    "PUT",
    "DELETE",
    "HEAD",
    "OPTIONS",
    "PATCH",
    "BREW",
    "G ET",
    "",
    "CONNECT",
  ]);
  const path = pick(r, [
    "/",
    "/%ff",
    "/%",
    "/%zz/%%",
    "/a/../../etc/passwd",
    "//double//slash",
    `/${"a".repeat(9000)}`,
    "*",
    "http://evil.example/x",
    "/\x01ctl",
    "/\xc3\xbc\xff",
    "/?q=%ff%fe&&=",
    "/.well-known/acme-challenge/",
    "/.well-known/acme-challenge/%ff",
    `/.well-known/acme-challenge/${"x".repeat(300)}`,
    "/echo",
    "/die",
    "/ws",
    "",
  ]);
  const hostHeader = pick(r, [
    `host: ${host}`,
    `host: ${host}`,
    `host: ${host}:1`,
    `host: ${host.toUpperCase()}.`,
    "host: ",
    "",
    "host: [::1]",
    "host: [zz",
    "host: a..b",
    "host: h:99999999",
    `host: ${"x".repeat(300)}`,
    "host: evil host",
    "host: %ff",
    "host: \xc3\xbcn\xc3\xaf.test",
    `host: ${host}\r\nhost: other.test`,
  ]);
  const extra = pick(r, [
    "",
    "",
    `x-big: ${"b".repeat(20_000)}`,
    Array.from({ length: 300 }, (_, i) => `x-h${i}: ${i}`).join("\r\n"),
    "content-length: abc",
    "content-length: 5\r\ncontent-length: 6",
    "transfer-encoding: chunked",
    "upgrade: websocket\r\nconnection: upgrade",
    "expect: 100-continue\r\ncontent-length: 3",
    "connection: close, x-foo\r\nx-foo: 1",
    "x-forwarded-for: 1.2.3.4, 5.6.7.8",
    "content-length: 100000000",
  ]);
  const version = pick(r, ["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "JUNK"]);
  const body = pick(r, ["", "", "abc", "zz\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", "\x00\xff\xfe"]);
  const head = [`${method} ${path} ${version}`, hostHeader, extra, "connection: close"]
    .filter(Boolean)
    .join("\r\n");
  const bytes = Buffer.from(`${head}\r\n\r\n${body}`, "latin1");
  const incomplete =
    extra.includes("content-length: 100000000") ||
    (extra === "transfer-encoding: chunked" && !body.endsWith("0\r\n\r\n")) ||
    (extra.includes("content-length: 3") && body.length < 3);
  // some clients go away half way
  return r() < 0.1 ? { bytes, cut: Math.floor(r() * bytes.length), incomplete } : { bytes, incomplete };
}

test("proxy: 1,500 malformed raw requests get documented answers, never a 500, and the slipwayd proxy process lives on and serves", async (t) => {
  const { port, host, proxy } = t.context;
  const seed = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
  const total = Number(process.env.FUZZ_TOTAL ?? 1500);
  t.log(`FUZZ_SEED=${seed}`);
  const r = prng(seed);
  const cases = Array.from({ length: total }, () => requestOf(r, host));
  const statuses = new Map<number, number>();
  const bad: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const c = cases[next++]!;
      const mayWait = c.cut !== undefined || c.incomplete;
      const a = await raw(port, c.bytes, c.cut, mayWait ? 500 : 5000);
      statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
      const what = JSON.stringify(c.bytes.subarray(0, 120).toString("latin1"));
      if (a.status >= 500 && a.status !== 502 && a.status !== 503) bad.push(`${a.status} for ${what}`);
      if (a.unanswered && !mayWait) bad.push(`no answer for ${what}`);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  t.log(
    `statuses: ${JSON.stringify(Object.fromEntries([...statuses.entries()].sort((a, b) => a[0] - b[0])))}`,
  );
  t.deepEqual(bad.slice(0, 10), []);
  t.is(proxy.child.exitCode, null, proxy.out());
  const after = await send(`http://127.0.0.1:${port}`, host, "/");
  t.is(after.status, 200);
  t.is(JSON.parse(after.body).version, "v1");
  t.notRegex(proxy.out(), /uncaught|unhandled/i);
});
