import { defineHandler } from "../context.js";
import { keys, PlatformError, PREFERENCES } from "../../proto/mod.js";
import {
  ARTIFACT_FILES,
  acmeDirectory,
  BLOB_BACKENDS,
  PROD_ENV_FILE,
  renderArtifacts,
  renderEnvProd,
  sha256,
  UNPUBLISHED_PLATFORM,
  UNPUBLISHED_WEB,
} from "../production/artifacts.js";
import { isPinned, parseCompose } from "../production/compose.js";
import { requireApp } from "./workspace.js";

/** The readiness path when none is given (DESIGN §8). */
const DEFAULT_READINESS = "/health";

/** An image the call gives must be pinned: a tag is refused before anything is written. */
function pinnedInput(field: "web_image" | "data_plane_image", v: string | undefined): string | undefined {
  if (v === undefined) return undefined;
  if (!isPinned(v))
    throw new PlatformError(
      "invalid_input",
      `${field}: ${JSON.stringify(v.slice(0, 120))} is not pinned; give repo@sha256:<digest> (or a local image id sha256:<id>)`,
      { details: [{ path: `/${field}`, message: "must be pinned by digest" }] },
    );
  return v;
}

/** A host another app holds (its route, or its record: it productionized it first) is 409 naming that app. */
function ownHost(
  owners: Record<string, string> | undefined,
  field: "host" | "mcp_mtls_host",
  host: string,
): void {
  const owner = owners?.[host];
  if (owner === undefined) return;
  const message = `${host} belongs to the app ${owner} (it productionized it first); a host serves one app`;
  throw new PlatformError("conflict", `${field}: ${message}`, { details: [{ path: `/${field}`, message }] });
}

/**
 * productionize: writes the production artifacts into the app's workspace and
 * commits them (docs/deploy.md). The host is remembered in the app record on
 * the first run; another host later is `409 conflict` unless the call says
 * `Prefer: replace-host`. An image already pinned in compose.prod.yaml (by
 * release) is kept unless the call gives another. Idempotent: the same inputs
 * write the same bytes (the event lists each file's hash). A host belongs to the app that
 * productionized it first: another app's host is `409 conflict` naming it.
 */
export const productionize = defineHandler("productionize", {
  facts: (input) => [
    { kind: "host-owners", hosts: [input.host, input.mcp_mtls_host].filter((h) => h !== undefined) },
  ],
  handle: async (ctx, input) => {
    const app = await requireApp(ctx);
    const host = (input.host ?? app.host)?.toLowerCase();
    if (!host)
      throw new PlatformError(
        "invalid_input",
        `host: ${ctx.app} has no production host yet; give one (slipway productionize --app ${ctx.app} --host <name>)`,
        { details: [{ path: "/host", message: "is required on the first run" }] },
      );
    if (app.host && host !== app.host && !ctx.cmd.prefer?.includes(PREFERENCES.replaceHost))
      throw new PlatformError(
        "conflict",
        `${ctx.app} is productionized for ${app.host}; to move it to ${host}, call again with Prefer: replace-host (slipway productionize --replace-host)`,
      );
    ownHost(ctx.facts.hostOwners, "host", host);
    if (input.mcp_mtls_host !== undefined)
      ownHost(ctx.facts.hostOwners, "mcp_mtls_host", input.mcp_mtls_host.toLowerCase());
    if (input.mcp_mtls_host !== undefined && input.mcp_mtls_host.toLowerCase() === host)
      throw new PlatformError("invalid_input", "mcp_mtls_host: must be another host than host", {
        details: [{ path: "/mcp_mtls_host", message: "must differ from host" }],
      });
    const blobs = input.blobs_backend ?? "local";
    if (!(BLOB_BACKENDS as readonly string[]).includes(blobs))
      throw new PlatformError("invalid_input", `blobs_backend: must be one of ${BLOB_BACKENDS.join(", ")}`, {
        details: [{ path: "/blobs_backend", message: `must be one of ${BLOB_BACKENDS.join(", ")}` }],
      });
    if (input.cert_resolver !== undefined) acmeDirectory(input.cert_resolver, process.env);

    // images: the call's (pinned), else what compose.prod.yaml pins already (release's), else a placeholder
    const ws = ctx.workspace(app);
    const existing = await ws.read("compose.prod.yaml");
    let pinnedBefore: Record<string, string> = {};
    if (existing !== undefined) {
      try {
        const c = parseCompose(existing, "compose.prod.yaml");
        pinnedBefore = Object.fromEntries(
          Object.values(c.services).flatMap((s) => (s.image && isPinned(s.image) ? [[s.name, s.image]] : [])),
        );
      } catch {
        pinnedBefore = {}; // a file edited beyond the subset: rewritten whole
      }
    }
    const webImage =
      pinnedInput("web_image", input.web_image) ?? pinnedBefore.web ?? UNPUBLISHED_WEB(ctx.app);
    const platformImage =
      pinnedInput("data_plane_image", input.data_plane_image) ??
      pinnedBefore.dataplane ??
      UNPUBLISHED_PLATFORM;
    const readiness = input.readiness_path ?? DEFAULT_READINESS;
    const inputs = {
      app: ctx.app,
      platform: input.platform ?? app.platform,
      framework: input.framework ?? app.framework,
      host,
      readiness_path: readiness,
      web_image: webImage,
      data_plane_image: platformImage,
      cert_resolver: input.cert_resolver,
      blobs_backend: blobs as (typeof BLOB_BACKENDS)[number],
      observability: input.observability ?? false,
      mcp_mtls_host: input.mcp_mtls_host?.toLowerCase(),
      mcp_mtls_tls_options: input.mcp_mtls_tls_options,
      secrets: await ctx.state.listVaultNames(),
    };
    const files = renderArtifacts(inputs);
    const hashes = ARTIFACT_FILES.map((path) => ({ path, sha256: sha256(files[path]) }));
    const current = await Promise.all(ARTIFACT_FILES.map((p) => ws.read(p)));
    const changed = ARTIFACT_FILES.filter((p, i) => current[i] !== files[p]);
    for (const path of ARTIFACT_FILES)
      ctx.outbox.files.push({ path: `${app.workspace}/${path}`, content: files[path] });
    // the app's own .env.prod, empty, when there is none (never committed; the platform's values come at roll time)
    ctx.outbox.files.push({
      path: `${app.workspace}/${PROD_ENV_FILE}`,
      content: renderEnvProd(inputs),
      keep_existing: true,
      mode: 0o600,
    });
    // .gitignore: .env.prod stays out, its example goes in (workspaces made before the rule)
    const ignore = await ws.read(".gitignore");
    if (ignore !== undefined && !ignore.split("\n").includes("!.env.*.example"))
      ctx.outbox.files.push({
        path: `${app.workspace}/.gitignore`,
        content: `${ignore.endsWith("\n") || ignore === "" ? ignore : `${ignore}\n`}.env.*\n!.env.*.example\n`,
      });

    const iso = ctx.now.toISOString();
    const previous = (await ctx.state.listResources("ProductionArtifacts")).sort((a, b) =>
      a.created_at < b.created_at ? 1 : -1,
    )[0];
    const fields = {
      host,
      platform: input.platform ?? app.platform,
      framework: input.framework ?? app.framework,
      readiness_path: readiness,
      web_image: webImage,
      data_plane_image: platformImage,
      pinned: isPinned(webImage),
      cert_resolver: input.cert_resolver ?? null,
      blobs_backend: blobs,
      observability: input.observability ?? false,
      mcp_mtls_host: input.mcp_mtls_host?.toLowerCase() ?? null,
      mcp_mtls_tls_options: input.mcp_mtls_tls_options ?? null,
      files: hashes,
      changed,
    };
    const resource = ctx.resource("ProductionArtifacts", "succeeded", fields, previous);
    ctx.putResource(resource, previous);
    if (app.host !== host) {
      ctx.outbox.apps.push({ key: keys.app(ctx.app), record: { ...app, host, updated_at: iso } });
      const appDoc = await ctx.state.getResource("Application", app.resource_id);
      if (appDoc) ctx.putResource({ ...appDoc, host, updated_at: iso }, appDoc);
    }
    ctx.log(
      resource.id,
      changed.length
        ? `wrote ${changed.join(", ")} for ${host}`
        : `the production artifacts for ${host} are current (nothing changed)`,
    );
    ctx.after({
      kind: "workspace.commit",
      workspace: app.workspace,
      message: `productionize: production artifacts for ${host}`,
      resource_id: resource.id,
    });
    ctx.emit("ProductionArtifactsGenerated", resource, { host, files: hashes, changed });
    return { status: "succeeded", resource };
  },
});
