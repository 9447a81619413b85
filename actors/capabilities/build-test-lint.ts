import { defineHandler, type HandlerContext } from "../context.js";
import { npmTask } from "../tasks/npm.js";
import { PlatformError, type Resource } from "../../proto/mod.js";
import { packageScripts, requireApp, sealedSecrets } from "./workspace.js";

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

async function runScript(ctx: HandlerContext, kind: Kind) {
  const app = await requireApp(ctx);
  const workspace = ctx.workspace(app);
  const scripts = await packageScripts(workspace);
  if (!scripts[kind.script])
    throw new PlatformError("precondition_failed", `the app's package.json has no "${kind.script}" script`);
  if (!workspace.exists("node_modules"))
    throw new PlatformError(
      "precondition_failed",
      `dependencies are not installed; run: slipway install --app ${ctx.app}`,
    );
  const iso = ctx.now.toISOString();
  const command = `npm run ${kind.script}`;
  const resource: Resource = ctx.resource(kind.type, "running", {
    script: kind.script,
    command,
    started_at: iso,
  });
  ctx.putResource(resource);
  ctx.log(resource.id, `${kind.type} started: ${command}`);
  ctx.emit(`${kind.type}Started`, resource, { script: kind.script, command });
  return {
    status: "running" as const,
    resource,
    task: npmTask({
      workspace: workspace.path,
      args: ["run", kind.script],
      sealed: await sealedSecrets(ctx),
      kind: kind.script,
      onSuccess: `${kind.type}Succeeded`,
      onFailure: `${kind.type}Failed`,
    }),
  };
}

export const build = defineHandler("build", {
  handle: (ctx) => runScript(ctx, { script: "build", type: "Build" }),
});
export const test = defineHandler("test", {
  handle: (ctx) => runScript(ctx, { script: "test", type: "TestRun" }),
});
export const lint = defineHandler("lint", {
  handle: (ctx) => runScript(ctx, { script: "lint", type: "CheckRun" }),
});
