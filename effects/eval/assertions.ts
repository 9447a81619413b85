import { boundedRegExp } from "../safe-pattern.js";
import { jsonEqual, parseJsonPath, readJsonPath } from "./json-path.js";
import type { ArgumentMatcher, Assertion, AssertionKind } from "./suite-schema.js";

/**
 * eval's assertions (docs/eval.md#assertions), run on what a conversation did: the tool calls the
 * model made (with their arguments) and its final answer. Patterns come from the suite (caller
 * input): they were checked as safe when the suite was read and run with their length bound here.
 */

/** A tool call the model made. */
export interface MadeCall {
  tool: string;
  arguments: unknown;
  /** The MCP server's answer was a tool error (or the call failed). */
  is_error: boolean;
}

/** What the assertions look at. */
export interface Outcome {
  calls: readonly MadeCall[];
  /** The final answer's text ("" when the model never ended its turn). */
  answer: string;
}

/** One assertion's verdict. */
export interface AssertionResult {
  kind: AssertionKind;
  ok: boolean;
  /** What was asserted and, when it failed, what was found. */
  message: string;
}

const show = (v: unknown, max = 120) => {
  const s = JSON.stringify(v) ?? "undefined";
  return s.length > max ? `${s.slice(0, max)}...` : s;
};

/** Why an argument does not match, or undefined when it does. */
function argumentMismatch(args: unknown, name: string, m: ArgumentMatcher): string | undefined {
  const obj =
    args !== null && typeof args === "object" && !Array.isArray(args)
      ? (args as Record<string, unknown>)
      : {};
  const present = Object.hasOwn(obj, name);
  const v = obj[name];
  if (m.present !== undefined)
    return present === m.present ? undefined : `${name} is ${present ? "present" : "absent"}`;
  if (!present) return `${name} is absent`;
  if (m.equals !== undefined)
    return jsonEqual(v, m.equals) ? undefined : `${name} is ${show(v)}, not ${show(m.equals)}`;
  if (typeof v !== "string") return `${name} is ${show(v)}, not a string`;
  if (m.contains !== undefined)
    return v.includes(m.contains) ? undefined : `${name} ${show(v)} does not contain ${show(m.contains)}`;
  if (m.matches !== undefined) {
    const re = boundedRegExp(m.matches, "u");
    if (v.length > re.limit)
      return `${name} is ${v.length} characters, over the ${re.limit} the pattern may run on`;
    return re.test(v) ? undefined : `${name} ${show(v)} does not match ${show(m.matches)}`;
  }
  return undefined;
}

/** The first argument mismatch of a call, or undefined when every matcher holds. */
function callMismatch(call: MadeCall, args: Record<string, ArgumentMatcher> | undefined): string | undefined {
  for (const [name, m] of Object.entries(args ?? {})) {
    const why = argumentMismatch(call.arguments, name, m);
    if (why) return why;
  }
  return undefined;
}

/** The JSON of an answer: the whole text, else the first fenced code block. */
function answerJson(answer: string): { ok: true; value: unknown } | { ok: false } {
  const tryParse = (s: string) => {
    try {
      return { ok: true as const, value: JSON.parse(s) as unknown };
    } catch {
      return { ok: false as const };
    }
  };
  const whole = tryParse(answer.trim());
  if (whole.ok) return whole;
  const open = answer.indexOf("```");
  if (open < 0) return { ok: false };
  const start = answer.indexOf("\n", open);
  const close = start < 0 ? -1 : answer.indexOf("```", start);
  return close < 0 ? { ok: false } : tryParse(answer.slice(start + 1, close).trim());
}

/** Runs one assertion. */
export function runAssertion(a: Assertion, o: Outcome): AssertionResult {
  const called = (tool: string) => o.calls.filter((c) => c.tool === tool);
  if (a.tool_called !== undefined) {
    const n = called(a.tool_called).length;
    return {
      kind: "tool_called",
      ok: n > 0,
      message: `${a.tool_called} called${n ? ` (${n}×)` : ": it was not"}`,
    };
  }
  if (a.tool_not_called !== undefined) {
    const n = called(a.tool_not_called).length;
    return {
      kind: "tool_not_called",
      ok: n === 0,
      message: `${a.tool_not_called} not called${n ? `: it was (${n}×)` : ""}`,
    };
  }
  if (a.tool_called_with !== undefined) {
    const { tool, arguments: args } = a.tool_called_with;
    const calls = called(tool);
    if (calls.length === 0)
      return { kind: "tool_called_with", ok: false, message: `${tool} called: it was not` };
    const whys = calls.map((c) => callMismatch(c, args));
    const ok = whys.some((w) => w === undefined);
    return {
      kind: "tool_called_with",
      ok,
      message: ok
        ? `${tool} called with the arguments expected`
        : `${tool} called, but ${whys[whys.length - 1]}`,
    };
  }
  if (a.answer_contains !== undefined) {
    const ok = o.answer.includes(a.answer_contains);
    return {
      kind: "answer_contains",
      ok,
      message: `answer contains ${show(a.answer_contains)}${ok ? "" : ": it does not"}`,
    };
  }
  if (a.answer_not_contains !== undefined) {
    const ok = !o.answer.includes(a.answer_not_contains);
    return {
      kind: "answer_not_contains",
      ok,
      message: `answer does not contain ${show(a.answer_not_contains)}${ok ? "" : ": it does"}`,
    };
  }
  if (a.answer_matches !== undefined) {
    const re = boundedRegExp(a.answer_matches, "u");
    if (o.answer.length > re.limit)
      return {
        kind: "answer_matches",
        ok: false,
        message: `answer matches ${show(a.answer_matches)}: the answer is ${o.answer.length} characters, over the ${re.limit} the pattern may run on`,
      };
    const ok = re.test(o.answer);
    return {
      kind: "answer_matches",
      ok,
      message: `answer matches ${show(a.answer_matches)}${ok ? "" : ": it does not"}`,
    };
  }
  if (a.answer_json_path !== undefined) {
    const { path, equals } = a.answer_json_path;
    const what = `answer ${path} equals ${show(equals)}`;
    const json = answerJson(o.answer);
    if (!json.ok) return { kind: "answer_json_path", ok: false, message: `${what}: the answer is not JSON` };
    const steps = parseJsonPath(path);
    if (steps instanceof Error)
      return { kind: "answer_json_path", ok: false, message: `${what}: ${steps.message}` };
    const got = readJsonPath(json.value, steps);
    if (!got.found)
      return { kind: "answer_json_path", ok: false, message: `${what}: ${path} is not in the answer` };
    const ok = jsonEqual(got.value, equals);
    return { kind: "answer_json_path", ok, message: ok ? what : `${what}: it is ${show(got.value)}` };
  }
  throw new TypeError("an assertion of no known kind (the suite was not checked)");
}

/** Runs every assertion of a case, in order. */
export function runAssertions(assertions: readonly Assertion[], o: Outcome): AssertionResult[] {
  return assertions.map((a) => runAssertion(a, o));
}
