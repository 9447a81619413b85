import test from "ava";
import { Masker, runProcess, toolEnv } from "../../effects/process.js";
import { tempDir } from "../helpers/infra.js";

test("masker: every occurrence of every value, longest first, multi-line values line by line, short values left alone", (t) => {
  const m = new Masker(["hunter22", "hunter22-extended", "abc", "line-one\nline-two"]);
  t.is(m.mask("a hunter22 b hunter22-extended"), "a *** b ***");
  t.is(m.mask("abc stays"), "abc stays");
  t.is(m.mask("x line-two y"), "x *** y");
  t.true(new Masker([]).empty);
});

test("runProcess: lines arrive masked and in order, with the exit code", async (t) => {
  const lines: string[] = [];
  const r = await runProcess({
    cwd: tempDir(),
    command: process.execPath,
    args: ["-e", "console.log('one ' + process.env.S); console.error('two'); process.exit(3)"],
    env: { S: "the-secret-value" },
    timeoutMs: 10_000,
    masker: new Masker(["the-secret-value"]),
    onLine: (stream, line) => {
      lines.push(`${stream}:${line}`);
    },
  });
  t.is(r.exit_code, 3);
  t.false(r.timed_out);
  t.true(lines.includes("stdout:one ***"));
  t.true(lines.includes("stderr:two"));
  t.false(r.tail.join("\n").includes("the-secret-value"));
});

test("runProcess: a timeout kills the whole process group", async (t) => {
  const r = await runProcess({
    cwd: tempDir(),
    command: "sh",
    args: ["-c", `${process.execPath} -e "setInterval(() => {}, 1000)" & sleep 30`],
    env: { PATH: process.env.PATH ?? "" },
    timeoutMs: 500,
    masker: new Masker([]),
    onLine: () => {},
  });
  t.true(r.timed_out);
  t.true(r.duration_ms < 5000);
  t.true(r.tail.some((l) => l.includes("timed out")));
});

test("toolEnv: the platform's own secrets never reach app tooling", (t) => {
  const env = toolEnv(
    "/w/app",
    { APP_SECRET: "x" },
    {
      PATH: "/usr/bin",
      HOME: "/root",
      SLIPWAY_VAULT_KEY: "k",
      SLIPWAY_CONTROL_TOKEN: "c",
      ANTHROPIC_API_KEY: "a",
      npm_config_registry: "http://registry.invalid/",
      npm_config__authToken: "t",
    },
  );
  t.is(env.SLIPWAY_VAULT_KEY, undefined);
  t.is(env.SLIPWAY_CONTROL_TOKEN, undefined);
  t.is(env.ANTHROPIC_API_KEY, undefined);
  t.is(env.npm_config__authToken, undefined);
  t.is(env.npm_config_registry, "http://registry.invalid/");
  t.is(env.APP_SECRET, "x");
  t.true(env.PATH!.startsWith("/w/app/node_modules/.bin"));
});
