import type { Static, TSchema } from "typebox";
import { Compile } from "typebox/compile";
import { PlatformError, type ErrorDetail } from "./errors.js";
import { INPUT_SCHEMAS, type CapabilityName } from "./inputs.js";
import "./formats.js";

/**
 * The one codec: every value that enters a process (HTTP bodies, NATS
 * payloads, KV values, LevelDB values) is checked here against its schema.
 */

type Validator = ReturnType<typeof Compile>;
const cache = new WeakMap<TSchema, Validator>();

function validator(schema: TSchema): Validator {
  let v = cache.get(schema);
  if (!v) {
    v = Compile(schema);
    cache.set(schema, v);
  }
  return v;
}

/** A value from NATS, KV or LevelDB that does not match its schema. */
export class CodecError extends Error {
  override readonly name = "CodecError";
  readonly details: ErrorDetail[];
  constructor(what: string, details: ErrorDetail[]) {
    super(`${what}: ${details.map((d) => `${d.path || "/"} ${d.message}`).join("; ")}`);
    this.details = details;
  }
}

const list = (values: readonly unknown[]) => values.map((v) => JSON.stringify(v)).join(", ");

function details(v: Validator, value: unknown, max = 20): ErrorDetail[] {
  const out: ErrorDetail[] = [];
  // `anyOf` of constants (a union of literals): one message listing the allowed values
  const consts = new Map<string, unknown[]>();
  for (const e of v.Errors(value)) {
    if (e.keyword === "boolean") continue; // duplicate of additionalProperties
    if (e.keyword === "const") {
      const at = consts.get(e.instancePath) ?? [];
      at.push((e.params as { allowedValue?: unknown }).allowedValue);
      consts.set(e.instancePath, at);
      continue;
    }
    if (e.keyword === "additionalProperties") {
      const extra = (e.params as { additionalProperties?: string[] }).additionalProperties ?? [];
      for (const name of extra) out.push({ path: `${e.instancePath}/${name}`, message: "unknown field" });
    } else if (e.keyword === "required") {
      const req = (e.params as { requiredProperties?: string[] }).requiredProperties ?? [];
      if (req.length)
        for (const name of req) out.push({ path: `${e.instancePath}/${name}`, message: "is required" });
      else out.push({ path: e.instancePath, message: e.message });
    } else if (e.keyword === "enum") {
      const allowed = (e.params as { allowedValues?: unknown[] }).allowedValues ?? [];
      out.push({ path: e.instancePath, message: `must be one of ${list(allowed)}` });
    } else if (e.keyword === "anyOf" && consts.has(e.instancePath)) {
      out.push({ path: e.instancePath, message: `must be one of ${list(consts.get(e.instancePath)!)}` });
      consts.delete(e.instancePath);
    } else if (e.keyword === "format") {
      const format = (e.params as { format?: string }).format;
      out.push({ path: e.instancePath, message: FORMAT_MESSAGES[format ?? ""] ?? e.message });
    } else {
      out.push({ path: e.instancePath, message: e.message });
    }
    if (out.length >= max) break;
  }
  for (const [path, allowed] of consts)
    if (out.length < max) out.push({ path, message: `must be equal to ${list(allowed)}` });
  return out;
}

/** What a failed string format means, in the words of the HTTP contract. */
const FORMAT_MESSAGES: Record<string, string> = {
  "http-url": "must be an http or https URL without credentials, white space or backslashes",
  "app-path":
    "must be a path in the application: one leading /, no white space, control characters or backslashes",
  email: "must be an email address",
  "date-time": "must be an ISO 8601 date-time",
};

/** Checks a value against a schema; throws CodecError naming what failed. */
export function check<S extends TSchema>(schema: S, value: unknown, what: string): Static<S> {
  const v = validator(schema);
  if (!v.Check(value)) throw new CodecError(what, details(v, value));
  return value as Static<S>;
}

const dec = new TextDecoder();
/** Parses JSON bytes and checks them against a schema. */
export function decode<S extends TSchema>(schema: S, bytes: Uint8Array | string, what: string): Static<S> {
  let value: unknown;
  try {
    value = JSON.parse(typeof bytes === "string" ? bytes : dec.decode(bytes));
  } catch {
    throw new CodecError(what, [{ path: "", message: "not JSON" }]);
  }
  return check(schema, value, what);
}

export function encode(value: unknown): Uint8Array {
  return Buffer.from(JSON.stringify(value));
}

/** Validates a capability body; throws PlatformError invalid_input with every problem's path. */
export function validateInput(name: CapabilityName, body: unknown): Record<string, unknown> {
  return validateBody(INPUT_SCHEMAS[name], body) as Record<string, unknown>;
}

/** Validates a request body against a schema (the /auth routes); invalid_input with every problem's path. */
export function validateBody<S extends TSchema>(schema: S, body: unknown): Static<S> {
  const v = validator(schema);
  if (v.Check(body)) return body as Static<S>;
  const d = details(v, body);
  const first = d[0];
  const message = first ? `${first.path.slice(1) || "body"}: ${first.message}` : "invalid input";
  throw new PlatformError("invalid_input", message, { details: d });
}

/** JSON with object keys sorted at every depth: the same value always gives the same text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const o = value as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .filter((k) => o[k] !== undefined)
    .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
    .join(",")}}`;
}
