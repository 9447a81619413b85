import { createRequire } from "node:module";
import { Ajv, type ErrorObject } from "ajv";
import { type ErrorDetail, PlatformError } from "../proto/mod.js";
import { boundedRegExp, patternLimit, patternShape } from "./safe-pattern.js";

/**
 * A caller's JSON Schema of an object (agent-run's answer schema, an MCP
 * tool's input schema), compiled with ajv once and checked against untrusted
 * values (a model's answer, a model's tool arguments): draft-07, `type:
 * "object"` at the top, bounded in size and depth, no `$id`, known keywords
 * only, and safe for untrusted input (ajv's secure meta-schema: a `pattern`
 * needs `maxLength`, ...), with `pattern`s whose backtracking is bounded
 * (effects/safe-pattern.ts). A schema that is not is a `400 invalid_input`
 * naming why, under the caller's field.
 */

/** The JSON Schema dialect the schema is read as. */
const DRAFT_07 = /^https?:\/\/json-schema\.org\/draft-07\/schema#?$/;

/** A compiled check: [] when the value matches, else the problems by JSON pointer. */
export type SchemaCheck = (value: unknown) => ErrorDetail[];

/** How one caller names and bounds its schema. */
export interface ObjectSchemaRules {
  /** The body field, e.g. `schema` or `input_schema` (messages start `<field>: `, details `/<field>`). */
  field: string;
  maxBytes: number;
  maxDepth: number;
  /** Most problems named in one refusal. */
  maxDetails: number;
  /** Why the top must be an object, e.g. "it is the input of a tool". */
  objectWhy: string;
  /** What it must be safe for, e.g. "untrusted answers". */
  safeFor: string;
  /** Put before ajv's message when the schema does not compile (e.g. "not a JSON Schema: "). */
  compilePrefix?: string;
}

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
      // patterns run on untrusted strings: no nested quantifiers, strings no longer than they can take
      code: { regExp: boundedRegExp },
    });
    // read with require, when first needed: a JSON import needs an import attribute that some bundle
    // targets drop
    const secureMetaSchema = createRequire(import.meta.url)(
      "ajv/dist/refs/json-schema-secure.json",
    ) as object;
    shared = { ajv: a, secure: a.compile(secureMetaSchema) };
  }
  return shared;
}

export const clip = (s: string, max = 300) => (s.length > max ? `${s.slice(0, max)}...` : s);

/** An ajv error as a detail: the JSON pointer of the value it is about, and what is wrong. */
export function detailOf(e: ErrorObject, prefix = ""): ErrorDetail {
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

function depthOf(v: unknown, limit: number, depth = 0): number {
  if (depth > limit || v === null || typeof v !== "object") return depth;
  let max = depth + 1;
  for (const child of Object.values(v as object)) max = Math.max(max, depthOf(child, limit, depth + 1));
  return max;
}

function hasId(v: unknown): boolean {
  if (v === null || typeof v !== "object") return false;
  if (!Array.isArray(v) && Object.hasOwn(v, "$id")) return true;
  return Object.values(v as object).some(hasId);
}

/** The first `pattern` whose `maxLength` beside it is past what the pattern may run on. */
function patternsTooLong(
  v: unknown,
  path: string,
): { path: string; limit: number; varying: number } | undefined {
  if (v === null || typeof v !== "object") return undefined;
  const o = v as Record<string, unknown>;
  if (!Array.isArray(v) && typeof o.pattern === "string" && typeof o.maxLength === "number") {
    let shape: ReturnType<typeof patternShape> | undefined;
    try {
      shape = patternShape(o.pattern);
    } catch {
      shape = undefined; // ajv names the syntax error
    }
    if (shape && !("refused" in shape)) {
      const limit = patternLimit(shape);
      if (o.maxLength > limit) return { path, limit, varying: shape.varying };
    }
  }
  for (const [k, child] of Object.entries(o)) {
    const found = patternsTooLong(child, `${path}/${k}`);
    if (found) return found;
  }
  return undefined;
}

/** Compiles a caller's object schema, or throws `400 invalid_input` naming why (see the module's rules). */
export function compileObjectSchema(schema: Record<string, unknown>, r: ObjectSchemaRules): SchemaCheck {
  const refuse = (message: string, details: ErrorDetail[] = []): never => {
    throw new PlatformError("invalid_input", `${r.field}: ${message}`, {
      details: details.length ? details.slice(0, r.maxDetails) : [{ path: `/${r.field}`, message }],
    });
  };
  if (Buffer.byteLength(JSON.stringify(schema), "utf8") > r.maxBytes)
    refuse(`must be at most ${r.maxBytes} bytes of JSON`);
  if (depthOf(schema, r.maxDepth) > r.maxDepth) refuse(`must be at most ${r.maxDepth} levels deep`);
  if (schema.type !== "object")
    refuse(`must describe an object (\`"type": "object"\` at the top): ${r.objectWhy}`, [
      { path: `/${r.field}/type`, message: 'must be "object"' },
    ]);
  if (schema.$schema !== undefined && !(typeof schema.$schema === "string" && DRAFT_07.test(schema.$schema)))
    refuse("$schema: only JSON Schema draft-07 is supported (leave $schema out)", [
      { path: `/${r.field}/$schema`, message: "must be http://json-schema.org/draft-07/schema#" },
    ]);
  if (hasId(schema)) refuse("$id is not supported: use local references (#/definitions/...)");
  const { ajv: a, secure } = ajv();
  if (!secure(schema))
    refuse(
      `unsafe for ${r.safeFor}: ${(secure.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ")}`,
      (secure.errors ?? []).map((e) => detailOf(e, `/${r.field}`)),
    );
  const long = patternsTooLong(schema, `/${r.field}`);
  if (long)
    refuse(
      `${long.path}/maxLength: at most ${long.limit} with this pattern (the longer a string, the longer a pattern with ${long.varying} varying quantifiers may take on it): lower maxLength or simplify the pattern`,
      [{ path: `${long.path}/maxLength`, message: `must be at most ${long.limit} with this pattern` }],
    );
  let validate: ReturnType<Ajv["compile"]> | undefined;
  try {
    validate = a.compile(schema);
  } catch (e) {
    refuse(`${r.compilePrefix ?? ""}${clip(e instanceof Error ? e.message : String(e), 500)}`);
  } finally {
    a.removeSchema(schema);
  }
  const v = validate!;
  return (value) => (v(value) ? [] : (v.errors ?? []).map((e) => detailOf(e)));
}
