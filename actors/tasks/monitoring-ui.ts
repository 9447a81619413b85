import { randomBytes } from "node:crypto";
import {
  basicAuthDigest,
  encode,
  keys,
  type Route,
  RouteSchema,
  type Sealed,
  check,
  BUCKETS,
} from "../../proto/mod.js";
import { type ContainerRuntime, PORTS } from "../../effects/mod.js";
import { kvKeys } from "../../store/mod.js";
import { writeOwnRoute } from "./routes.js";
import type { TaskContext } from "./types.js";

/**
 * The monitoring stack's UI behind the platform's proxy (docs/monitoring.md#the-ui): the host
 * `public_host` routed to Prometheus on the proxy's network, every request asked for HTTP Basic
 * credentials by the proxy (user `admin`, a password of 32 random bytes). The password is kept
 * sealed in the vault under `_monitoring.<project>` and written to the stack's `secrets/ui_password`
 * (0600) for the operator; the route keeps only its SHA-256. `regenerate_secrets` makes a new one.
 */

/** The route's app: no app may be named so (a leading `_`), so no app's host is taken. */
export const MONITORING_ROUTE_APP = "_monitoring";
export const UI_USER = "admin";

const aad = (project: string) => `monitoring-ui:${project}`;

/** Whether some proxy of the platform announces itself (only then is the UI routed). */
export async function proxyPresent(bus: TaskContext["bus"]): Promise<boolean> {
  return (await kvKeys(bus, BUCKETS.leases, "proxy.*").catch(() => [])).length > 0;
}

/** The UI's password: the one kept in the vault, or a new one (none kept, or `regenerate`). */
export async function uiPassword(
  t: Pick<TaskContext, "bus" | "vault">,
  project: string,
  regenerate: boolean,
): Promise<{ password: string; rotated: boolean }> {
  const key = keys.vault(MONITORING_ROUTE_APP, project);
  if (!regenerate) {
    const e = await t.bus.kv.vault.get(key).catch(() => null);
    if (e?.operation === "PUT") {
      try {
        const { sealed } = e.json() as { sealed: Sealed };
        return { password: t.vault.openString(sealed, aad(project)), rotated: false };
      } catch {
        /* unreadable (another vault key, a broken entry): a new one below */
      }
    }
  }
  const password = randomBytes(32).toString("base64url");
  await t.bus.kv.vault.put(
    key,
    encode({ sealed: t.vault.seal(password, aad(project)), created_at: new Date().toISOString() }),
  );
  return { password, rotated: true };
}

/**
 * Routes `host` to `upstream` with the password's digest; nothing written when the route already
 * says so (a second call with the same input changes nothing). Throws when the host is an app's.
 */
export async function routeUi(
  t: Pick<TaskContext, "bus" | "resource">,
  o: { host: string; upstream: string; container: string; password: string },
): Promise<{ written: boolean }> {
  const wanted = {
    host: o.host,
    app: MONITORING_ROUTE_APP,
    service: "prometheus",
    upstreams: [
      { url: o.upstream, deployment_id: t.resource.id, container: o.container, health_path: "/-/ready" },
    ],
    basic_auth: { user: UI_USER, sha256: basicAuthDigest(o.password) },
  };
  const cur = await t.bus.kv.routes.get(keys.route(o.host)).catch(() => null);
  if (cur?.operation === "PUT") {
    const r = check(RouteSchema, cur.json(), "route");
    const same =
      r.app === wanted.app &&
      r.upstreams.length === 1 &&
      r.upstreams[0]!.url === o.upstream &&
      r.basic_auth?.sha256 === wanted.basic_auth.sha256;
    if (same) return { written: false };
  }
  const route: Route = { ...wanted, updated_at: new Date().toISOString() };
  const rev = await writeOwnRoute(t, route, new Map());
  if (typeof rev === "string") throw new Error(rev);
  return { written: true };
}

/**
 * Routes the started stack's Prometheus at `host` behind the proxy (its address on `network`);
 * what the resource's `ui` says.
 */
export async function exposeUi(
  t: Pick<TaskContext, "bus" | "resource" | "log">,
  rt: ContainerRuntime,
  o: { project: string; host: string; network: string; password: string; rotated: boolean },
): Promise<Record<string, unknown>> {
  const container = `${o.project}-prometheus`;
  const address = await rt.networks().addressOf(container, o.network);
  if (!address) throw new Error(`${container} has no address on the proxy's network ${o.network}`);
  const routed = await routeUi(t, {
    host: o.host,
    upstream: `http://${address}:${PORTS.prometheus}`,
    container,
    password: o.password,
  });
  await t.log(
    `the UI at ${o.host} behind the platform's proxy (user ${UI_USER}, password in secrets/ui_password)${routed.written ? "" : ": its route already said so"}${o.rotated ? "; a new password" : ""}`,
  );
  return {
    host: o.host,
    user: UI_USER,
    password_file: "secrets/ui_password",
    proxy_network: o.network,
    route_written: routed.written,
    password_rotated: o.rotated,
  };
}
