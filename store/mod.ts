/**
 * store: the bus (NATS, JetStream streams and KV), the vault, the read index
 * and the embedded nats-server; the one public face of this folder (other
 * folders import `store/mod.js`, never a file inside: biome.json).
 */
export * from "./app-events.js";
export * from "./bus.js";
export * from "./bus-errors.js";
export * from "./connector-grants.js";
export * from "./embedded-nats.js";
export * from "./kv-keys.js";
export * from "./logs.js";
export * from "./nats-auth.js";
export * from "./nats-identities.js";
export * from "./nats-permissions.js";
export * from "./publisher.js";
export * from "./read-index.js";
export * from "./read-stream.js";
export * from "./vault.js";
export * from "./vault-rotate.js";
export * from "./workspace-store.js";
