/**
 * gateway: the two planes' HTTP and WebSocket front (uWebSockets.js); the one
 * public face of this folder (bin/ imports `gateway/mod.js`: biome.json).
 */
export { AppDirectory, isLoopback, loadControlToken } from "./auth.js";
export { type ConsoleSettings, consoleSettingsFromEnv } from "./console.js";
export type { DevCallers } from "./guard.js";
export { DEFAULT_ORIGIN_POLICY, type OriginPolicy, originPolicyFromEnv } from "./origin.js";
export {
  DEFAULT_RATE_LIMITS,
  type RateLimit,
  type RateLimitConfig,
  RateLimitConfigError,
  rateLimitsFromEnv,
} from "./rate-limit.js";
export {
  type GatewayHandle,
  type GatewayOptions,
  PortInUseError,
  startGateway,
  uwsIsNative,
} from "./server.js";
