import type Anthropic from "@anthropic-ai/sdk";
import { isModelError, type ModelConfig } from "../model.js";
import { conversationTurn } from "./messages.js";
import type { MadeCall } from "./assertions.js";
import type { Tokens } from "./estimate.js";
import type { McpSession, McpTool } from "./mcp-client.js";
import type { PlannedCase } from "./suite.js";

/**
 * eval's loop for one model and one case (docs/eval.md#the-loop): a Messages API conversation whose
 * tools are the MCP server's, each tool_use called through the MCP client and its answer given back
 * as a tool_result (a tool error as `is_error`), until the model ends its turn or `max_turns` calls
 * were made. Nothing here throws for what the model or the server did: it is the case's failure.
 */

/** One entry of a transcript. */
export type TranscriptEntry =
  | { role: "system"; text: string }
  | { role: "user"; text: string }
  | {
      role: "assistant";
      text: string;
      tool_calls: { id: string; tool: string; arguments: unknown }[];
      stop_reason: string | null;
      usage: Tokens;
    }
  | { role: "tool"; id: string; tool: string; is_error: boolean; text: string };

/** Why a conversation did not end with an answer. */
export interface ConversationFailure {
  code: "max_turns" | "model_error" | "budget";
  message: string;
}

export interface ConversationResult {
  transcript: TranscriptEntry[];
  calls: MadeCall[];
  answer: string;
  turns: number;
  usage: Tokens;
  failure?: ConversationFailure;
}

/** What the loop asks of the run around it. */
export interface ConversationHooks {
  /** May a call with about this many input tokens and this output ceiling be made within the budget? */
  allows(inputTokens: number, maxTokens: number): boolean;
  /** Counts what a call used (as soon as it answered). */
  spent(usage: Tokens): void;
  signal?: AbortSignal;
}

/** Tool names as the Messages API takes them (`^[a-zA-Z0-9_-]{1,64}$`), and back to the MCP names. */
export function apiToolNames(tools: readonly McpTool[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const t of tools) {
    const base = t.name.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 60) || "tool";
    let name = base;
    for (let i = 2; out.has(name); i++) name = `${base}_${i}`;
    out.set(name, t.name);
  }
  return out;
}

const textOf = (blocks: readonly Anthropic.ContentBlock[]) =>
  blocks
    .filter((b): b is Anthropic.TextBlock => b.type === "text")
    .map((b) => b.text)
    .join("\n")
    .trim();

/** The assistant's blocks as they are sent back (text and tool_use; anything else is left out). */
function asParams(blocks: readonly Anthropic.ContentBlock[]): Anthropic.ContentBlockParam[] {
  const out: Anthropic.ContentBlockParam[] = [];
  for (const b of blocks) {
    if (b.type === "text") out.push({ type: "text", text: b.text });
    else if (b.type === "tool_use") out.push({ type: "tool_use", id: b.id, name: b.name, input: b.input });
  }
  return out;
}

/** Runs one conversation of `c` with `model`. */
export async function runConversation(
  cfg: ModelConfig,
  model: string,
  c: PlannedCase,
  mcp: McpSession,
  hooks: ConversationHooks,
): Promise<ConversationResult> {
  const names = apiToolNames(mcp.tools);
  const byMcp = new Map([...names].map(([api, m]) => [m, api]));
  const tools: Anthropic.Tool[] = mcp.tools.map((t) => ({
    name: byMcp.get(t.name)!,
    description: t.description,
    input_schema: { ...t.input_schema, type: "object" } as Anthropic.Tool.InputSchema,
  }));
  const transcript: TranscriptEntry[] = [];
  if (c.system) transcript.push({ role: "system", text: c.system });
  const messages: Anthropic.MessageParam[] = c.messages.map((m) => {
    transcript.push(
      m.role === "user"
        ? { role: "user", text: m.content }
        : {
            role: "assistant",
            text: m.content,
            tool_calls: [],
            stop_reason: null,
            usage: { input_tokens: 0, output_tokens: 0 },
          },
    );
    return { role: m.role, content: m.content };
  });
  const out: ConversationResult = {
    transcript,
    calls: [],
    answer: "",
    turns: 0,
    usage: { input_tokens: 0, output_tokens: 0 },
  };
  const fixed = (c.system ?? "").length + JSON.stringify(tools).length;
  for (let turn = 1; turn <= c.max_turns; turn++) {
    const inputTokens = Math.ceil((fixed + JSON.stringify(messages).length) / 4);
    if (!hooks.allows(inputTokens, c.max_tokens)) {
      out.failure = {
        code: "budget",
        message: `budget: stopped before turn ${turn}: its call could take the run past its budget`,
      };
      return out;
    }
    let answer: Awaited<ReturnType<typeof conversationTurn>>;
    try {
      answer = await conversationTurn(
        { ...cfg, model },
        {
          ...(c.system ? { system: c.system } : {}),
          messages,
          tools,
          maxTokens: c.max_tokens,
          temperature: c.temperature,
          ...(hooks.signal ? { signal: hooks.signal } : {}),
        },
      );
    } catch (e) {
      if (!isModelError(e) || hooks.signal?.aborted) throw e;
      out.failure = { code: "model_error", message: `model: ${e.message}` };
      return out;
    }
    out.turns = turn;
    out.usage.input_tokens += answer.usage.input_tokens;
    out.usage.output_tokens += answer.usage.output_tokens;
    hooks.spent(answer.usage);
    const uses = answer.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
    const text = textOf(answer.content);
    transcript.push({
      role: "assistant",
      text,
      tool_calls: uses.map((u) => ({ id: u.id, tool: names.get(u.name) ?? u.name, arguments: u.input })),
      stop_reason: answer.stop_reason,
      usage: answer.usage,
    });
    if (answer.stop_reason !== "tool_use" || uses.length === 0) {
      out.answer = text;
      return out;
    }
    const results: Anthropic.ToolResultBlockParam[] = [];
    for (const u of uses) {
      const tool = names.get(u.name);
      const args =
        u.input !== null && typeof u.input === "object" && !Array.isArray(u.input)
          ? (u.input as Record<string, unknown>)
          : {};
      const r = tool
        ? await mcp.call(tool, args, hooks.signal)
        : { text: `unknown tool ${u.name}: the MCP server does not list it`, is_error: true };
      out.calls.push({ tool: tool ?? u.name, arguments: u.input, is_error: r.is_error });
      transcript.push({ role: "tool", id: u.id, tool: tool ?? u.name, is_error: r.is_error, text: r.text });
      results.push({
        type: "tool_result",
        tool_use_id: u.id,
        content: r.text,
        ...(r.is_error ? { is_error: true } : {}),
      });
    }
    messages.push({ role: "assistant", content: asParams(answer.content) });
    messages.push({ role: "user", content: results });
  }
  out.failure = {
    code: "max_turns",
    message: `max_turns: the model was still calling tools after ${c.max_turns} turns`,
  };
  return out;
}
