import { createRequire } from "node:module";
import { Ajv, type ErrorObject } from "ajv";
import {
  type ErrorDetail,
  MCP_SCHEMA_MAX_BYTES,
  MCP_SCHEMA_MAX_DEPTH,
  type McpTool,
  PlatformError,
} from "../proto/mod.js";

// read with require: a JSON import needs an import attribute that some bundle targets drop
const secureMetaSchema = createRequire(import.meta.url)("ajv/dist/refs/json-schema-secure.json") as object;

/**
 * A tool's input schema (docs/mcp.md): a JSON Schema (draft-07) object schema
 * compiled with ajv when the tool is registered (refused with a 400 naming
 * why), and again, once per tool and schema, in the gateway that checks a
 * tools/call's arguments against it. The same rules as agent-run's schema
 * (actors/tasks/agent-run.ts): known keywords only, no `$id`, no remote
 * references, and safe for untrusted input (ajv's secure meta-schema: a
 * `pattern` needs `maxLength`, ...), since the arguments come from a model.
 */

/** The JSON Schema dialect the schema is read as. */
const DRAFT_07 = /^https?:\/\/json-schema\.org\/draft-07\/schema#?$/;
/** Most problems named in one answer. */
const MAX_DETAILS = 20;

/** A compiled check of a tool's arguments: [] when they match, else the problems by JSON pointer. */
export type ArgumentCheck = (value: unknown) => ErrorDetail[];

let shared: { ajv: Ajv; secure: ReturnType<Ajv["compile"]> } | undefined;
/** One ajv for the process (draft-07, strict keywords, formats not checked); compiled schemas are removed again. */
function ajv() {
  if (!shared) {
    const a = new Ajv({
      allErrors: true,
      strict: true,
      strictTypes: false,
      strictTuples: false,
      strictRequired: false,
      validateFormats: false,
      logger: false,
    });
    shared = { ajv: a, secure: a.compile(secureMetaSchema) };
  }
  return shared;
}

const clip = (s: string, max = 300) => (s.length > max ? `${s.slice(0, max)}...` : s);

function detailOf(e: ErrorObject, prefix = ""): ErrorDetail {
  const p = e.params as { missingProperty?: string; additionalProperty?: string };
  if (e.keyword === "required" && p.missingProperty !== undefined)
    return { path: clip(`${prefix}${e.instancePath}/${p.missingProperty}`, 200), message: "is required" };
  if (e.keyword === "additionalProperties" && p.additionalProperty !== undefined)
    return {
      path: clip(`${prefix}${e.instancePath}/${p.additionalProperty}`, 200),
      message: "unknown field",
    };
  return { path: clip(`${prefix}${e.instancePath}`, 200), message: clip(e.message ?? e.keyword, 200) };
}

function depthOf(v: unknown, depth = 0): number {
  if (depth > MCP_SCHEMA_MAX_DEPTH || v === null || typeof v !== "object") return depth;
  let max = depth + 1;
  for (const child of Object.values(v as object)) max = Math.max(max, depthOf(child, depth + 1));
  return max;
}

function hasId(v: unknown): boolean {
  if (v === null || typeof v !== "object") return false;
  if (!Array.isArray(v) && Object.hasOwn(v, "$id")) return true;
  return Object.values(v as object).some(hasId);
}

function refuse(message: string, details: ErrorDetail[] = []): never {
  throw new PlatformError("invalid_input", `input_schema: ${message}`, {
    details: details.length ? details.slice(0, MAX_DETAILS) : [{ path: "/input_schema", message }],
  });
}

/**
 * Compiles a tool's input schema, or throws `400 invalid_input` naming why: a
 * JSON Schema (draft-07) with `"type": "object"` at the top, at most 16 KiB
 * and 32 levels deep, without `$id`, with known keywords only, safe for
 * untrusted input.
 */
export function compileInputSchema(schema: Record<string, unknown>): ArgumentCheck {
  if (Buffer.byteLength(JSON.stringify(schema), "utf8") > MCP_SCHEMA_MAX_BYTES)
    refuse(`must be at most ${MCP_SCHEMA_MAX_BYTES} bytes of JSON`);
  if (depthOf(schema) > MCP_SCHEMA_MAX_DEPTH) refuse(`must be at most ${MCP_SCHEMA_MAX_DEPTH} levels deep`);
  if (schema.type !== "object")
    refuse('must describe an object (`"type": "object"` at the top): MCP tool arguments are an object', [
      { path: "/input_schema/type", message: 'must be "object"' },
    ]);
  if (schema.$schema !== undefined && !(typeof schema.$schema === "string" && DRAFT_07.test(schema.$schema)))
    refuse("$schema: only JSON Schema draft-07 is supported (leave $schema out)", [
      { path: "/input_schema/$schema", message: "must be http://json-schema.org/draft-07/schema#" },
    ]);
  if (hasId(schema)) refuse("$id is not supported: use local references (#/definitions/...)");
  const { ajv: a, secure } = ajv();
  if (!secure(schema))
    refuse(
      `not a JSON Schema safe for untrusted input: ${(secure.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ")}`,
      (secure.errors ?? []).map((e) => detailOf(e, "/input_schema")),
    );
  let validate: ReturnType<Ajv["compile"]>;
  try {
    validate = a.compile(schema);
  } catch (e) {
    refuse(`not a JSON Schema: ${clip(e instanceof Error ? e.message : String(e), 500)}`);
  } finally {
    a.removeSchema(schema);
  }
  return (value) => (validate(value) ? [] : (validate.errors ?? []).map((e) => detailOf(e)));
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
