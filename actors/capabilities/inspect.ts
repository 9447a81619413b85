import { agentRunsInspection } from "./agent-run.js";
import { packageScripts } from "./workspace.js";
import { emailInspection } from "../mail/inspect.js";
import { appEventsInspection } from "./inspect-app-events.js";
import { authInspection } from "./inspect-auth.js";
import { defineHandler, type HandlerContext, type Workspace } from "../context.js";
import {
  type InspectType,
  PlatformError,
  type PlatformEvent,
  PREFERENCES,
  preferred,
  secretAad,
  type Resource,
} from "../../proto/mod.js";

const RECENT = 50;

/** The fields of an event an inspection lists (never its data, which may be large). */
function eventRow({ id, type, resource_type, resource_id, timestamp, actor }: PlatformEvent) {
  return { id, type, resource_type, resource_id, timestamp, actor };
}

/** Failure events (a run failed, a deploy rolled back, a tick failed): the notifications of an app. */
const NOTIFYING = /(Failed|RolledBack)$/;

const METHOD = "GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS";
const ROUTE_PATTERNS: Array<{ re: RegExp; method?: number; path: number; prefix?: boolean }> = [
  // a route table: "/path": { GET: ..., POST: ... }
  { re: new RegExp(`["'\`](/[^"'\`\\s]*)["'\`]\\s*:\\s*\\{\\s*(${METHOD})\\s*:`, "g"), method: 2, path: 1 },
  // framework style: app.get("/path", ...)
  { re: /\.(get|post|put|patch|delete)\(\s*["'`](\/[^"'`\s]*)["'`]/g, method: 1, path: 2 },
  // path === "/x" && method === "GET"
  {
    re: new RegExp(
      `path(?:name)?\\s*===\\s*["'](/[^"'\\s]*)["']\\s*&&\\s*method\\s*===\\s*["'](${METHOD})["']`,
      "g",
    ),
    method: 2,
    path: 1,
  },
  // a prefix handled as a whole: under(path, "/api") / startsWith("/api/")
  { re: /(?:under\(\s*path\s*,|startsWith\()\s*["'](\/[^"'\s]*)["']/g, path: 1, prefix: true },
];

async function sourceFiles(ws: Workspace, rel: string, out: string[] = []): Promise<string[]> {
  if (out.length >= 500) return out;
  for (const e of await ws.list(rel)) {
    const path = rel ? `${rel}/${e.name}` : e.name;
    if (
      e.dir &&
      !["node_modules", "dist", ".git", "test", "tests"].includes(e.name) &&
      !e.name.startsWith(".")
    )
      await sourceFiles(ws, path, out);
    else if (e.file && /\.(ts|js|mjs|tsx|jsx)$/.test(e.name) && !/\.(test|spec)\./.test(e.name))
      out.push(path);
  }
  return out;
}

/** Routes the app's source declares, by a static scan of `src/` (method, path, file:line). */
export async function scanRoutes(
  workspace: Workspace,
): Promise<Array<{ method: string; path: string; prefix: boolean; source: string }>> {
  const found = new Map<string, { method: string; path: string; prefix: boolean; source: string }>();
  const base = workspace.exists("src") ? "src" : "";
  for (const file of await sourceFiles(workspace, base)) {
    // a file the platform does not read (a link, a FIFO, too large) is passed over
    const text = await workspace.read(file).catch(() => undefined);
    if (text === undefined || text.length > 1_000_000) continue;
    const lineAt = (i: number) => text.slice(0, i).split("\n").length;
    for (const p of ROUTE_PATTERNS) {
      for (const m of text.matchAll(p.re)) {
        const path = m[p.path]!;
        const methods: string[] = [];
        if (p.method !== undefined) {
          methods.push(m[p.method]!.toUpperCase());
          if (p.path === 1 && p.method === 2 && m[0].includes("{")) {
            // the other methods of the same table entry
            const body = text.slice(m.index! + m[0].length, m.index! + m[0].length + 4000);
            let depth = 1;
            let end = 0;
            for (; end < body.length && depth > 0; end++) {
              if (body[end] === "{") depth++;
              else if (body[end] === "}") depth--;
            }
            for (const k of body.slice(0, end).matchAll(new RegExp(`(?:^|[,{\\s])(${METHOD})\\s*:`, "g")))
              if (!methods.includes(k[1]!)) methods.push(k[1]!);
          }
        } else methods.push("*");
        for (const method of methods) {
          const key = `${method} ${path}`;
          if (!found.has(key))
            found.set(key, {
              method,
              path,
              prefix: p.prefix === true,
              source: `${file}:${lineAt(m.index!)}`,
            });
        }
      }
    }
  }
  return [...found.values()].sort((a, b) =>
    a.path === b.path ? a.method.localeCompare(b.method) : a.path.localeCompare(b.path),
  );
}

/** The built inspect types (proto/capabilities/runtime.ts INSPECT_TYPES says which), each a reader of state and facts. */
export const readers: Partial<Record<InspectType, (ctx: HandlerContext) => Promise<unknown>>> = {
  async routes(ctx) {
    const app = (await ctx.state.getApp())!;
    const routes = await scanRoutes(ctx.workspace(app));
    return { source: "static scan of the app's src/", total: routes.length, items: routes };
  },
  async scripts(ctx) {
    const app = (await ctx.state.getApp())!;
    const workspace = ctx.workspace(app);
    const scripts = await packageScripts(workspace);
    const lockfile = workspace.exists("package-lock.json");
    return {
      items: Object.entries(scripts).map(([name, command]) => ({ name, command })),
      package_manager: "npm",
      lockfile,
      dependencies_installed: workspace.exists("node_modules"),
      capabilities: { build: "build", test: "test", lint: "lint", dev: "run-dev-server" },
    };
  },
  async docker(ctx) {
    // the engine's view of the app and the proxy's routes to it, read before this turn (facts)
    const engine = ctx.facts.engineDescription ?? { available: false, message: "the engine was not asked" };
    const containers = Array.isArray(engine.containers)
      ? (engine.containers as { labels?: Record<string, string> }[])
      : [];
    return {
      ...engine,
      production: containers.filter((c) => c.labels?.["slipway.role"] === "production"),
      routes: ctx.facts.routes ?? [],
    };
  },
  async notifications(ctx) {
    const items = (await ctx.state.recentEvents(500)).filter((e) => NOTIFYING.test(e.type)).slice(0, RECENT);
    return {
      items: items.map((e) => ({
        ...eventRow(e),
        summary:
          typeof e.data.summary === "string"
            ? e.data.summary
            : typeof e.data.error === "string"
              ? e.data.error
              : undefined,
        exit_code: e.data.exit_code,
      })),
    };
  },
  async app(ctx) {
    const app = (await ctx.state.getApp())!;
    const resources = await ctx.state.listResources();
    const counts: Record<string, number> = {};
    for (const r of resources) counts[r.type] = (counts[r.type] ?? 0) + 1;
    return {
      name: app.name,
      platform: app.platform,
      framework: app.framework,
      base_url: app.base_url,
      workspace: app.workspace,
      created_at: app.created_at,
      resource_counts: counts,
    };
  },
  async resources(ctx) {
    const all = await ctx.state.listResources();
    all.sort((a, b) => (a.id < b.id ? 1 : -1));
    return {
      total: all.length,
      items: all.slice(0, 200).map(({ type, id, status, created_at, updated_at }) => ({
        type,
        id,
        status,
        created_at,
        updated_at,
      })),
    };
  },
  async events(ctx) {
    const items = await ctx.state.recentEvents(RECENT);
    return { items: items.map(eventRow) };
  },
  async jobs(ctx) {
    const jobs = await ctx.state.listResources("ScheduledJob");
    jobs.sort((a, b) => String(a.name).localeCompare(String(b.name)));
    return {
      items: jobs.map((j) => ({
        name: j.name,
        resource_id: j.id,
        target_path: j.target_path,
        method: j.method,
        schedule: j.schedule,
        disabled: j.disabled,
        next_due_at: j.next_due_at,
        last_fired_at: j.last_fired_at,
        last_status: j.last_status,
        runs: j.runs,
        failures: j.failures,
        skipped_overlap: j.skipped_overlap,
        missed: j.missed,
        paused_reason: j.paused_reason ?? null,
      })),
    };
  },
  async secrets(ctx) {
    const names = await ctx.state.listVaultNames();
    const items = [];
    for (const name of names.sort()) {
      const e = await ctx.state.getVaultEntry(name);
      if (!e) continue;
      items.push({
        name,
        resource_id: e.resource_id,
        version: e.version,
        key_id: e.sealed.kid,
        updated_at: e.updated_at,
        integrity: ctx.vault.verifies(e.sealed, secretAad(ctx.app, name)) ? "ok" : "tampered",
      });
    }
    return { items };
  },
  "agent-runs": agentRunsInspection,
  "app-events": appEventsInspection,
  email: emailInspection,
  auth: authInspection,
  async health(ctx) {
    const app = (await ctx.state.getApp())!;
    // the probe of <base_url>/health, made before this turn (a fact; null without a base_url)
    const appHealth = app.base_url ? (ctx.facts.appHealth ?? null) : null;
    return {
      platform: { bus: "connected", node: ctx.nodeId, vault_key_id: ctx.vault.activeKeyId },
      app: app.base_url
        ? { base_url: app.base_url, health: appHealth }
        : { base_url: null, health: "no base_url yet (set by initialize-app, a dev server or a deploy)" },
      healthy: appHealth ? appHealth.ok : null,
    };
  },
};

/**
 * inspect: reads application state into an Inspection. Every inspect type only reads, so a plain
 * inspect answers its Inspection and keeps nothing: reads do not grow the event log or the
 * resources. `Prefer: record` keeps it (the resource, and InspectionCreated, the catalogue's event
 * of inspect), to point at later (docs/resources.md#inspection).
 */
export const inspect = defineHandler("inspect", {
  facts: (input) =>
    input.type === "health"
      ? [{ kind: "app-health", path: "/health" }]
      : input.type === "docker"
        ? [{ kind: "engine-description", app: input.app }, { kind: "routes" }]
        : input.type === "app-events"
          ? [{ kind: "app-events", owner: input.owner }]
          : [],
  handle: async (ctx, input) => {
    const type = input.type;
    const reader = readers[type];
    if (!reader) throw new PlatformError("not_implemented", `inspect type ${type} is not implemented yet`);
    if (!(await ctx.state.getApp())) throw new PlatformError("unknown_app", `app ${ctx.app} does not exist`);
    const result = await reader(ctx);
    const resource: Resource = ctx.resource("Inspection", "succeeded", {
      inspected: type,
      result,
    });
    if (input.owner !== undefined) resource.owner = input.owner;
    if (preferred(ctx.cmd.prefer, PREFERENCES.record) === undefined)
      return { status: "succeeded", resource, transient: true };
    ctx.putResource(resource);
    ctx.emit("InspectionCreated", resource, { inspected: type });
    return { status: "succeeded", resource };
  },
});
