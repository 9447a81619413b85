import { MonitoringSettingError, PORTS } from "../../effects/mod.js";
import {
  check,
  LOG_SHIPPING_KEY,
  LOG_SHIPPING_STATUS_KEY,
  type LogShippingConfig,
  LogShippingConfigSchema,
  STREAMS,
} from "../../proto/mod.js";
import type { TaskContext } from "./types.js";

/**
 * provision-monitoring's part of shipping the platform's log lines to Loki (docs/monitoring.md,
 * "Shipping the log lines"): where they go (the stack's Loki when it runs, else
 * SLIPWAY_LOKI_PUSH_URL), written into `slipway_meta` `log_shipping`, which the shipper of every
 * node follows (actors/log-shipper.ts). A configuration that says the same is not written again:
 * the shipper keeps its position; a new one keeps the start (`started_at`, `from_seq`).
 */

/** Loki's push API on a host and port. */
export const lokiPushUrl = (address: string) => `http://${address}:${PORTS.loki}/loki/api/v1/push`;

/** SLIPWAY_LOKI_PUSH_URL checked: an http(s) URL without credentials (it is stored unsealed). */
export function pushUrlSetting(env: NodeJS.ProcessEnv): string | null {
  const raw = env.SLIPWAY_LOKI_PUSH_URL?.trim();
  if (!raw) return null;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new MonitoringSettingError("SLIPWAY_LOKI_PUSH_URL is not a URL");
  }
  if (u.protocol !== "http:" && u.protocol !== "https:")
    throw new MonitoringSettingError("SLIPWAY_LOKI_PUSH_URL must be an http or https URL");
  if (u.username || u.password)
    throw new MonitoringSettingError(
      "SLIPWAY_LOKI_PUSH_URL must not carry credentials: the shipping configuration is stored unsealed",
    );
  return u.toString();
}

export interface ShippingPart {
  project: string;
  log_scope_regex: string | null;
  /** The stack's Loki container's address, when the call started it. */
  loki_address: string | null;
}

/** What the resource says of shipping (`log_shipping`), and whether the call changed it. */
export type ShippingOutcome = { changed: boolean; fields: Record<string, unknown> | string };

const same = (
  a: LogShippingConfig,
  b: Omit<LogShippingConfig, "started_at" | "from_seq" | "from_event_seq" | "updated_at">,
) =>
  a.push_url === b.push_url &&
  a.target === b.target &&
  a.log_scope_regex === b.log_scope_regex &&
  a.project === b.project;

/** Writes the shipping configuration when a push target exists and it differs from the stored one. */
export async function configureShipping(t: TaskContext, o: ShippingPart): Promise<ShippingOutcome> {
  const setting = pushUrlSetting(process.env);
  const push_url = o.loki_address ? lokiPushUrl(o.loki_address) : setting;
  if (!push_url)
    return {
      changed: false,
      fields:
        "not configured: neither the stack's Loki runs (SLIPWAY_LOKI_BIN) nor SLIPWAY_LOKI_PUSH_URL names one; a configuration an earlier call wrote is left as it is",
    };
  const target: LogShippingConfig["target"] = o.loki_address ? "stack" : "setting";
  const kv = t.bus.kv.meta;
  const entry = await kv.get(LOG_SHIPPING_KEY);
  const old =
    entry?.operation === "PUT"
      ? check(LogShippingConfigSchema, entry.json(), "log shipping configuration")
      : undefined;
  const wanted = {
    push_url,
    target,
    log_scope_regex: o.log_scope_regex,
    project: o.project,
    resource_id: t.resource.id,
  };
  const describe = (c: LogShippingConfig, changed: boolean) => ({
    push_url: c.push_url,
    target: c.target,
    log_scope_regex: c.log_scope_regex,
    started_at: c.started_at,
    from_seq: c.from_seq,
    from_event_seq: c.from_event_seq ?? null,
    changed,
    status: `slipway_meta ${LOG_SHIPPING_STATUS_KEY}`,
  });
  if (old && same(old, wanted)) {
    await t.log(
      `log shipping to ${push_url} unchanged (from line ${old.from_seq + 1} of the logs stream on)`,
    );
    return { changed: false, fields: describe(old, false) };
  }
  const iso = new Date().toISOString();
  const lastOf = async (stream: string) => (await t.bus.jsm.streams.info(stream)).state.last_seq;
  const from_seq = old?.from_seq ?? (await lastOf(STREAMS.logs));
  const from_event_seq = old?.from_event_seq ?? (await lastOf(STREAMS.events));
  const config: LogShippingConfig = {
    ...wanted,
    started_at: old?.started_at ?? iso,
    from_seq,
    from_event_seq,
    updated_at: iso,
  };
  // the busy group keeps calls apart; a conflict is a write of another process: the call fails
  if (entry?.operation === "PUT") await kv.update(LOG_SHIPPING_KEY, JSON.stringify(config), entry.revision);
  else await kv.create(LOG_SHIPPING_KEY, JSON.stringify(config));
  await t.log(
    old
      ? `log shipping now to ${push_url}${config.log_scope_regex === null ? "" : ` (lines matching ${config.log_scope_regex})`}; the shipper keeps its position`
      : `log shipping configured: the log lines from line ${from_seq + 1} of the logs stream on go to ${push_url}${config.log_scope_regex === null ? "" : ` (lines matching ${config.log_scope_regex})`}`,
  );
  return { changed: true, fields: describe(config, true) };
}
