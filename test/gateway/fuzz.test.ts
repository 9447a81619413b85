import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { CAPABILITIES, acceptedOn } from "../../proto/catalogue.js";
import { INPUT_SCHEMAS, type CapabilityName } from "../../proto/inputs.js";
import { validateInput } from "../../proto/codec.js";
import { ACTOR, call, get, platformPerFile, type PlatformContext } from "../helpers/infra.js";
import { prng } from "../helpers/prng.js";

const test = anyTest as TestFn<PlatformContext & { app: string; token: string }>;

platformPerFile(test, async (p) => {
  const app = `z${randomUUID().slice(0, 8)}`;
  const r = await call(p.controlUrl, "initialize-app", { name: app });
  return { app, token: r.body.result.token as string };
});

function generator(rand: () => number, app: string) {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const str = () =>
    pick([
      "",
      "x",
      "a".repeat(Math.floor(rand() * 5000)),
      "\u0000\u0001",
      "😀".repeat(20),
      "../../etc/passwd",
      "<script>",
      " spaced ",
      "Ünïcødé",
      String(rand()),
      "$" + "{jndi:x}",
      "-1",
      "slipway.cmd.>",
      "a.b*c>d",
    ]);
  const scalar = (): unknown =>
    pick([null, true, false, 0, -1, 1.5, 1e308, -0, Number.MAX_SAFE_INTEGER + 2, str(), [], {}]);
  const value = (depth = 0): unknown => {
    if (depth > 3 || rand() < 0.5) return scalar();
    if (rand() < 0.5) return Array.from({ length: Math.floor(rand() * 4) }, () => value(depth + 1));
    const o: Record<string, unknown> = {};
    for (let i = 0; i < Math.floor(rand() * 4); i++) o[str().slice(0, 20) || "k"] = value(depth + 1);
    return o;
  };
  return (name: CapabilityName): string => {
    const props = Object.keys(
      (INPUT_SCHEMAS[name] as unknown as { properties: Record<string, unknown> }).properties,
    );
    const kind = rand();
    if (kind < 0.08)
      return pick(["", "{", "}", "nul", "[", '"', '{"a":}', "{'a':1}", "\u0000", "{}{}", "1e999999"]);
    if (kind < 0.16) return JSON.stringify(value());
    if (kind < 0.22) return "[".repeat(2000) + "]".repeat(2000);
    // an object near the real shape, with some fields broken
    const o: Record<string, unknown> = {};
    for (const p of props)
      if (rand() < 0.6) o[p] = rand() < 0.5 ? value() : p === "app" || p === "name" ? app : str();
    if (rand() < 0.4) o[str().slice(0, 12) || "extra"] = value();
    if (rand() < 0.3) o.app = value();
    return JSON.stringify(o);
  };
}

test("2,000 randomized malformed bodies against every capability route give no 5xx and no crash", async (t) => {
  const { p, app, token } = t.context;
  const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 1_000_000);
  t.log(`seed ${seed} (FUZZ_SEED=${seed} replays it)`);
  const rand = prng(seed);
  const body = generator(rand, app);
  const statuses = new Map<number, number>();
  const names = CAPABILITIES.map((c) => c.name as CapabilityName);
  const bad: string[] = [];
  let sent = 0;
  const jobs: (() => Promise<void>)[] = [];
  for (let i = 0; sent < 2000; i++) {
    const name = names[i % names.length]!;
    const text = body(name);
    // only malformed bodies: skip the rare generated body that happens to be valid
    let valid = false;
    try {
      validateInput(name, JSON.parse(text));
      valid = true;
    } catch {
      /* malformed, as wanted */
    }
    if (valid) continue;
    sent++;
    const info = CAPABILITIES.find((c) => c.name === name)!;
    const onData = acceptedOn(info, "data") && (rand() < 0.5 || !acceptedOn(info, "control"));
    const base = onData ? p.dataUrl : p.controlUrl;
    const headers: Record<string, string> = onData ? { authorization: `Bearer ${token}` } : {};
    if (rand() < 0.05) headers["x-platform-actor-type"] = "";
    jobs.push(async () => {
      const r = await call(base, name, text, headers);
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      if (r.status >= 500 || r.body?.status !== "error" || typeof r.body?.error?.code !== "string")
        bad.push(`${name} ${r.status} ${text.slice(0, 200)} -> ${r.text.slice(0, 200)}`);
    });
  }
  // 16 at a time
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < jobs.length) await jobs[next++]!();
    }),
  );
  t.log(`statuses ${JSON.stringify([...statuses].sort())}`);
  t.is(sent, 2000);
  t.deepEqual(bad.slice(0, 5), [], `${bad.length} bad answers (replay: FUZZ_SEED=${seed})`);
  // still alive and working
  t.is((await get(p.controlUrl, "/healthz")).status, 200);
  const ok = await call(p.controlUrl, "set-secret", { app, name: "AFTER_FUZZ", value: "v" }, { ...ACTOR });
  t.is(ok.status, 200);
});
