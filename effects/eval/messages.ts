import type Anthropic from "@anthropic-ai/sdk";
import type { Static } from "typebox";
import { check, CodecError } from "../../proto/mod.js";
import {
  MessageEnvelopeSchema,
  type ModelConfig,
  ModelAnswerError,
  type ModelUsage,
  messagesCreate,
} from "../model.js";

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
  if (raw === null || typeof raw !== "object")
    throw new ModelAnswerError("not_json", "the API answered with an empty or non-JSON body");
  let msg: Static<typeof MessageEnvelopeSchema>;
  try {
    msg = check(MessageEnvelopeSchema, raw, "model answer");
  } catch (e) {
    if (e instanceof CodecError)
      throw new ModelAnswerError("not_message", `not a Messages API message: ${e.message}`, e.details);
    throw e;
  }
  return {
    id: msg.id,
    model: msg.model,
    content: msg.content as Anthropic.ContentBlock[],
    stop_reason: msg.stop_reason,
    usage: { input_tokens: msg.usage.input_tokens, output_tokens: msg.usage.output_tokens },
  };
}
