import { isAbsolute, relative } from "node:path";

/**
 * Findings read from the output of an app's tooling: TypeScript compiler
 * errors, failing tests, lint rule violations and npm error codes. Used for
 * the one-line summary of a failed Build, TestRun, CheckRun or
 * DependencyInstall, and by explain-failure. Pure functions over log lines.
 */

/** One thing the tooling reported. */
export interface Finding {
  kind: "tsc" | "test" | "lint" | "npm" | "timeout";
  message: string;
  /** Workspace-relative path, when the tool named a file. */
  file?: string;
  line?: number;
  column?: number;
  /** Compiler code (TS2322) or npm error code (ERESOLVE). */
  code?: string;
  /** Lint rule id. */
  rule?: string;
  /** Failing test name. */
  test?: string;
}

/** Counts a test runner printed (node:test TAP or spec reporter). */
export interface TestCounts {
  passed: number;
  failed: number;
  skipped: number;
  total: number;
}

const MAX_FINDINGS = 100;

function relPath(file: string, workspace?: string): string {
  const f = file.trim();
  if (workspace && isAbsolute(f)) {
    const r = relative(workspace, f);
    if (!r.startsWith("..")) return r;
  }
  return f;
}

// src/app.ts(12,5): error TS2322: Type ...   |   src/app.ts:12:5 - error TS2322: Type ...
const TSC_PAREN = /^(.+?)\((\d+),(\d+)\): error (TS\d+): (.*)$/;
const TSC_PRETTY = /^(.+?):(\d+):(\d+) - error (TS\d+): (.*)$/;
// node:test TAP: "not ok 2 - adds numbers" (indented for subtests)
const TAP_NOT_OK = /^(\s*)not ok \d+ - (.+?)(?: # .*)?$/;
// node:test spec reporter: "✖ adds numbers (1.2ms)"
const SPEC_FAIL = /^(\s*)✖ (.+?) \([\d.]+m?s\)\s*$/;
// eslint stylish: "  3:7  error  'x' is assigned ...  @typescript-eslint/no-unused-vars"
const ESLINT_ROW = /^\s+(\d+):(\d+)\s+(error|warning)\s+(.+?)\s{2,}(\S+)\s*$/;
// eslint unix/compact: "src/a.ts:3:7: message [Error/rule]"
const ESLINT_UNIX = /^(.+?):(\d+):(\d+): (.+) \[(?:Error|Warning)\/(\S+)\]$/;
// npm: "npm error code ERESOLVE" / "npm ERR! code E404"
const NPM_CODE = /^npm (?:error|ERR!) code (\S+)/;
const NPM_MISSING_SCRIPT = /^npm (?:error|ERR!) Missing script: "?([^"]+)"?/;

/** Findings in a tool's output lines, deduplicated, at most 100. */
export function parseFindings(lines: readonly string[], workspace?: string): Finding[] {
  const out: Finding[] = [];
  const seen = new Set<string>();
  const add = (f: Finding) => {
    const key = JSON.stringify(f);
    if (seen.has(key) || out.length >= MAX_FINDINGS) return;
    seen.add(key);
    out.push(f);
  };
  let eslintFile: string | undefined;
  const failingTests: Array<{ indent: number; name: string }> = [];
  for (const raw of lines) {
    const line = raw.replace(/\s+$/, "");
    let m = TSC_PAREN.exec(line) ?? TSC_PRETTY.exec(line);
    if (m) {
      add({
        kind: "tsc",
        file: relPath(m[1]!, workspace),
        line: Number(m[2]),
        column: Number(m[3]),
        code: m[4]!,
        message: m[5]!,
      });
      continue;
    }
    m = TAP_NOT_OK.exec(line) ?? SPEC_FAIL.exec(line);
    if (m) {
      failingTests.push({ indent: m[1]!.length, name: m[2]!.trim() });
      continue;
    }
    m = ESLINT_UNIX.exec(line);
    if (m) {
      add({
        kind: "lint",
        file: relPath(m[1]!, workspace),
        line: Number(m[2]),
        column: Number(m[3]),
        rule: m[5]!,
        message: m[4]!,
      });
      continue;
    }
    m = ESLINT_ROW.exec(line);
    if (m && eslintFile) {
      add({
        kind: "lint",
        file: eslintFile,
        line: Number(m[1]),
        column: Number(m[2]),
        rule: m[5]!,
        message: m[4]!,
      });
      continue;
    }
    if (/^(\/|[A-Za-z]:\\|\.{0,2}\/?[\w@.-]+\/)\S*\.[cm]?[jt]sx?$/.test(line)) {
      eslintFile = relPath(line, workspace);
      continue;
    }
    m = NPM_CODE.exec(line);
    if (m) {
      add({ kind: "npm", code: m[1]!, message: `npm error ${m[1]}` });
      continue;
    }
    m = NPM_MISSING_SCRIPT.exec(line);
    if (m) add({ kind: "npm", code: "missing_script", message: `missing script: ${m[1]}` });
    if (/^\[slipway\] timed out/.test(line))
      add({ kind: "timeout", message: line.replace(/^\[slipway\] /, "") });
  }
  // a failing subtest also fails its parent suite and its file (printed after it,
  // less indented): report only the innermost failures
  for (let k = 0; k < failingTests.length; k++) {
    const { indent, name } = failingTests[k]!;
    let parent = false;
    for (let j = k - 1; j >= 0 && failingTests[j]!.indent > indent; j--) parent = true;
    if (!parent) add({ kind: "test", test: name, message: `test failed: ${name}` });
  }
  return out;
}

/** Test counts printed by node:test (`# pass 3` / `ℹ pass 3`), or undefined when none were printed. */
export function parseTestCounts(lines: readonly string[]): TestCounts | undefined {
  let passed: number | undefined;
  let failed: number | undefined;
  let skipped = 0;
  let total: number | undefined;
  for (const l of lines) {
    const m = /^(?:# |ℹ )(tests|pass|fail|skipped|todo) (\d+)\s*$/.exec(l.trim());
    if (!m) continue;
    const n = Number(m[2]);
    if (m[1] === "tests") total = n;
    else if (m[1] === "pass") passed = n;
    else if (m[1] === "fail") failed = n;
    else skipped += n;
  }
  if (passed === undefined && failed === undefined) return undefined;
  const p = passed ?? 0;
  const f = failed ?? 0;
  return { passed: p, failed: f, skipped, total: total ?? p + f + skipped };
}

function where(f: Finding): string {
  if (!f.file) return "";
  return `${f.file}${f.line !== undefined ? `:${f.line}` : ""}${f.column !== undefined ? `:${f.column}` : ""}`;
}

/** One line saying what a finding is, e.g. `src/app.ts:12:5 TS2322 Type 'x' is not ...`. */
export function describeFinding(f: Finding): string {
  switch (f.kind) {
    case "tsc":
      return `${where(f)} ${f.code}: ${f.message}`;
    case "lint":
      return `${where(f)} ${f.rule}: ${f.message}`;
    case "test":
      return `failing test: ${f.test}`;
    case "npm":
      return f.message;
    default:
      return f.message;
  }
}

/** A one-line summary of a failed run, from its findings and exit code. */
export function summarize(findings: readonly Finding[], exitCode: number | null, fallback: string): string {
  if (findings.length === 0) return fallback;
  const count = (k: Finding["kind"]) => findings.filter((f) => f.kind === k).length;
  const parts: string[] = [];
  const tsc = count("tsc");
  const tests = count("test");
  const lint = count("lint");
  if (tsc) parts.push(`${tsc} type error${tsc > 1 ? "s" : ""}`);
  if (tests) parts.push(`${tests} failing test${tests > 1 ? "s" : ""}`);
  if (lint) parts.push(`${lint} lint problem${lint > 1 ? "s" : ""}`);
  const npm = findings.filter((f) => f.kind === "npm");
  if (npm.length) parts.push(npm.map((f) => f.message).join(", "));
  if (count("timeout")) parts.push("timed out");
  const first = findings.find((f) => f.kind !== "npm" && f.kind !== "timeout");
  return `${parts.join(", ")}${first ? `; first: ${describeFinding(first)}` : ""}${
    exitCode !== null ? ` (exit ${exitCode})` : ""
  }`;
}

/** What to do next about a failed run, by what failed. */
export function nextStep(resourceType: string, findings: readonly Finding[], app: string): string {
  const first = findings.find((f) => f.kind !== "npm" && f.kind !== "timeout");
  const timeout = findings.some((f) => f.kind === "timeout");
  const npm = findings.find((f) => f.kind === "npm");
  if (timeout)
    return `the run hit its time limit; look for a hanging step in the log (slipway logs <id>) and run it again`;
  if (first?.kind === "tsc")
    return `fix the type error at ${where(first)} (${first.code}), then run: slipway build --app ${app}`;
  if (first?.kind === "test")
    return `fix the failing test "${first.test}" or the code it tests, then run: slipway test --app ${app}`;
  if (first?.kind === "lint")
    return `fix ${first.rule} at ${where(first)}, then run: slipway lint --app ${app}`;
  if (npm?.code === "missing_script")
    return `add the missing script to package.json, then run the step again`;
  if (npm?.code === "ERESOLVE")
    return `resolve the conflicting dependency versions in package.json, then run: slipway install --app ${app}`;
  if (npm?.code === "E404")
    return `a dependency does not exist in the registry: check its name and version in package.json`;
  if (npm?.code === "ENOTCACHED")
    return `npm runs offline and a package is not in its cache: let the platform reach the npm registry (or fill the cache), then run: slipway install --app ${app}`;
  if (npm?.code === "EUSAGE")
    return `package-lock.json is out of date with package.json: refresh the lockfile, then run: slipway install --app ${app}`;
  if (npm)
    return `npm failed with ${npm.code}; read the log (slipway logs <id>) and run: slipway install --app ${app}`;
  if (resourceType === "DependencyInstall") return `read the log and run: slipway install --app ${app}`;
  return `read the log (slipway logs <id>) for the first error, fix it, then run the step again`;
}
