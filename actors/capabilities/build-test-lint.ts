import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Handler } from "../context.js";
import { PlatformError } from "../../proto/errors.js";
import { newResourceId } from "../../proto/ids.js";
import type { Resource } from "../../proto/resources.js";
import { parseTestCounts } from "../findings.js";
import {
  packageScripts,
  requireApp,
  runNpm,
  scriptResult,
  sealedSecrets,
  timeoutMs,
  workspaceOf,
} from "./run-script.js";

/**
 * build, test and lint: run the app's own `npm run <script>` as long work in
 * its workspace (busy group `workspace`). Resources Build, TestRun and
 * CheckRun; events <Type>Started, then <Type>Succeeded or <Type>Failed with
 * the exit code and a summary read from the output.
 */
interface Kind {
  script: "build" | "test" | "lint";
  type: "Build" | "TestRun" | "CheckRun";
}

function scriptCapability(kind: Kind): Handler {
  return async (ctx) => {
    const app = await requireApp(ctx);
    const workspace = workspaceOf(ctx.workspaceRoot, app);
    const scripts = packageScripts(workspace);
    if (!scripts[kind.script])
      throw new PlatformError("precondition_failed", `the app's package.json has no "${kind.script}" script`);
    if (!existsSync(join(workspace, "node_modules")))
      throw new PlatformError(
        "precondition_failed",
        `dependencies are not installed; run: slipway install --app ${ctx.app}`,
      );
    const sealed = await sealedSecrets(ctx);
    const iso = ctx.now.toISOString();
    const command = `npm run ${kind.script}`;
    const resource: Resource = {
      type: kind.type,
      id: newResourceId(kind.type),
      app_id: ctx.app,
      status: "running",
      created_at: iso,
      updated_at: iso,
      script: kind.script,
      command,
      started_at: iso,
    };
    ctx.putResource(resource);
    ctx.log(resource.id, `${kind.type} started: ${command}`);
    ctx.emit(`${kind.type}Started`, resource, { script: kind.script, command });
    return {
      status: "running",
      resource,
      task: {
        onSuccess: `${kind.type}Succeeded`,
        onFailure: `${kind.type}Failed`,
        async run(t) {
          const run = await runNpm(t, {
            workspace,
            args: ["run", kind.script],
            sealed,
            timeoutMs: timeoutMs(kind.script),
          });
          const extra: Record<string, unknown> = {};
          if (kind.type === "TestRun") {
            const counts = parseTestCounts(run.outcome.tail);
            extra.passed = counts?.passed ?? null;
            extra.failed = counts?.failed ?? null;
            extra.skipped = counts?.skipped ?? null;
            extra.total = counts?.total ?? null;
          }
          if (kind.type === "CheckRun") extra.problems = run.findings.filter((f) => f.kind === "lint").length;
          return scriptResult(run, extra);
        },
      },
    };
  };
}

export const build = scriptCapability({ script: "build", type: "Build" });
export const test = scriptCapability({ script: "test", type: "TestRun" });
export const lint = scriptCapability({ script: "lint", type: "CheckRun" });
