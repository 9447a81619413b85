/** Mail connectors (docs/connectors.md): provider configuration and their HTTP APIs. */
export * from "./config.js";
export * from "./http.js";
