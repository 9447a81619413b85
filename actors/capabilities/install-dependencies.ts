import { existsSync } from "node:fs";
import { join } from "node:path";
import { defineHandler } from "../context.js";
import { npmTask } from "../tasks/npm.js";
import { newResourceId } from "../../proto/ids.js";
import type { Resource } from "../../proto/resources.js";
import { packageScripts, requireApp, sealedSecrets, workspaceOf } from "./workspace.js";

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
    const workspace = workspaceOf(ctx.workspaceRoot, app);
    packageScripts(workspace); // 422 without a package.json
    const lockfile =
      existsSync(join(workspace, "package-lock.json")) || existsSync(join(workspace, "npm-shrinkwrap.json"));
    const args = lockfile ? ["ci", "--no-audit", "--no-fund"] : ["install", "--no-audit", "--no-fund"];
    const sealed = await sealedSecrets(ctx);
    const iso = ctx.now.toISOString();
    const resource: Resource = {
      type: "DependencyInstall",
      id: newResourceId("DependencyInstall"),
      app_id: ctx.app,
      status: "running",
      created_at: iso,
      updated_at: iso,
      command: `npm ${args[0]}`,
      lockfile,
      started_at: iso,
    };
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
        workspace,
        args,
        sealed,
        kind: "install",
        onSuccess: "DependenciesInstalled",
        onFailure: "DependenciesInstalled",
        extra: { command: `npm ${args[0]}`, lockfile },
        afterSuccess: () => ({ lockfile_written: existsSync(join(workspace, "package-lock.json")) }),
      }),
    };
  },
});
