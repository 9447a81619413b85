import { ContainerExitedError, ContainerRuntime } from "../../effects/mod.js";
import type { VaultEntry } from "../../proto/mod.js";
import { openSecrets } from "./secrets.js";
import type { TaskSpec } from "./types.js";

/**
 * run-dev-server start's long work: the platform's base image (built from the
 * host's Node when missing), the container with the workspace at /app on the
 * dev network, the vault secrets injected at start (never written to disk or
 * logs), its log followed, and `GET /health` awaited at the container's
 * address; a dev server that does not become healthy is stopped. Ends with
 * DevServerStarted and the app's base URL (that address). The container holds
 * no credential of the platform: its client reaches the control plane's dev
 * listener, which knows it by its address (docs/security.md).
 */

/** How long a started dev server may take to answer `GET /health` with 200. */
const HEALTH_TIMEOUT_MS = Number(process.env.SLIPWAY_DEV_HEALTH_TIMEOUT_S ?? 90) * 1000;

/** How long a failed dev server's last lines may take to reach its log before the task ends. */
const LAST_LINES_WAIT_MS = 5_000;

/** Turns a `dev` script into the container's command (busybox `sh` runs it in the base image). */
export function devCommand(script: string): string[] {
  return ["sh", "-c", script];
}

export function devServerTask(o: {
  app: string;
  name: string;
  workspace: string;
  port: number;
  script: string;
  serviceKey: string;
  sealed: ReadonlyArray<[string, VaultEntry]>;
  platformUrls: { control?: string; data?: string; containers?: { control?: string; data?: string } };
}): TaskSpec {
  return {
    onSuccess: "DevServerStarted",
    async run(t) {
      const rt = ContainerRuntime.fromEnv();
      const inside = o.platformUrls.containers;
      if (!inside)
        await t.log(
          "the platform has no listener on the dev network (no bridge address): the app's client cannot reach it",
          "platform",
        );
      const { env } = openSecrets(t, o.sealed);
      const image = await rt.ensureBaseImage((line) => void t.log(line, "platform"));
      await t.log(`image ${image}; starting container ${o.name}`, "platform");
      const started = await rt
        .startDevServer({
          app: o.app,
          name: o.name,
          workspaceDir: o.workspace,
          port: o.port,
          env: {
            ...env,
            SLIPWAY_APP: o.app,
            SLIPWAY_SERVICE_KEY: o.serviceKey,
            ...(inside?.control ? { SLIPWAY_CONTROL_URL: inside.control } : {}),
            ...(inside?.data ? { SLIPWAY_DATA_URL: inside.data } : {}),
            NODE_ENV: "development",
            PATH: "/app/node_modules/.bin:/usr/local/bin:/usr/bin:/bin",
          },
          command: devCommand(o.script),
        })
        // it exited before it had an address: its output is still there, read below
        .catch((e: unknown) => (e instanceof ContainerExitedError ? e : Promise.reject(e)));
      const containerId = started.containerId;
      await t.sideEffect({
        kind: "container.follow",
        app: o.app,
        resource_id: t.resource.id,
        container_id: containerId,
      });
      try {
        if (started instanceof ContainerExitedError) throw started;
        await rt.waitHealthy(`${started.url}/health`, HEALTH_TIMEOUT_MS, t.signal, { containerId });
      } catch (e) {
        const message = e instanceof Error ? e.message : String(e);
        await t.log(`the dev server did not become healthy: ${message}; stopping it`, "platform");
        // what it printed is in its log before the failure is: the follower reads a stopped
        // container's output to its end, before the container is removed
        const exited = e instanceof ContainerExitedError;
        if (exited) await t.containerLogEnded(containerId, LAST_LINES_WAIT_MS);
        await rt.stop(o.name).catch(() => false);
        if (!exited) await t.containerLogEnded(containerId, LAST_LINES_WAIT_MS);
        return { status: "failed", fields: { error: `not healthy: ${message}` }, data: { error: message } };
      }
      const url = started.url;
      await t.log(`dev server ready at ${url}`, "platform");
      return {
        status: "succeeded",
        fields: { container_id: containerId, image, url, ready_at: new Date().toISOString() },
        data: { url, port: o.port, image, container: o.name },
        app: { base_url: url },
      };
    },
  };
}
