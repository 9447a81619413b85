import Type from "typebox";
import { declareCapability } from "../capability.js";
import { App, Obj, OptBool, OptInt, OptStr, OptStrList, Sensitive, Str, Url } from "../fields.js";
import { PlatformError } from "../errors.js";

/** send-email's built-in templates (their data schemas: actors/mail/templates.ts, docs/email.md). */
export const EMAIL_TEMPLATES = [
  "welcome",
  "verify-email",
  "password-reset",
  "magic-link",
  "incident-update",
] as const;

/** The data plane's services (spec 1.2, DESIGN §11): model runs, mail, telemetry. */

export const agentRun = declareCapability({
  name: "agent-run",
  plane: "data",
  resource_type: "AgentTask",
  c_number: "C1",
  events: ["AgentRunSucceeded", "AgentRunFailed", "ArtifactCreated"],
  skill_action_planned: true,
  long_running: true,
  built: true,
  example: { app: "shop", owner: "usr_1", input: "Summarize my open orders", schema: { type: "object" } },
  input: Obj({
    app: App,
    owner: Str("owner the task is scoped to", 256),
    capability: OptStr("name of the app capability the run serves", 128),
    system: OptStr("system prompt", 100_000),
    input: Str("input to the model", 500_000),
    schema: Type.Object({}, { additionalProperties: true, description: "JSON schema of the forced output" }),
    model: OptStr("model name", 128),
    max_tokens: OptInt("maximum output tokens", 1, 128_000),
  }),
});

export const sendEmail = declareCapability({
  name: "send-email",
  plane: "data",
  resource_type: "EmailDelivery",
  c_number: "C12",
  events: ["EmailSent", "EmailFailed"],
  skill_action_planned: true,
  long_running: true,
  built: true,
  example: { app: "shop", to: "ada@example.com", subject: "Your order shipped", text: "It is on its way." },
  input: Obj({
    app: App,
    to: Type.String({ format: "email", maxLength: 320, description: "recipient address" }),
    subject: OptStr("subject (required with inline html/text; overrides a template's)", 998),
    html: OptStr("HTML body (inline; not with template)", 1_000_000),
    text: OptStr("text body (inline; not with template)", 1_000_000),
    template: Type.Optional(
      Type.Enum(EMAIL_TEMPLATES, { description: "built-in template name (docs/email.md)" }),
    ),
    data: Type.Optional(
      Type.Object(
        {},
        { additionalProperties: true, description: "template data (its schema: docs/email.md)" },
      ),
    ),
  }),
  refine: (input) => {
    const bad = (field: string, message: string) =>
      new PlatformError("invalid_input", `${field}: ${message}`, {
        details: [{ path: `/${field}`, message }],
      });
    if (input.template !== undefined) {
      if (input.html !== undefined) throw bad("html", "not allowed with template (the template renders it)");
      if (input.text !== undefined) throw bad("text", "not allowed with template (the template renders it)");
      return;
    }
    if (input.data !== undefined) throw bad("data", "only allowed with template");
    if (input.subject === undefined) throw bad("subject", "is required without template");
    if (input.html === undefined && input.text === undefined)
      throw bad("text", "text or html is required without template");
  },
});

export const sendMessage = declareCapability({
  name: "send-message",
  plane: "data",
  resource_type: "EmailDelivery",
  c_number: "C25",
  events: ["MessageSent", "MessageFailed"],
  skill_action_planned: true,
  long_running: true,
  built: true,
  example: {
    app: "shop",
    owner: "usr_1",
    provider: "gmail",
    to: ["ada@example.com"],
    subject: "Your order shipped",
    body: "It is on its way.",
  },
  input: Obj({
    app: App,
    owner: Str("end user the mail is sent as", 256),
    provider: Type.Enum(["gmail", "outlook", "google", "microsoft"] as const, {
      description: "mail provider: gmail (also google) or outlook (also microsoft)",
    }),
    channel: OptStr("channel, e.g. email", 64),
    to: Type.Array(Type.String({ format: "email", maxLength: 320 }), { minItems: 1, maxItems: 100 }),
    cc: Type.Optional(Type.Array(Type.String({ format: "email", maxLength: 320 }), { maxItems: 100 })),
    bcc: Type.Optional(Type.Array(Type.String({ format: "email", maxLength: 320 }), { maxItems: 100 })),
    subject: OptStr("subject", 998),
    body: OptStr("body", 1_000_000),
    content_type: Type.Optional(Type.Enum(["text/plain", "text/html"] as const)),
    in_reply_to: OptStr("Message-ID replied to", 998),
    references: OptStrList("Message-IDs of the thread"),
    thread_ref: OptStr("provider thread reference", 512),
  }),
});

export const setupObservability = declareCapability({
  name: "setup-observability",
  plane: "both",
  resource_type: "ObservabilityStack",
  c_number: "C36",
  events: ["ObservabilityConfigured"],
  skill_action_planned: true,
  app_less: true,
  built: true,
  example: { endpoint: "http://127.0.0.1:4318" },
  input: Obj({
    endpoint: Url("URL of the OTLP receiver"),
    public_key: OptStr("public key of the receiver", 512),
    secret_key: Type.Optional(Sensitive("secret key of the receiver", 512)),
    skip_probe: OptBool("do not probe the endpoint first"),
  }),
});
