import type { HandlerContext, Workspace } from "../context.js";
import { PlatformError, type AppRecord, type VaultEntry } from "../../proto/mod.js";

/**
 * What the handlers of the builder's loop share: the app, its workspace and
 * its scripts (read in the turn: the app's own files), and its sealed secrets
 * (handed to long work sealed; opened only inside the task).
 */

/** The app record, or 404 unknown_app. */
export async function requireApp(ctx: HandlerContext): Promise<AppRecord> {
  const app = await ctx.state.getApp();
  if (!app)
    throw new PlatformError(
      "unknown_app",
      `app ${ctx.app} does not exist; run: slipway init app --name ${ctx.app}`,
    );
  return app;
}

/** The app's `package.json` scripts, or 422 precondition_failed when there is no package.json. */
export async function packageScripts(workspace: Workspace): Promise<Record<string, string>> {
  const text = await workspace.read("package.json");
  if (text === undefined)
    throw new PlatformError("precondition_failed", "the app's workspace has no package.json");
  try {
    const pkg = JSON.parse(text) as { scripts?: Record<string, unknown> };
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(pkg.scripts ?? {})) if (typeof v === "string") out[k] = v;
    return out;
  } catch (e) {
    throw new PlatformError(
      "precondition_failed",
      `the app's package.json is not valid JSON: ${e instanceof Error ? e.message : String(e)}`,
    );
  }
}

/** The app's sealed secrets by name (opened only inside a task). */
export async function sealedSecrets(ctx: HandlerContext): Promise<Array<[string, VaultEntry]>> {
  const out: Array<[string, VaultEntry]> = [];
  for (const name of await ctx.state.listVaultNames()) {
    const e = await ctx.state.getVaultEntry(name);
    if (e) out.push([name, e]);
  }
  return out;
}
