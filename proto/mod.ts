/** proto: the single source of the catalogue, schemas, errors and bus names. */
export * from "./catalogue.js";
export * from "./codec.js";
export * from "./command.js";
export * from "./errors.js";
export * from "./events.js";
export * from "./ids.js";
export * from "./inputs.js";
export * from "./resources.js";
export * from "./subjects.js";
export * from "./records.js";
export * from "./service-token.js";
export * from "./schedule.js";
