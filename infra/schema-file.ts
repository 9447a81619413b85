/**
 * The published JSON Schema of `slipway.infra.yaml`: docs/infra.schema.json, generated from the
 * TypeBox schema (infra/config.ts). `node scripts/infra-schema.mjs` (after tsc) writes it;
 * test/infra/config.test.ts fails when the file lags behind the schema.
 */
import { InfraFileSchema } from "./config.js";

/** Where the schema is published, relative to the repository's root. */
export const INFRA_SCHEMA_PATH = "docs/infra.schema.json";

/** The JSON Schema document (draft 2020-12) of the infrastructure file. */
export function infraJsonSchema(): Record<string, unknown> {
  // TypeBox keeps its own markers out of the enumerable properties: JSON holds the schema only
  const schema = JSON.parse(JSON.stringify(InfraFileSchema)) as Record<string, unknown>;
  return { $schema: "https://json-schema.org/draft/2020-12/schema", ...schema };
}

/** The text of docs/infra.schema.json. */
export function infraJsonSchemaText(): string {
  return `${JSON.stringify(infraJsonSchema(), null, 2)}\n`;
}
