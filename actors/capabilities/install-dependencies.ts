import { defineHandler } from "../context.js";
import { npmTask } from "../tasks/npm.js";
import type { Resource } from "../../proto/mod.js";
import { packageScripts, requireApp, sealedSecrets } from "./workspace.js";

/**
 * install-dependencies: `npm ci` when the workspace has a lockfile, else
 * `npm install`, as long work (busy group `workspace`). Resource
 * DependencyInstall; DependenciesInstalled when it ends, with `data.status`
 * succeeded or failed (the closed event catalogue has no failure event of its
 * own); a failed resource carries the exit code and summary for explain-failure.
 */
export const installDependencies = defineHandler("install-dependencies", {
  handle: async (ctx) => {
    const app = await requireApp(ctx);
    const workspace = ctx.workspace(app);
    await packageScripts(workspace); // 422 without a package.json
    const lockfile = workspace.exists("package-lock.json") || workspace.exists("npm-shrinkwrap.json");
    const args = lockfile ? ["ci", "--no-audit", "--no-fund"] : ["install", "--no-audit", "--no-fund"];
    const sealed = await sealedSecrets(ctx);
    const iso = ctx.now.toISOString();
    const resource: Resource = ctx.resource("DependencyInstall", "running", {
      command: `npm ${args[0]}`,
      lockfile,
      started_at: iso,
    });
    ctx.putResource(resource);
    ctx.log(
      resource.id,
      `installing dependencies: npm ${args[0]} (${lockfile ? "lockfile found" : "no lockfile"})`,
    );
    return {
      status: "running",
      resource,
      // the closed catalogue has no failure event for an install: DependenciesInstalled ends
      // every install, with data.status "succeeded" or "failed" (docs/events.md)
      task: npmTask({
        workspace: workspace.path,
        args,
        sealed,
        kind: "install",
        onSuccess: "DependenciesInstalled",
        onFailure: "DependenciesInstalled",
        extra: { command: `npm ${args[0]}`, lockfile },
        afterSuccess: () => ({ lockfile_written: workspace.exists("package-lock.json") }),
      }),
    };
  },
});
