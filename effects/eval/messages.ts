import type Anthropic from "@anthropic-ai/sdk";
import { type ModelConfig, type ModelUsage, messagesCreate, readEnvelope } from "../model.js";

/**
 * One turn of eval's conversations: the Messages API through the platform's model client
 * (effects/model.ts: the SDK, the configured key, base URL, time-out and retries), with tools the
 * model may call or not.
 */

/** A turn's request. */
export interface ConversationRequest {
  system?: string;
  messages: Anthropic.MessageParam[];
  tools: Anthropic.Tool[];
  maxTokens: number;
  temperature?: number;
  signal?: AbortSignal;
}

/** The model's turn: its content blocks as the API gave them, its stop reason and usage. */
export interface ConversationTurn {
  id: string;
  model: string;
  content: Anthropic.ContentBlock[];
  stop_reason: string | null;
  usage: ModelUsage;
}

/**
 * Calls the model once (`tool_choice` auto) and returns its turn, the envelope checked. Throws
 * ModelCallError for a failed call, ModelAnswerError for an answer that is not a message.
 */
export async function conversationTurn(
  cfg: ModelConfig,
  req: ConversationRequest,
): Promise<ConversationTurn> {
  const raw = await messagesCreate(
    cfg,
    {
      model: cfg.model,
      max_tokens: req.maxTokens,
      ...(req.system !== undefined ? { system: req.system } : {}),
      ...(req.temperature !== undefined ? { temperature: req.temperature } : {}),
      messages: req.messages,
      ...(req.tools.length ? { tools: req.tools } : {}),
    },
    req.signal,
  );
  const msg = readEnvelope(raw);
  return {
    id: msg.id,
    model: msg.model,
    content: msg.content as Anthropic.ContentBlock[],
    stop_reason: msg.stop_reason,
    usage: { input_tokens: msg.usage.input_tokens, output_tokens: msg.usage.output_tokens },
  };
}
