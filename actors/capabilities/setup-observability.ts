import { defineHandler } from "../context.js";
import {
  commandFieldAad,
  keys,
  OBSERVABILITY_ENTRY,
  PLATFORM_APP,
  PlatformError,
  secretAad,
} from "../../proto/mod.js";
import { refusedAddress } from "../production/delivery.js";

/** The signals every process exports once configured (docs/observability.md). */
const SIGNALS = ["traces", "metrics", "logs"] as const;

function invalid(path: string, message: string): PlatformError {
  return new PlatformError("invalid_input", `${path.slice(1)}: ${message}`, { details: [{ path, message }] });
}

/**
 * What the schema cannot say of the endpoint: each signal goes to `<endpoint>/v1/<signal>`, so a
 * query or fragment has no place; an IP literal must be one the platform may call
 * (docs/security.md, outbound calls). The schema already refused credentials, white space, other
 * schemes.
 */
function checkEndpoint(endpoint: string): URL {
  const u = new URL(endpoint);
  if (u.search || u.hash || endpoint.includes("#") || endpoint.includes("?"))
    throw invalid("/endpoint", "must not carry a query or a fragment (signals go to <endpoint>/v1/<signal>)");
  const host = u.hostname.replace(/^\[|\]$/g, "");
  const why = /^[0-9.]+$|:/.test(host) ? refusedAddress(host) : undefined;
  if (why) throw invalid("/endpoint", `refused: ${why}`);
  return u;
}

/**
 * setup-observability: points the platform's own OTLP export (traces, metrics, logs of every
 * process) at the endpoint. App-less (it runs under `_platform`). Unless `skip_probe`, the node
 * exported one probe span to the receiver before the turn (a fact, actors/facts/); a refusal or
 * no answer is `502 bad_gateway` naming the endpoint, and nothing is saved. Otherwise the
 * configuration, keys included, is sealed into the vault entry `_platform.OTLP_EXPORT`, which
 * every process watches and (re)configures its exporters from; the ObservabilityStack carries the
 * endpoint, whether keys are set, the signals and the probe, never a key.
 */
export const setupObservability = defineHandler("setup-observability", {
  facts: (input, cmd) =>
    input.skip_probe
      ? []
      : [
          {
            kind: "otlp-probe",
            endpoint: input.endpoint,
            aad: commandFieldAad(cmd.id, "secret_key"),
            ...(input.public_key !== undefined ? { public_key: input.public_key } : {}),
            ...(cmd.sealed?.secret_key ? { secret_key: cmd.sealed.secret_key } : {}),
          },
        ],
  handle: async (ctx, input) => {
    const endpoint = checkEndpoint(input.endpoint).toString();
    const skip = input.skip_probe === true;
    const probe = skip ? null : ctx.facts.otlpProbe;
    if (!skip && !probe) throw new PlatformError("internal", "the probe of the endpoint was not read");
    if (probe && !probe.ok)
      throw new PlatformError(
        "bad_gateway",
        `the OTLP receiver at ${input.endpoint} did not take the probe span: ${probe.error ?? "export failed"}`,
      );
    const sealedSecret = ctx.cmd.sealed?.secret_key;
    const secret = sealedSecret
      ? ctx.vault.openString(sealedSecret, commandFieldAad(ctx.cmd.id, "secret_key"))
      : null;
    const iso = ctx.now.toISOString();
    const config = { endpoint: input.endpoint, public_key: input.public_key ?? null, secret_key: secret };
    const sealed = ctx.vault.seal(JSON.stringify(config), secretAad(PLATFORM_APP, OBSERVABILITY_ENTRY));
    const existing = await ctx.state.getVaultEntry(OBSERVABILITY_ENTRY);
    const previous = existing
      ? await ctx.state.getResource("ObservabilityStack", existing.resource_id)
      : undefined;
    const fields = {
      endpoint: input.endpoint,
      has_keys: Boolean(input.public_key || secret),
      signals: [...SIGNALS],
      configured_at: iso,
      probe: probe ? { ok: probe.ok, ms: probe.ms } : null,
    };
    // one ObservabilityStack for the platform: a new configuration updates it
    const resource = ctx.resource(
      "ObservabilityStack",
      "succeeded",
      fields,
      previous ? { id: previous.id, created_at: previous.created_at } : undefined,
    );
    ctx.outbox.vault.push({
      key: keys.vault(PLATFORM_APP, OBSERVABILITY_ENTRY),
      entry: { sealed, resource_id: resource.id, version: (existing?.version ?? 0) + 1, updated_at: iso },
    });
    ctx.putResource(resource, previous);
    ctx.log(
      resource.id,
      `export of ${SIGNALS.join(", ")} pointed at ${endpoint}${fields.has_keys ? " (keys sealed)" : ""}` +
        (probe ? `; probe span taken in ${probe.ms} ms` : "; probe skipped"),
    );
    ctx.emit("ObservabilityConfigured", resource, {
      endpoint: input.endpoint,
      has_keys: fields.has_keys,
      signals: fields.signals,
      probe: fields.probe,
    });
    return { status: "succeeded", resource };
  },
});
