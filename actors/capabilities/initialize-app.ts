import { createHash, randomBytes } from "node:crypto";
import { defineHandler } from "../context.js";
import {
  PlatformError,
  newResourceId,
  partitionOf,
  type AppRecord,
  type Resource,
  newServiceKey,
  keys,
  envFileAad,
  serviceKeyAad,
} from "../../proto/mod.js";
import { renderStarter } from "../../starter/mod.js";

/** Hash under which a data-plane token is stored (the token itself never is). */
export function tokenHash(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/**
 * initialize-app: registers the app, mints its data-plane token (answered
 * once, written to the app's `.env`, stored only as a hash) and service key,
 * writes the starter into the workspace, emits ApplicationInitialized.
 */
export const initializeApp = defineHandler("initialize-app", {
  handle: async (ctx, input) => {
    const name = input.name;
    if (await ctx.state.getApp()) throw new PlatformError("already_exists", `app ${name} already exists`);
    const platform = input.platform ?? "node";
    const framework = input.framework ?? "node";
    const baseUrl = input.base_url ?? null;
    const token = `slw_${randomBytes(32).toString("base64url")}`;
    const serviceKey = newServiceKey();
    const iso = ctx.now.toISOString();
    const id = newResourceId("Application");
    const workspace = name;
    const record: AppRecord = {
      name,
      resource_id: id,
      token_hash: tokenHash(token),
      service_key: ctx.vault.seal(serviceKey, serviceKeyAad(name)),
      base_url: baseUrl,
      platform,
      framework,
      workspace,
      created_at: iso,
      updated_at: iso,
    };
    const resource: Resource = {
      type: "Application",
      id,
      app_id: name,
      status: "succeeded",
      created_at: iso,
      updated_at: iso,
      name,
      platform,
      framework,
      base_url: baseUrl,
      workspace,
      partition: partitionOf(name),
    };
    ctx.outbox.apps.push({ key: keys.app(name), record });
    ctx.putResource(resource);
    const files = renderStarter({ app: name, platform, framework });
    for (const f of files)
      ctx.outbox.files.push({
        path: `${workspace}/${f.path}`,
        content: f.content,
        keep_existing: true,
        ...(f.mode !== undefined ? { mode: f.mode } : {}),
      });
    const env = [
      `SLIPWAY_APP=${name}`,
      `SLIPWAY_TOKEN=${token}`,
      `SLIPWAY_SERVICE_KEY=${serviceKey}`,
      `SESSION_SECRET=${randomBytes(32).toString("base64url")}`,
      "",
    ].join("\n");
    ctx.outbox.files.push({
      path: `${workspace}/.env`,
      sealed: ctx.vault.seal(env, envFileAad(name, ctx.cmd.id)),
      aad: envFileAad(name, ctx.cmd.id),
      mode: 0o600,
    });
    ctx.log(
      id,
      `initialized app ${name} (platform ${platform}, framework ${framework}); ${files.length} starter files`,
    );
    // the workspace is a git repository from the start: the starter is its first commit
    ctx.after({
      kind: "workspace.commit",
      workspace,
      message: `initialize-app: the ${name} starter`,
      resource_id: id,
    });
    ctx.emit("ApplicationInitialized", resource, {
      name,
      platform,
      framework,
      base_url: baseUrl,
      files: files.length,
    });
    return {
      status: "succeeded",
      resource,
      result: { token, token_note: "shown once; also written to the app's .env as SLIPWAY_TOKEN" },
      sensitive: true,
    };
  },
});
