import { performance } from "node:perf_hooks";
import { compileRules, evaluate, type PolicyRule } from "../proto/policies.js";
import {
  controlHeaders,
  exitWhenDone,
  machineInfo,
  makeProgress,
  post,
  runMain,
  startBenchPlatform,
  summary,
  table,
} from "./common.js";

const json = process.argv.includes("--json");
const progress = makeProgress("bench:policies", Date.now());
const EVALS = 200_000;
const SERIAL_CALLS = 600;
const PARALLEL_SECONDS = 5;
const IN_FLIGHT = 16;

/** 100 rules of every kind; none matches capability:set-secret but the last allow. */
function hundredRules(): PolicyRule[] {
  const rules: PolicyRule[] = [];
  for (let i = 0; i < 96; i++) {
    const kind = i % 3;
    rules.push({
      id: `r${i}`,
      effect: (["deny", "stage", "allow"] as const)[i % 3]!,
      action:
        kind === 0 ? `mcp:tool_${i}_*` : kind === 1 ? `capability:other-${i}` : `route:POST /auth/x${i}/*`,
      ...(i % 4 === 0 ? { owner: `usr_owner${i}` } : {}),
      ...(i % 5 === 0 ? { high_risk: true } : {}),
    });
  }
  rules.push({ id: "stage-refunds", effect: "stage", action: "mcp:refund_*", high_risk: true });
  rules.push({ id: "deny-deletes", effect: "deny", action: "route:DELETE /auth/users/*", owner: "usr_x" });
  rules.push({ id: "owner-agent", effect: "stage", action: "capability:agent-run", owner: "usr_y" });
  rules.push({ id: "allow-secrets", effect: "allow", action: "capability:set-*" });
  return rules;
}

function evaluationCost(): { rules: number; evals: number; usPerEval: number } {
  const compiled = compileRules(hundredRules());
  const actions: Array<[string, string | undefined, boolean]> = [
    ["capability:set-secret", undefined, false],
    ["mcp:refund_order", "usr_a", true],
    ["route:DELETE /auth/users/usr_x", "usr_x", false],
    ["capability:agent-run", "usr_z", false],
  ];
  const run = (i: number) => {
    const [action, owner, risk] = actions[i % 4]!;
    return evaluate(compiled, action, owner, risk).decision.length;
  };
  let sink = 0;
  for (let i = 0; i < 20_000; i++) sink += run(i); // warm
  const t0 = performance.now();
  for (let i = 0; i < EVALS; i++) sink += run(i);
  const ms = performance.now() - t0;
  if (sink === 0) throw new Error("no evaluation ran");
  return { rules: compiled.length, evals: EVALS, usPerEval: (ms * 1000) / EVALS };
}

interface CallPhase {
  serial: { p50: number; p99: number };
  parallel: { rate: number; p50: number; p99: number; errors: number };
}

async function calls(data: string, token: string, app: string): Promise<CallPhase> {
  const one = async (n: number) => {
    const t0 = performance.now();
    const r = await fetch(`${data}/capabilities/set-secret`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: `Bearer ${token}`,
        "x-platform-actor-type": "app",
        "x-platform-actor-id": "bench",
      },
      body: JSON.stringify({ app, name: `K${n % 50}`, value: `v-${n}` }),
    });
    await r.arrayBuffer();
    return { ms: performance.now() - t0, ok: r.status === 200 };
  };
  const serial: number[] = [];
  for (let i = 0; i < SERIAL_CALLS; i++) {
    const r = await one(i);
    if (!r.ok) throw new Error(`set-secret failed at call ${i}`);
    serial.push(r.ms);
  }
  const lat: number[] = [];
  let errors = 0;
  let n = 0;
  const t0 = performance.now();
  const end = t0 + PARALLEL_SECONDS * 1000;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (performance.now() < end && n < 100_000) {
        const r = await one(n++);
        if (r.ok) lat.push(r.ms);
        else errors++;
      }
    }),
  );
  const s = summary(serial.sort((a, b) => a - b));
  const p = summary(lat.sort((a, b) => a - b));
  return {
    serial: { p50: s.p50, p99: s.p99 },
    parallel: { rate: lat.length / ((performance.now() - t0) / 1000), p50: p.p50, p99: p.p99, errors },
  };
}

async function main(): Promise<void> {
  progress(`evaluate(): 100 rules, ${EVALS.toLocaleString("en-US")} evaluations`);
  const ev = evaluationCost();
  const bp = await startBenchPlatform("pol", { SLIPWAY_RATE_LIMIT: "off" });
  try {
    const { control, data } = bp;
    const apps: Record<string, string> = {};
    for (const name of ["polbench-none", "polbench-rules"]) {
      const init = await post(control, "initialize-app", { name });
      if (init.status !== 200) throw new Error(`initialize-app: ${JSON.stringify(init.body)}`);
      apps[name] = init.body.result.token as string;
    }
    for (const rule of hundredRules()) {
      const r = await fetch(`${control.url}/policies`, {
        method: "POST",
        headers: {
          ...controlHeaders(control.token),
          "content-type": "application/json",
          "x-platform-actor-type": "cli",
          "x-platform-actor-id": "bench",
        },
        body: JSON.stringify({ app: "polbench-rules", ...rule }),
      });
      if (r.status !== 200) throw new Error(`POST /policies ${r.status}: ${await r.text()}`);
    }
    await new Promise((r) => setTimeout(r, 500)); // the data gateway's watch holds them
    // a warm-up, then each app twice, alternating, the better of each kept: the order does not decide
    progress("warm-up: set-secret without rules");
    await calls(data, apps["polbench-none"]!, "polbench-none");
    const better = (a: CallPhase, b: CallPhase) => (a.parallel.rate >= b.parallel.rate ? a : b);
    let none: CallPhase | undefined;
    let ruled: CallPhase | undefined;
    for (let round = 1; round <= 2; round++) {
      progress(`round ${round}: without rules, ${SERIAL_CALLS} one at a time, then ${IN_FLIGHT} in flight`);
      const n = await calls(data, apps["polbench-none"]!, "polbench-none");
      progress(`round ${round}: with 100 rules (evaluated, allowed, authz.decision written)`);
      const r = await calls(data, apps["polbench-rules"]!, "polbench-rules");
      none = none ? better(none, n) : n;
      ruled = ruled ? better(ruled, r) : r;
    }
    if (!none || !ruled) throw new Error("no round ran");
    // the rules were evaluated: their decisions are recorded
    const evs = await fetch(`${data}/app-events?type=authz.decision&limit=5`, {
      headers: { authorization: `Bearer ${apps["polbench-rules"]}` },
    }).then((r) => r.json() as Promise<{ items?: Array<{ data: { rule: string | null } }> }>);
    if (!evs.items?.length || evs.items[0]!.data.rule !== "allow-secrets")
      throw new Error(
        `the app with rules recorded no authz.decision of allow-secrets: ${JSON.stringify(evs)}`,
      );
    const report = { machine: machineInfo(), evaluation: ev, without_rules: none, with_100_rules: ruled };
    if (json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else
      process.stdout.write(
        `evaluate(): ${ev.rules} rules, ${ev.usPerEval.toFixed(2)} µs per evaluation (${ev.evals.toLocaleString("en-US")} in this process)\n\n${table(
          [
            [
              "set-secret on the data plane",
              "one at a time p50 ms",
              "p99 ms",
              `${IN_FLIGHT} in flight /s`,
              "p50 ms",
              "p99 ms",
              "errors",
            ],
            ...(
              [
                ["app without rules (not evaluated)", none],
                ["app with 100 rules (evaluated, recorded)", ruled],
              ] as const
            ).map(([label, c]) => [
              label,
              c.serial.p50.toFixed(2),
              c.serial.p99.toFixed(2),
              Math.round(c.parallel.rate).toLocaleString("en-US"),
              c.parallel.p50.toFixed(2),
              c.parallel.p99.toFixed(2),
              String(c.parallel.errors),
            ]),
          ],
        )}\nwith 100 rules a call keeps ${((ruled.parallel.rate / none.parallel.rate) * 100).toFixed(0)} % of the rate; one at a time it costs ${(ruled.serial.p50 - none.serial.p50).toFixed(2)} ms more at p50\n`,
      );
  } finally {
    await bp.close();
  }
  exitWhenDone(progress);
}

runMain(main);
