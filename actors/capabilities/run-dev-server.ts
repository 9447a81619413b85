import { defineHandler, type Effect, type HandlerContext } from "../context.js";
import { devServerTask } from "../tasks/dev-server.js";
import {
  APP_PORT,
  PlatformError,
  devContainerName,
  serviceKeyAad,
  type Resource,
  keys,
} from "../../proto/mod.js";
import { packageScripts, requireApp, sealedSecrets } from "./workspace.js";

/**
 * run-dev-server: the app's `dev` script in a container of the platform's own
 * base image, the workspace mounted at /app, on the dev network (never the
 * host's) listening on APP_PORT, reached at the container's address there,
 * vault secrets injected at start. `start` is long work
 * (actors/tasks/dev-server.ts); it ends with DevServerStarted and sets the
 * app's base URL. `stop` ends it (DevServerStopped, status `stopped`): the
 * container is removed after the commit. `status` reconciles a dev server
 * whose container died, and follows the log of one this node does not follow.
 * What the engine runs is a fact read before the turn; the handler only decides.
 */

const ACTIVE: ReadonlySet<string> = new Set(["running", "succeeded"]);

async function current(ctx: HandlerContext): Promise<Resource | undefined> {
  const all = (await ctx.state.listResources("DevServer")).filter((r) => ACTIVE.has(r.status));
  all.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
  return all[0];
}

/** 503 container_runtime_unavailable unless the engine answered before this turn. */
function requireEngine(ctx: HandlerContext): void {
  const engine = ctx.facts.engine;
  if (!engine?.available)
    throw new PlatformError(
      "container_runtime_unavailable",
      engine && !engine.available ? engine.message : "no container engine was asked",
    );
}

async function start(ctx: HandlerContext): Promise<Effect> {
  const app = await requireApp(ctx);
  const workspace = ctx.workspace(app);
  requireEngine(ctx);
  const name = devContainerName(ctx.app);
  const existing = await current(ctx);
  if (existing) {
    if (existing.status === "running") return { status: "running", resource: existing };
    if (ctx.facts.containers[name]?.running) return { status: "succeeded", resource: existing };
  }
  const scripts = await packageScripts(workspace);
  const script = scripts.dev ?? scripts.start;
  if (!script) throw new PlatformError("precondition_failed", `the app's package.json has no "dev" script`);
  if (!workspace.exists("node_modules"))
    throw new PlatformError(
      "precondition_failed",
      `dependencies are not installed; run: slipway install --app ${ctx.app}`,
    );
  const port = APP_PORT;
  const iso = ctx.now.toISOString();
  // the URL is the container's address on the dev network: known once it runs (the task sets it)
  const resource: Resource = ctx.resource("DevServer", "running", {
    action: "start",
    container: name,
    port,
    url: null,
    command: `npm run ${scripts.dev ? "dev" : "start"}`,
  });
  if (existing && existing.status === "succeeded") {
    // the container of the earlier dev server is gone: record that it stopped
    const stopped: Resource = {
      ...existing,
      status: "stopped",
      updated_at: iso,
      stopped_reason: "container gone",
    };
    ctx.putResource(stopped, existing);
    ctx.emit("DevServerStopped", stopped, { reason: "container gone" });
  }
  ctx.putResource(resource);
  ctx.log(resource.id, `starting the dev server of ${ctx.app} (port ${port} on the dev network)`);
  return {
    status: "running",
    resource,
    task: {
      ...devServerTask({
        app: ctx.app,
        name,
        workspace: workspace.path,
        port,
        script,
        serviceKey: ctx.vault.open(app.service_key, serviceKeyAad(ctx.app)).toString("utf8"),
        sealed: await sealedSecrets(ctx),
        platformUrls: ctx.platformUrls,
      }),
      // the closed catalogue has no DevServerFailed: a start that fails ends with DevServerStopped
      // (the envelope's status "failed", data.error the reason; docs/events.md)
      onFailure: "DevServerStopped",
    },
  };
}

async function stop(ctx: HandlerContext): Promise<Effect> {
  const app = await requireApp(ctx);
  requireEngine(ctx);
  const existing = await current(ctx);
  if (!existing) throw new PlatformError("precondition_failed", `no dev server is running for ${ctx.app}`);
  if (existing.status === "running")
    throw new PlatformError(
      "busy",
      `the dev server ${existing.id} is still starting; stop it once it has started`,
    );
  const name = devContainerName(ctx.app);
  const present = ctx.facts.containers[name] != null;
  // the container goes after the commit: a fenced-out turn removes nothing
  ctx.after({ kind: "container.unfollow", app: ctx.app });
  ctx.after({ kind: "container.remove", name });
  const iso = ctx.now.toISOString();
  const doc: Resource = { ...existing, status: "stopped", updated_at: iso, stopped_at: iso };
  ctx.putResource(doc, existing);
  ctx.log(existing.id, present ? "dev server stopped" : "dev server was already gone");
  ctx.emit("DevServerStopped", doc, { reason: "stop", container_removed: present });
  const appDoc = await ctx.state.getResource("Application", app.resource_id);
  ctx.outbox.apps.push({ key: keys.app(ctx.app), record: { ...app, base_url: null, updated_at: iso } });
  if (appDoc) ctx.putResource({ ...appDoc, base_url: null, updated_at: iso }, appDoc);
  return { status: "succeeded", resource: doc };
}

async function status(ctx: HandlerContext): Promise<Effect> {
  await requireApp(ctx);
  requireEngine(ctx);
  const existing = await current(ctx);
  if (!existing)
    throw new PlatformError(
      "not_found",
      `no dev server for ${ctx.app}; start one with: slipway dev --app ${ctx.app}`,
    );
  if (existing.status === "running") return { status: "running", resource: existing };
  const st = ctx.facts.containers[devContainerName(ctx.app)];
  if (st?.running) {
    // a dev server whose log this node does not follow (a node that took the app over follows it
    // already): followed from where its collection stopped (actors/container-logs.ts); `since`, the
    // turn's time, only when that cannot be read
    ctx.after({
      kind: "container.follow",
      app: ctx.app,
      resource_id: existing.id,
      container_id: st.containerId,
      since: Math.floor(ctx.now.getTime() / 1000),
    });
    return { status: "succeeded", resource: { ...existing, container_running: true } };
  }
  const iso = ctx.now.toISOString();
  const doc: Resource = {
    ...existing,
    status: "stopped",
    updated_at: iso,
    stopped_reason: st ? `exited with ${st.exitCode ?? "unknown"}` : "container gone",
  };
  ctx.putResource(doc, existing);
  ctx.emit("DevServerStopped", doc, { reason: doc.stopped_reason });
  return { status: "succeeded", resource: doc };
}

export const runDevServer = defineHandler("run-dev-server", {
  facts: (input) => [{ kind: "engine" }, { kind: "container", name: devContainerName(input.app) }],
  handle: async (ctx, input) => {
    const action = input.action ?? "start";
    if (action === "stop") return stop(ctx);
    if (action === "status") return status(ctx);
    return start(ctx);
  },
});
