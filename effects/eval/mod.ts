/** eval (docs/eval.md): the suite, its cost, the assertions, the loop, the judge. */
export * from "./suite-schema.js";
export * from "./suite.js";
export * from "./estimate.js";
export * from "./assertions.js";
export * from "./json-path.js";
export * from "./conversation.js";
export * from "./judge.js";
export * from "./mcp-client.js";
export * from "./run.js";
export * from "./trace.js";
export * from "./messages.js";
