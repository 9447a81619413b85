import test from "ava";
import { nextStep, parseFindings, parseTestCounts, summarize } from "../../actors/findings.js";

test("findings: tsc errors in both formats give file, line, column and code, paths relative to the workspace", (t) => {
  const f = parseFindings(
    [
      "src/app.ts(12,5): error TS2322: Type 'string' is not assignable to type 'number'.",
      "/w/shop/src/db.ts:3:1 - error TS2304: Cannot find name 'pg'.",
    ],
    "/w/shop",
  );
  t.deepEqual(f, [
    {
      kind: "tsc",
      file: "src/app.ts",
      line: 12,
      column: 5,
      code: "TS2322",
      message: "Type 'string' is not assignable to type 'number'.",
    },
    { kind: "tsc", file: "src/db.ts", line: 3, column: 1, code: "TS2304", message: "Cannot find name 'pg'." },
  ]);
  t.is(
    summarize(f, 2, "x"),
    "2 type errors; first: src/app.ts:12:5 TS2322: Type 'string' is not assignable to type 'number'. (exit 2)",
  );
  t.regex(nextStep("Build", f, "shop"), /src\/app\.ts:12:5 \(TS2322\).*slipway build --app shop/);
});

test("findings: node:test TAP names the innermost failing tests, and the counts are read", (t) => {
  const lines = [
    "TAP version 13",
    "# Subtest: math",
    "    not ok 1 - adds two and two wrongly",
    "    ok 2 - adds one",
    "not ok 1 - math",
    "not ok 2 - /w/shop/dist/test/other.test.js",
    "# tests 3",
    "# pass 1",
    "# fail 2",
    "# skipped 0",
  ];
  const f = parseFindings(lines);
  t.deepEqual(
    f.map((x) => x.test),
    ["adds two and two wrongly", "/w/shop/dist/test/other.test.js"],
    "a suite whose subtest failed is left out; a file that failed on its own is kept",
  );
  t.deepEqual(parseTestCounts(lines), { passed: 1, failed: 2, skipped: 0, total: 3 });
  t.is(parseTestCounts(["no counts here"]), undefined);
  t.deepEqual(parseTestCounts(["ℹ tests 4", "ℹ pass 4", "ℹ fail 0"]), {
    passed: 4,
    failed: 0,
    skipped: 0,
    total: 4,
  });
});

test("findings: eslint stylish rows carry the file, line and rule id", (t) => {
  const f = parseFindings(
    [
      "",
      "/w/shop/src/lint-bad.ts",
      "  2:21  error  Unexpected any. Specify a different type  @typescript-eslint/no-explicit-any",
      "  5:7   warning  'x' is assigned a value but never used  @typescript-eslint/no-unused-vars",
      "",
      "✖ 2 problems (1 error, 1 warning)",
    ],
    "/w/shop",
  );
  t.deepEqual(
    f.map((x) => [x.file, x.line, x.rule]),
    [
      ["src/lint-bad.ts", 2, "@typescript-eslint/no-explicit-any"],
      ["src/lint-bad.ts", 5, "@typescript-eslint/no-unused-vars"],
    ],
  );
});

test("findings: npm error codes, a missing script and a timeout", (t) => {
  const f = parseFindings([
    "npm error code ERESOLVE",
    "npm ERR! code E404",
    'npm error Missing script: "build"',
    "[slipway] timed out after 600 s; stopping",
  ]);
  t.deepEqual(
    f.map((x) => [x.kind, x.code]),
    [
      ["npm", "ERESOLVE"],
      ["npm", "E404"],
      ["npm", "missing_script"],
      ["timeout", undefined],
    ],
  );
  t.regex(nextStep("Build", f, "shop"), /time limit/);
  t.regex(nextStep("DependencyInstall", f.slice(0, 1), "shop"), /conflicting dependency versions/);
});
