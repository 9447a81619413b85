import { existsSync } from "node:fs";
import { freePort } from "../../effects/net.js";
import { join } from "node:path";
import type { Effect, Handler, HandlerContext } from "../context.js";
import { PlatformError } from "../../proto/errors.js";
import { newResourceId } from "../../proto/ids.js";
import type { Resource } from "../../proto/resources.js";
import { keys } from "../../proto/subjects.js";
import { serviceKeyAad } from "../../store/vault.js";
import { appendLog } from "../../store/logs.js";
import type { Bus } from "../../store/bus.js";
import { ContainerRuntime } from "../../effects/docker.js";
import type { Masker } from "../../effects/process.js";
import { openSecrets, packageScripts, requireApp, sealedSecrets, workspaceOf } from "./run-script.js";

/**
 * run-dev-server: the app's `dev` script in a container of the platform's own
 * base image (built from the host's Node, no registry), the workspace mounted
 * at /app, host networking on a free 127.0.0.1 port, vault secrets injected as
 * environment at start (never written to disk or logs). `start` is long work
 * (image, container, health check); it ends with DevServerStarted and sets the
 * app's base URL. `stop` ends it (DevServerStopped, status `stopped`).
 * `status` reads the container and reconciles a dev server that died.
 * Container logs go to `/logs/<DevServer id>`, masked, for as long as the
 * container runs on this node's watch.
 */

/** How long a started dev server may take to answer `GET /health` with 200. */
const HEALTH_TIMEOUT_MS = Number(process.env.SLIPWAY_DEV_HEALTH_TIMEOUT_S ?? 90) * 1000;
const ACTIVE = new Set(["running", "succeeded"]);

/** Log followers of dev servers in this process, by app, with the bus they write to. */
const followers = new Map<string, { ac: AbortController; bus: Bus }>();

function runtime(): ContainerRuntime {
  return ContainerRuntime.fromEnv();
}

function containerName(app: string): string {
  return `slipway-dev-${app}`;
}

async function current(ctx: HandlerContext): Promise<Resource | undefined> {
  const all = (await ctx.state.listResources("DevServer")).filter((r) => ACTIVE.has(r.status));
  all.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
  return all[0];
}

/** Turns a `dev` script into the container's command (busybox `sh` runs it in the base image). */
export function devCommand(script: string): string[] {
  return ["sh", "-c", script];
}

function follow(
  bus: Bus,
  app: string,
  resourceId: string,
  containerId: string,
  masker: Masker,
  since?: number,
): void {
  followers.get(app)?.ac.abort();
  const ac = new AbortController();
  const entry = { ac, bus };
  followers.set(app, entry);
  // the follower ends with its node's connection (the container goes on)
  void bus.nc.closed().then(() => ac.abort());
  // message ids unique per follower, so a re-attached follower's lines are never taken for replays
  const tag = `${resourceId}/container/${containerId.slice(0, 12)}/${Date.now()}`;
  let n = 0;
  void runtime()
    .followLogs(
      containerId,
      (stream, line) => {
        void appendLog(
          bus,
          resourceId,
          { ts: new Date().toISOString(), stream, line: masker.mask(line) },
          `${tag}/${n++}`,
        ).catch(() => {});
      },
      ac.signal,
      since !== undefined ? { since } : {},
    )
    .catch(() => {})
    .finally(() => {
      if (followers.get(app) === entry) followers.delete(app);
    });
}

/**
 * Re-attaches the log follower of a running dev server this process does not
 * follow (started by a node that has stopped since): lines from now on.
 */
async function reattach(ctx: HandlerContext, resource: Resource, containerId: string): Promise<void> {
  const f = followers.get(ctx.app);
  if (f && f.bus === ctx.bus && !f.ac.signal.aborted) return;
  const { masker } = openSecrets(ctx, await sealedSecrets(ctx));
  follow(ctx.bus, ctx.app, resource.id, containerId, masker, Math.floor(Date.now() / 1000));
  ctx.log(
    resource.id,
    "following the container's log again (lines printed while nobody followed are not collected)",
  );
}

async function start(ctx: HandlerContext): Promise<Effect> {
  const app = await requireApp(ctx);
  const workspace = workspaceOf(ctx.workspaceRoot, app);
  const rt = runtime();
  await rt.require();
  const existing = await current(ctx);
  if (existing) {
    const st = existing.status === "running" ? { running: true } : await rt.status(containerName(ctx.app));
    if (st?.running)
      return { status: existing.status === "running" ? "running" : "succeeded", resource: existing };
  }
  const scripts = packageScripts(workspace);
  const script = scripts.dev ?? scripts.start;
  if (!script) throw new PlatformError("precondition_failed", `the app's package.json has no "dev" script`);
  if (!existsSync(join(workspace, "node_modules")))
    throw new PlatformError(
      "precondition_failed",
      `dependencies are not installed; run: slipway install --app ${ctx.app}`,
    );
  const sealed = await sealedSecrets(ctx);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const name = containerName(ctx.app);
  const iso = ctx.now.toISOString();
  const resource: Resource = {
    type: "DevServer",
    id: newResourceId("DevServer"),
    app_id: ctx.app,
    status: "running",
    created_at: iso,
    updated_at: iso,
    action: "start",
    container: name,
    port,
    url,
    command: `npm run ${scripts.dev ? "dev" : "start"}`,
  };
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
  ctx.log(resource.id, `starting the dev server of ${ctx.app} on ${url}`);
  const serviceKey = ctx.vault.open(app.service_key, serviceKeyAad(ctx.app)).toString("utf8");
  const bus = ctx.bus;
  const appName = ctx.app;
  const urls = ctx.platformUrls;
  return {
    status: "running",
    resource,
    task: {
      onSuccess: "DevServerStarted",
      async run(t) {
        const { env, masker } = openSecrets(t, sealed);
        const image = await rt.ensureBaseImage((line) => void t.log(line, "platform"));
        await t.log(`image ${image}; starting container ${name}`, "platform");
        const { containerId } = await rt.startDevServer({
          app: appName,
          name,
          workspaceDir: workspace,
          port,
          env: {
            ...env,
            SLIPWAY_APP: appName,
            SLIPWAY_SERVICE_KEY: serviceKey,
            ...(urls.control ? { SLIPWAY_CONTROL_URL: urls.control } : {}),
            ...(urls.data ? { SLIPWAY_DATA_URL: urls.data } : {}),
            NODE_ENV: "development",
            PATH: "/app/node_modules/.bin:/usr/local/bin:/usr/bin:/bin",
          },
          command: devCommand(script),
        });
        follow(bus, appName, resource.id, containerId, masker);
        try {
          await rt.waitHealthy(`${url}/health`, HEALTH_TIMEOUT_MS, t.signal, { containerId });
        } catch (e) {
          const message = e instanceof Error ? e.message : String(e);
          await t.log(`the dev server did not become healthy: ${message}; stopping it`, "platform");
          await rt.stop(name).catch(() => false);
          return { status: "failed", fields: { error: `not healthy: ${message}` }, data: { error: message } };
        }
        await t.log(`dev server ready at ${url}`, "platform");
        return {
          status: "succeeded",
          fields: { container_id: containerId, image, ready_at: new Date().toISOString() },
          data: { url, port, image, container: name },
          app: { base_url: url },
        };
      },
    },
  };
}

async function stop(ctx: HandlerContext): Promise<Effect> {
  const app = await requireApp(ctx);
  const rt = runtime();
  await rt.require();
  const existing = await current(ctx);
  if (!existing) throw new PlatformError("precondition_failed", `no dev server is running for ${ctx.app}`);
  if (existing.status === "running")
    throw new PlatformError(
      "busy",
      `the dev server ${existing.id} is still starting; stop it once it has started`,
    );
  const removed = await rt.stop(containerName(ctx.app));
  followers.get(ctx.app)?.ac.abort();
  const iso = ctx.now.toISOString();
  const doc: Resource = { ...existing, status: "stopped", updated_at: iso, stopped_at: iso };
  ctx.putResource(doc, existing);
  ctx.log(existing.id, removed ? "dev server stopped" : "dev server was already gone");
  ctx.emit("DevServerStopped", doc, { reason: "stop", container_removed: removed });
  const appDoc = await ctx.state.getResource("Application", app.resource_id);
  ctx.outbox.apps.push({ key: keys.app(ctx.app), record: { ...app, base_url: null, updated_at: iso } });
  if (appDoc) ctx.putResource({ ...appDoc, base_url: null, updated_at: iso }, appDoc);
  return { status: "succeeded", resource: doc };
}

async function status(ctx: HandlerContext): Promise<Effect> {
  await requireApp(ctx);
  const rt = runtime();
  await rt.require();
  const existing = await current(ctx);
  if (!existing)
    throw new PlatformError(
      "not_found",
      `no dev server for ${ctx.app}; start one with: slipway dev --app ${ctx.app}`,
    );
  if (existing.status === "running") return { status: "running", resource: existing };
  const st = await rt.status(containerName(ctx.app));
  if (st?.running) {
    await reattach(ctx, existing, st.containerId);
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

export const runDevServer: Handler = async (ctx, input) => {
  const action = (input.action as string | undefined) ?? "start";
  if (action === "stop") return stop(ctx);
  if (action === "status") return status(ctx);
  return start(ctx);
};
