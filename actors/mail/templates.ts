import Type, { type Static, type TObject } from "typebox";
import { check, CodecError, escapeHtml, FORMATS, PlatformError } from "../../proto/mod.js";

/**
 * send-email's built-in templates (DESIGN §11, docs/email.md): each declares
 * the data it takes (a TypeBox schema: missing or malformed data is `400
 * invalid_input` naming the field under `/data`), which of its fields are
 * token fields (a link that signs someone in or proves an address: never
 * stored, logged or put in an event, not even hashed on its own), its default
 * subject, and renders a text and an HTML body. Every value put in the HTML is
 * escaped; links must be http(s) URLs. Pure: no I/O.
 */

const Link = (description: string) =>
  Type.String({ minLength: 1, maxLength: 2048, format: FORMATS.httpUrl, description });
const Name = Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: "recipient's name" }));
const AppName = Type.Optional(
  Type.String({ minLength: 1, maxLength: 200, description: "product name shown (default: the app's name)" }),
);
const Minutes = Type.Optional(
  Type.Integer({ minimum: 1, maximum: 10_080, description: "how long the link works, in minutes" }),
);

export const TEMPLATE_SCHEMAS = {
  welcome: Type.Object(
    {
      name: Type.String({ minLength: 1, maxLength: 200 }),
      app_name: AppName,
      link: Type.Optional(Link("where to start")),
    },
    { additionalProperties: false },
  ),
  "verify-email": Type.Object(
    {
      link: Link("verification link (a token field)"),
      name: Name,
      app_name: AppName,
      expires_in_minutes: Minutes,
    },
    { additionalProperties: false },
  ),
  "password-reset": Type.Object(
    { link: Link("reset link (a token field)"), name: Name, app_name: AppName, expires_in_minutes: Minutes },
    { additionalProperties: false },
  ),
  "magic-link": Type.Object(
    {
      link: Link("sign-in link (a token field)"),
      name: Name,
      app_name: AppName,
      expires_in_minutes: Minutes,
    },
    { additionalProperties: false },
  ),
  "incident-update": Type.Object(
    {
      title: Type.String({ minLength: 1, maxLength: 200, description: "incident title" }),
      status: Type.Enum(["investigating", "identified", "monitoring", "resolved"] as const),
      message: Type.String({ minLength: 1, maxLength: 10_000, description: "what changed" }),
      link: Type.Optional(Link("status page")),
      app_name: AppName,
    },
    { additionalProperties: false },
  ),
} as const satisfies Record<string, TObject>;

export type TemplateName = keyof typeof TEMPLATE_SCHEMAS;
export const TEMPLATE_NAMES = Object.keys(TEMPLATE_SCHEMAS) as TemplateName[];

/** Fields whose values are credentials (a link holding a token): never kept anywhere. */
export const TOKEN_FIELDS: Record<TemplateName, readonly string[]> = {
  welcome: [],
  "verify-email": ["link"],
  "password-reset": ["link"],
  "magic-link": ["link"],
  "incident-update": [],
};

export function isTemplateName(s: string): s is TemplateName {
  return Object.hasOwn(TEMPLATE_SCHEMAS, s);
}

/** A rendered mail: what goes to the SMTP server. */
export interface RenderedMail {
  subject: string;
  text: string;
  html: string;
}

export { escapeHtml };

/** Checks a template's data; `400 invalid_input` naming each bad field under `/data`. */
export function checkTemplateData<T extends TemplateName>(
  template: T,
  data: unknown,
): Static<(typeof TEMPLATE_SCHEMAS)[T]> {
  try {
    return check(TEMPLATE_SCHEMAS[template], data ?? {}, `template ${template}`) as Static<
      (typeof TEMPLATE_SCHEMAS)[T]
    >;
  } catch (e) {
    if (!(e instanceof CodecError)) throw e;
    const details = e.details.map((d) => ({ path: `/data${d.path}`, message: d.message }));
    const first = details[0];
    throw new PlatformError(
      "invalid_input",
      `${first ? `${first.path.slice(1)}: ${first.message}` : "data: invalid"} (template ${template})`,
      { details },
    );
  }
}

/** Paragraphs, a button-like link, a footer: one layout for every template. */
function layout(o: {
  title: string;
  paragraphs: string[];
  link?: { href: string; label: string };
}): RenderedMail {
  const text = [...o.paragraphs, ...(o.link ? [`${o.link.label}: ${o.link.href}`] : [])].join("\n\n");
  const html = [
    "<!doctype html>",
    `<html><head><meta charset="utf-8"><title>${escapeHtml(o.title)}</title></head>`,
    '<body style="font-family:sans-serif;line-height:1.5">',
    ...o.paragraphs.map((p) => `<p>${escapeHtml(p)}</p>`),
    ...(o.link ? [`<p><a href="${escapeHtml(o.link.href)}">${escapeHtml(o.link.label)}</a></p>`] : []),
    "</body></html>",
  ].join("\n");
  return { subject: o.title, text: `${text}\n`, html: `${html}\n` };
}

const hello = (name: string | undefined) => (name ? `Hello ${name},` : "Hello,");
const expiry = (m: number | undefined) =>
  m === undefined ? [] : [`The link works for ${m} minute${m === 1 ? "" : "s"}.`];

/**
 * Renders a template with checked data; `app` is the app's name (the product
 * name unless `data.app_name` says otherwise). `subject` overrides the default.
 */
export function renderTemplate(
  template: TemplateName,
  data: unknown,
  app: string,
  subject?: string,
): RenderedMail {
  const out = renderBody(template, data, app);
  return subject === undefined ? out : { ...out, subject };
}

function renderBody(template: TemplateName, raw: unknown, app: string): RenderedMail {
  switch (template) {
    case "welcome": {
      const d = checkTemplateData("welcome", raw);
      const product = d.app_name ?? app;
      return layout({
        title: `Welcome to ${product}`,
        paragraphs: [hello(d.name), `Your ${product} account is ready.`],
        ...(d.link ? { link: { href: d.link, label: "Get started" } } : {}),
      });
    }
    case "verify-email": {
      const d = checkTemplateData("verify-email", raw);
      const product = d.app_name ?? app;
      return layout({
        title: `Verify your email address for ${product}`,
        paragraphs: [
          hello(d.name),
          `Confirm that this address is yours to finish signing up for ${product}.`,
          ...expiry(d.expires_in_minutes),
          "If you did not sign up, ignore this message.",
        ],
        link: { href: d.link, label: "Verify email address" },
      });
    }
    case "password-reset": {
      const d = checkTemplateData("password-reset", raw);
      const product = d.app_name ?? app;
      return layout({
        title: `Reset your ${product} password`,
        paragraphs: [
          hello(d.name),
          `Someone asked to reset the password of your ${product} account.`,
          ...expiry(d.expires_in_minutes),
          "If it was not you, ignore this message: your password stays as it is.",
        ],
        link: { href: d.link, label: "Choose a new password" },
      });
    }
    case "magic-link": {
      const d = checkTemplateData("magic-link", raw);
      const product = d.app_name ?? app;
      return layout({
        title: `Your sign-in link for ${product}`,
        paragraphs: [
          hello(d.name),
          `Use the link below to sign in to ${product}.`,
          ...expiry(d.expires_in_minutes),
          "If you did not ask for it, ignore this message.",
        ],
        link: { href: d.link, label: `Sign in to ${product}` },
      });
    }
    case "incident-update": {
      const d = checkTemplateData("incident-update", raw);
      const product = d.app_name ?? app;
      return layout({
        title: `[${product}] ${d.status}: ${d.title}`,
        paragraphs: [`${d.title}: ${d.status}.`, d.message],
        ...(d.link ? { link: { href: d.link, label: "Status page" } } : {}),
      });
    }
  }
}
