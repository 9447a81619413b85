/**
 * actors: the runtime (nodes, partitions, app actors, the scheduler) and the
 * one public face of this folder; other folders import `actors/mod.js`, never
 * a file inside (biome.json). Test hooks live in actors/testing.ts, which
 * only tests and benchmarks import.
 */
export type { ApplyTrace } from "./app-actor.js";
export { type NodeHandle, type NodeOptions, startNode } from "./runtime.js";
export { type SchedulerHandle, type SchedulerOptions, startScheduler } from "./scheduler.js";
