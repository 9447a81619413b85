import { configureTelemetry, type ExportConfig, stopTelemetry, telemetryLog } from "../effects/mod.js";
import { check, keys, OBSERVABILITY_ENTRY, PLATFORM_APP, secretAad, VaultEntrySchema } from "../proto/mod.js";
import type { Bus, Vault } from "../store/mod.js";

/**
 * Each process (and the node's worker thread of `up`) follows setup-observability's configuration
 * (docs/observability.md): a watch on the vault entry `_platform.OTLP_EXPORT`, opened with the
 * deployment's vault keys, (re)configures this process's exporters live; a deleted entry stops
 * them. Nothing is exported until a configuration exists.
 */
export interface TelemetryWatch {
  close(): Promise<void>;
}

/** A log function whose lines also become OTLP log records once an export is configured. */
export function exportingLog(log: (msg: string) => void): (msg: string) => void {
  return (msg) => {
    log(msg);
    telemetryLog(msg);
  };
}

function configOf(text: string): ExportConfig | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null) return undefined;
  const o = v as Record<string, unknown>;
  const str = (x: unknown) => (typeof x === "string" ? x : null);
  if (typeof o.endpoint !== "string") return undefined;
  return { endpoint: o.endpoint, public_key: str(o.public_key), secret_key: str(o.secret_key) };
}

export async function watchTelemetry(s: {
  bus: Bus;
  vault: Vault;
  role: string;
  env: Record<string, string | undefined>;
  log: (msg: string) => void;
}): Promise<TelemetryWatch> {
  const interval = Number(s.env.SLIPWAY_OTLP_METRICS_INTERVAL_MS);
  const who = {
    role: s.role,
    ...(Number.isInteger(interval) && interval >= 100 ? { metricsIntervalMs: interval } : {}),
  };
  const key = keys.vault(PLATFORM_APP, OBSERVABILITY_ENTRY);
  const w = await s.bus.kv.vault.watch({ key });
  (async () => {
    for await (const e of w) {
      if (e.operation !== "PUT") {
        await configureTelemetry(null, who);
        continue;
      }
      let config: ExportConfig | undefined;
      try {
        const entry = check(VaultEntrySchema, e.json(), `vault ${key}`);
        config = configOf(s.vault.openString(entry.sealed, secretAad(PLATFORM_APP, OBSERVABILITY_ENTRY)));
      } catch (err) {
        // the name of the error only: its text could quote what was sealed
        s.log(`telemetry: the export configuration could not be opened (${(err as Error)?.name ?? "error"})`);
        continue;
      }
      if (!config) {
        s.log("telemetry: the export configuration is malformed; export unchanged");
        continue;
      }
      await configureTelemetry(config, who);
      s.log(`telemetry: ${s.role} exports traces, metrics and logs to ${config.endpoint}`);
    }
  })().catch((err) => s.log(`telemetry: configuration watch ended: ${String(err)}`));
  return {
    async close() {
      w.stop();
      await stopTelemetry();
    },
  };
}
