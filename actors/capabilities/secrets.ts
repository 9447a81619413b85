import { defineHandler, type HandlerContext } from "../context.js";
import {
  PlatformError,
  keys,
  commandFieldAad,
  refuseReservedSecretName,
  secretAad,
} from "../../proto/mod.js";

async function requireApp(ctx: HandlerContext, name: string): Promise<void> {
  if (!(await ctx.state.getApp())) throw new PlatformError("unknown_app", `app ${ctx.app} does not exist`);
  // the gateway refuses them first (proto/capabilities/runtime.ts); a command that did not pass it neither
  refuseReservedSecretName(name);
}

/** set-secret: seals the value into the vault; the Secret resource carries the name only. */
export const setSecret = defineHandler("set-secret", {
  handle: async (ctx, input) => {
    const name = input.name;
    await requireApp(ctx, name);
    const sealedIn = ctx.cmd.sealed?.value;
    if (!sealedIn)
      throw new PlatformError("invalid_input", "value: is required", {
        details: [{ path: "/value", message: "is required" }],
      });
    const value = ctx.vault.open(sealedIn, commandFieldAad(ctx.cmd.id, "value"));
    if (value.includes(0)) {
      value.fill(0);
      throw new PlatformError("invalid_input", "value: a NUL character cannot be passed to a process", {
        details: [{ path: "/value", message: "holds a NUL character" }],
      });
    }
    const existing = await ctx.state.getVaultEntry(name);
    const iso = ctx.now.toISOString();
    const previous = existing ? await ctx.state.getResource("Secret", existing.resource_id) : undefined;
    const version = (existing?.version ?? 0) + 1;
    const sealed = ctx.vault.seal(value, secretAad(ctx.app, name));
    value.fill(0);
    // a first version gets a new id; later ones keep the Secret's
    const resource = ctx.resource(
      "Secret",
      "succeeded",
      { name, key_id: sealed.kid, version },
      existing ? { id: existing.resource_id, created_at: previous?.created_at ?? iso } : undefined,
    );
    const id = resource.id;
    ctx.outbox.vault.push({
      key: keys.vault(ctx.app, name),
      entry: { sealed, resource_id: id, version, updated_at: iso },
    });
    ctx.putResource(resource, previous);
    ctx.log(id, `sealed ${name} (version ${version}, key ${sealed.kid})`);
    ctx.emit("SecretSet", resource, { name, version, key_id: sealed.kid });
    return { status: "succeeded", resource };
  },
});

/** unset-secret: removes the value from the vault and deletes the Secret resource. */
export const unsetSecret = defineHandler("unset-secret", {
  handle: async (ctx, input) => {
    const name = input.name;
    await requireApp(ctx, name);
    const existing = await ctx.state.getVaultEntry(name);
    if (!existing) throw new PlatformError("not_found", `secret ${name} of app ${ctx.app} does not exist`);
    const iso = ctx.now.toISOString();
    const previous = await ctx.state.getResource("Secret", existing.resource_id);
    const resource = ctx.resource(
      "Secret",
      "succeeded",
      { name, key_id: existing.sealed.kid, version: existing.version },
      { id: existing.resource_id, created_at: previous?.created_at ?? iso },
    );
    ctx.outbox.vault.push({ key: keys.vault(ctx.app, name), entry: null });
    ctx.deleteResource(resource);
    ctx.log(resource.id, `removed ${name} from the vault`);
    ctx.emit("SecretUnset", resource, { name });
    return { status: "succeeded", resource };
  },
});
