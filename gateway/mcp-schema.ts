import { compileObjectSchema, type SchemaCheck } from "../effects/mod.js";
import { MCP_SCHEMA_MAX_BYTES, MCP_SCHEMA_MAX_DEPTH, type McpTool } from "../proto/mod.js";

/**
 * A tool's input schema (docs/mcp.md): a JSON Schema (draft-07) object schema
 * compiled with ajv when the tool is registered (refused with a 400 naming
 * why), and again, once per tool and schema, in the gateway that checks a
 * tools/call's arguments against it. The same rules as agent-run's schema
 * (actors/tasks/agent-run.ts): known keywords only, no `$id`, no remote
 * references, and safe for untrusted input (ajv's secure meta-schema: a
 * `pattern` needs `maxLength`, ...), since the arguments come from a model.
 */

/** Most problems named in one answer. */
const MAX_DETAILS = 20;

/** A compiled check of a tool's arguments: [] when they match, else the problems by JSON pointer. */
export type ArgumentCheck = SchemaCheck;

/**
 * Compiles a tool's input schema, or throws `400 invalid_input` naming why: a
 * JSON Schema (draft-07) with `"type": "object"` at the top, at most 16 KiB
 * and 32 levels deep, without `$id`, with known keywords only, safe for
 * untrusted input.
 */
export function compileInputSchema(schema: Record<string, unknown>): ArgumentCheck {
  return compileObjectSchema(schema, {
    field: "input_schema",
    maxBytes: MCP_SCHEMA_MAX_BYTES,
    maxDepth: MCP_SCHEMA_MAX_DEPTH,
    maxDetails: MAX_DETAILS,
    objectWhy: "MCP tool arguments are an object",
    safeFor: "untrusted input (it is not a JSON Schema safe for a model's arguments)",
    compilePrefix: "not a JSON Schema: ",
  });
}

/** Compiled argument checks by app and tool, kept while the tool's schema stays the same. */
export class ArgumentChecks {
  private readonly checks = new Map<string, { src: string; check: ArgumentCheck }>();
  private readonly max: number;

  constructor(max = 4096) {
    this.max = max;
  }

  /** The check of `tool`'s current schema (compiled on first use, or when the schema changed). */
  of(app: string, tool: McpTool): ArgumentCheck {
    const key = `${app}\n${tool.name}`;
    const src = JSON.stringify(tool.input_schema);
    const known = this.checks.get(key);
    if (known && known.src === src) return known.check;
    const check = compileInputSchema(tool.input_schema);
    if (this.checks.size >= this.max) this.checks.clear();
    this.checks.set(key, { src, check });
    return check;
  }
}
