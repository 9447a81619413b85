#!/usr/bin/env node
// Writes docs/infra.schema.json from the TypeBox schema of slipway.infra.yaml (infra/config.ts).
// Run after tsc (npm run build): node scripts/infra-schema.mjs
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const mod = await import(pathToFileURL(join(root, "dist", "infra", "schema-file.js")).href);
writeFileSync(join(root, mod.INFRA_SCHEMA_PATH), mod.infraJsonSchemaText());
process.stderr.write(`infra-schema: wrote ${mod.INFRA_SCHEMA_PATH}\n`);
