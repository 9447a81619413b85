import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import test from "ava";
import { REPO_ROOT } from "../helpers/repo.js";

/**
 * The rules that keep a handler a decision (issue 11): the type of its context
 * refuses the bus, the engine and writes; the linter refuses imports of store/,
 * effects/, the runtime's internals, files, processes and network; folders
 * import each other only through their mod.ts. Each rule is shown firing on a
 * handler that breaks it, under the repository's own biome.json and tsconfig.
 */

const root = REPO_ROOT;
const bin = (name: string) => join(root, "node_modules", ".bin", name);

interface Diagnostic {
  message: string;
  category: string;
  location: { path: string; start: { line: number } };
}

/** Lints `files` (path -> text) laid out under a temp root with the repository's biome.json. */
function lint(files: Record<string, string>): Diagnostic[] {
  const dir = mkdtempSync(join(tmpdir(), "slipway-lint-"));
  try {
    const config = JSON.parse(readFileSync(join(root, "biome.json"), "utf8")) as Record<string, unknown>;
    delete config.$schema;
    writeFileSync(join(dir, "biome.json"), JSON.stringify(config));
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), text);
    }
    const r = spawnSync(bin("biome"), ["lint", "--reporter=json", ...Object.keys(files)], {
      cwd: dir,
      encoding: "utf8",
    });
    const report = JSON.parse(r.stdout) as { diagnostics: Diagnostic[] };
    return report.diagnostics;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const REACHING = [
  'import { openBus } from "../../store/mod.js";',
  'import { ContainerRuntime } from "../../effects/mod.js";',
  'import { readFileSync } from "node:fs";',
  'import { spawn } from "node:child_process";',
  'import Docker from "dockerode";',
  'import { AppActor } from "../app-actor.js";',
  'import { SideEffectRunner } from "../side-effects.js";',
  "export const reach = [openBus, ContainerRuntime, readFileSync, spawn, Docker, AppActor, SideEffectRunner];",
  "",
].join("\n");

test("lint: a handler file that imports store/, effects/, fs, child_process, dockerode or the runtime's internals is refused, line by line", (t) => {
  const found = lint({ "actors/capabilities/reaching.ts": REACHING });
  const refused = found
    .filter((d) => d.category === "lint/style/noRestrictedImports")
    .map((d) => d.location.start.line)
    .sort((a, b) => a - b);
  t.deepEqual(refused, [1, 2, 3, 4, 5, 6, 7], JSON.stringify(found, null, 1));
  t.true(found.some((d) => /only decides/.test(d.message)));
  t.true(found.some((d) => /HandlerContext/.test(d.message)));
});

test("lint: the same imports are allowed where outside work belongs (a task body)", (t) => {
  const found = lint({ "actors/tasks/reaching.ts": REACHING });
  // a task may use effects/ and the runtime; only deep imports across folders are refused
  t.deepEqual(
    found.filter((d) => d.category === "lint/style/noRestrictedImports"),
    [],
    JSON.stringify(found, null, 1),
  );
});

test("lint: every handler of the repository passes the handler rules", (t) => {
  const dir = join(root, "actors", "capabilities");
  const files = Object.fromEntries(
    readdirSync(dir)
      .filter((f) => f.endsWith(".ts"))
      .map((f) => [`actors/capabilities/${f}`, readFileSync(join(dir, f), "utf8")]),
  );
  t.true(Object.keys(files).length >= 10);
  t.deepEqual(
    lint(files).filter((d) => d.category === "lint/style/noRestrictedImports"),
    [],
  );
});

test("lint: a deep import across folders is refused; the folder's mod.ts is the way in", (t) => {
  const found = lint({
    "gateway/deep.ts": [
      'import { PlatformError } from "../proto/errors.js";',
      'import { openBus } from "../store/bus.js";',
      'import { isPlatformError } from "../proto/mod.js";',
      'import { startNode } from "../actors/mod.js";',
      "export const x = [PlatformError, openBus, isPlatformError, startNode];",
      "",
    ].join("\n"),
  });
  const lines = found.map((d) => `${d.location.start.line}: ${d.message}`).sort();
  t.is(lines.length, 3, lines.join("\n"));
  t.regex(lines[0]!, /^1: .*mod\.js/);
  t.regex(lines[1]!, /^2: .*mod\.js/);
  t.regex(lines[2]!, /^4: .*only through NATS/);
});

test("lint: no handler keeps state at module level (no top-level let or var, no Map or Set that is not typed read-only)", (t) => {
  const dir = join(root, "actors", "capabilities");
  for (const f of readdirSync(dir).filter((n) => n.endsWith(".ts"))) {
    const text = readFileSync(join(dir, f), "utf8");
    const offending = text
      .split("\n")
      .filter(
        (l) =>
          /^(export\s+)?(let|var)\s/.test(l) ||
          /^(export\s+)?const\s+\w+\s*=\s*new\s+(Map|Set|WeakMap)\b/.test(l),
      );
    t.deepEqual(offending, [], `actors/capabilities/${f}`);
  }
});

test("types: a handler that reaches for the bus, the engine, a sealed field or a write does not compile", (t) => {
  const fixture = join(root, "test", "lint", "fixtures");
  const source = readFileSync(join(fixture, "reaching-handler.ts"), "utf8").split("\n");
  const expected = source.flatMap((l, i) => (/\/\/ REFUSED/.test(l) ? [i + 1] : []));
  t.is(expected.length, 5);
  // the fixture's tsconfig extends the repository's and emits nothing
  const r = spawnSync(bin("tsc"), ["-p", join(fixture, "tsconfig.json"), "--pretty", "false"], {
    cwd: root,
    encoding: "utf8",
  });
  const errors = r.stdout
    .split("\n")
    .map((l) => /reaching-handler\.ts\((\d+),\d+\): error (TS\d+)/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null);
  t.not(r.status, 0);
  t.deepEqual(
    [...new Set(errors.map((m) => Number(m[1])))].sort((a, b) => a - b),
    expected,
    r.stdout,
  );
  t.true(r.stdout.includes("Property 'bus' does not exist on type 'HandlerContext'"));
  t.true(r.stdout.includes("Property 'value' does not exist on type 'HandlerInput<\"set-secret\">'"));
});
