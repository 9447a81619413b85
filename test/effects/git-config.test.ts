import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { commitAll, git } from "../../effects/git.js";
import { tempDir } from "../helpers/infra.js";

test("a workspace's own .git/config cannot make the platform's git run a program (fsmonitor, hooks path, signing)", async (t) => {
  const ws = tempDir("slipway-gitcfg-");
  writeFileSync(join(ws, "a.txt"), "one\n");
  await commitAll(ws, "first");
  const marker = join(ws, "..", `ran-${Date.now()}`);
  const hooks = join(ws, "..", `hooks-${Date.now()}`);
  mkdirSync(hooks);
  writeFileSync(join(hooks, "pre-commit"), `#!/bin/sh\ntouch ${marker}.hook\n`, { mode: 0o755 });
  // what app code in a dev container may write into the repository's config
  const cfg = join(ws, ".git", "config");
  execFileSync("git", ["config", "-f", cfg, "core.fsmonitor", `touch ${marker}.fsmonitor; echo`]);
  execFileSync("git", ["config", "-f", cfg, "core.hooksPath", hooks]);
  execFileSync("git", ["config", "-f", cfg, "commit.gpgsign", "true"]);
  execFileSync("git", ["config", "-f", cfg, "gpg.program", `sh -c 'touch ${marker}.gpg'`]);
  writeFileSync(join(ws, "a.txt"), "two\n");
  await git(ws, ["status", "--porcelain"]);
  await commitAll(ws, "second");
  for (const what of ["fsmonitor", "hook", "gpg"])
    t.false(existsSync(`${marker}.${what}`), `the repository's config ran its ${what} program`);
  t.is((await git(ws, ["log", "--format=%s", "-1"])).stdout.trim(), "second");
});
