import test from "ava";
import { playLongWork, runAgainst, startFakePlatform } from "./fake-platform.js";

/** `slipway release`: the phases as a table, verify's assertions under them, the exit code (fake platform). */

const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
const PHASES = [
  { name: "assess", status: "succeeded", started_at: at(0), ended_at: at(1), detail: "commit abc" },
  { name: "publish", status: "succeeded", started_at: at(1), ended_at: at(31), detail: "sha256:1" },
  { name: "repin", status: "reverted", started_at: at(31), ended_at: at(40), detail: "back to sha256:0" },
  {
    name: "deploy",
    status: "reverted",
    started_at: at(32),
    ended_at: at(40),
    detail: "production is back on sha256:0",
  },
  {
    name: "verify",
    status: "failed",
    started_at: at(38),
    ended_at: at(39),
    detail: "api /api/open: expected 401, got 200",
  },
];

test("cli: release prints its phases and verify's assertions as tables and exits 1 when it failed", async (t) => {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  playLongWork(p, {
    type: "Release",
    id: "rel_1",
    end: "failed",
    endFields: {
      phase: "verify",
      phases: PHASES,
      verification: {
        ok: false,
        assertions: [
          { name: "health", expected: "GET /health -> 200", actual: "200", ok: true, ms: 2 },
          { name: "api /api/open", expected: "GET /api/open -> 401", actual: "200", ok: false, ms: 3 },
        ],
      },
    },
  });
  const r = await runAgainst(p, ["release", "--app", "shop"]);
  t.is(r.code, 1, r.stderr);
  const lines = r.stdout.split("\n");
  const head = lines.findIndex((l) => /^ {4}phase +status +took +detail$/.test(l));
  t.true(head > 0, r.stdout);
  t.regex(lines[head + 2]!, /^ {4}publish +succeeded +30\.0 s +sha256:1$/);
  t.regex(lines[head + 5]!, /^ {4}verify +FAILED +1\.0 s +api \/api\/open: expected 401, got 200$/);
  t.true(lines.includes("    1 of 2 assertions failed: api /api/open"), r.stdout);
  t.false(r.stdout.includes("name=assess"), "the table replaces the generic list");
});
