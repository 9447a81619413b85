import { readStream } from "../../store/read-stream.js";
import type { Handler, HandlerContext } from "../context.js";
import { PlatformError } from "../../proto/errors.js";
import { newResourceId } from "../../proto/ids.js";
import type { PlatformEvent } from "../../proto/events.js";
import type { Resource } from "../../proto/resources.js";
import { STREAMS, subjects } from "../../proto/subjects.js";
import { secretAad } from "../../store/vault.js";

const RECENT = 50;

async function recentEvents(ctx: HandlerContext, limit: number): Promise<PlatformEvent[]> {
  const out: PlatformEvent[] = [];
  for await (const m of readStream(ctx.bus, STREAMS.events, subjects.eventsOfApp(ctx.app))) {
    out.push(m.json<PlatformEvent>());
    if (out.length > limit) out.shift();
  }
  return out.reverse();
}

async function probe(
  url: string,
  timeoutMs: number,
): Promise<{ ok: boolean; status?: number; error?: string; ms: number }> {
  const t0 = Date.now();
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: "manual" });
    await r.body?.cancel();
    return { ok: r.status === 200, status: r.status, ms: Date.now() - t0 };
  } catch (e) {
    return { ok: false, error: e instanceof Error ? e.name : "error", ms: Date.now() - t0 };
  }
}

export const readers: Partial<Record<string, (ctx: HandlerContext) => Promise<unknown>>> = {
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
    const items = await recentEvents(ctx, RECENT);
    return {
      items: items.map(({ id, type, resource_type, resource_id, timestamp, actor }) => ({
        id,
        type,
        resource_type,
        resource_id,
        timestamp,
        actor,
      })),
    };
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
  async health(ctx) {
    const app = (await ctx.state.getApp())!;
    const appHealth = app.base_url ? await probe(new URL("/health", app.base_url).toString(), 1000) : null;
    return {
      platform: { bus: "connected", node: ctx.nodeId, vault_key_id: ctx.vault.activeKeyId },
      app: app.base_url
        ? { base_url: app.base_url, health: appHealth }
        : { base_url: null, health: "no base_url yet (set by initialize-app, a dev server or a deploy)" },
      healthy: appHealth ? appHealth.ok : null,
    };
  },
};

/** inspect: reads application state into an Inspection resource. */
export const inspect: Handler = async (ctx, input) => {
  const type = input.type as string;
  const reader = readers[type];
  if (!reader) throw new PlatformError("not_implemented", `inspect type ${type} is not implemented yet`);
  if (!(await ctx.state.getApp())) throw new PlatformError("unknown_app", `app ${ctx.app} does not exist`);
  const result = await reader(ctx);
  const iso = ctx.now.toISOString();
  const resource: Resource = {
    type: "Inspection",
    id: newResourceId("Inspection"),
    app_id: ctx.app,
    status: "succeeded",
    created_at: iso,
    updated_at: iso,
    inspected: type,
    result,
  };
  if (typeof input.owner === "string") resource.owner = input.owner;
  ctx.putResource(resource);
  ctx.emit("InspectionCreated", resource, { inspected: type });
  return { status: "succeeded", resource };
};
