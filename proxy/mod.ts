/**
 * proxy: the edge proxy (DESIGN §8, docs/proxy.md): app traffic by host to the upstreams of the
 * routes in `slipway_routes`, over HTTP and HTTPS; the one public face of this folder (other
 * folders import `proxy/mod.js`, never a file inside: biome.json).
 */
export type { AccessLogSettings } from "./access-log.js";
export type { AcmeSettings } from "./acme.js";
export type { ProbeSettings } from "./health.js";
export { type ProxyHandle, type ProxyOptions, startProxy } from "./proxy.js";
export { serverNameOf } from "./client-hello.js";
export type { PoolSettings } from "./upstreams.js";
