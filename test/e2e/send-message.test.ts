import anyTest, { type TestFn } from "ava";
import { simpleParser } from "mailparser";
import { BUCKETS, connectorGrantKey } from "../../proto/mod.js";
import { listAppEvents } from "../../store/mod.js";
import {
  ACTOR,
  call,
  controlAuth,
  eventually,
  get,
  newApp,
  type PlatformContext,
  platformPerFile,
  result,
  waitForEnd,
} from "../helpers/infra.js";
import { type MailProviders, startMailProviders } from "../helpers/mail-providers.js";

/**
 * send-message and the mail connectors end to end (docs/connectors.md): a real
 * platform, local servers speaking the Gmail API, Graph sendMail and the OAuth
 * token endpoints. Grants land through `/connect/<provider>/grant`, sends go
 * through `/connect/<provider>/send` and `/capabilities/send-message`; the RFC
 * 822 message carries the threading headers; a revoked grant is MessageFailed
 * and message.failed; no access or refresh token shows anywhere.
 */

type Ctx = PlatformContext & {
  mail: MailProviders;
  app: string;
  token: string;
  logs: string[];
};
const test = anyTest as TestFn<Ctx>;

platformPerFile(test, {
  stubs: async () => ({ mail: await startMailProviders() }),
  // the node reads the providers' settings from its environment (in this process)
  processEnv: ({ mail }) => mail.env,
  platform: (ctx) => {
    ctx.logs = [];
    return { log: (m: string) => ctx.logs.push(m) };
  },
  extra: async (p) => {
    const app = await newApp(p, "msg");
    return { app: app.name, token: app.token };
  },
});

function auth(t: { context: Ctx }, actor = "web-1"): Record<string, string> {
  return {
    authorization: `Bearer ${t.context.token}`,
    "content-type": "application/json",
    "x-platform-actor-type": "app",
    "x-platform-actor-id": actor,
  };
}

async function post(t: { context: Ctx }, path: string, body: unknown, headers = auth(t)) {
  return result(
    await fetch(`${t.context.p.dataUrl}${path}`, { method: "POST", headers, body: JSON.stringify(body) }),
  );
}

async function connect(t: { context: Ctx }, provider: string, owner: string, refresh: string, extra = {}) {
  t.context.mail.refreshTokens.set(refresh, { scope: "https://mail.example/send", ...extra });
  return post(t, `/connect/${provider}/grant`, {
    owner,
    refresh_token: refresh,
    scopes: ["https://mail.example/send"],
    email: `${owner}@sender.example`,
  });
}

/** Waits for the delivery's end and its closing event. */
const ended = (t: { context: Ctx }, id: string) =>
  waitForEnd(t.context.p, "EmailDelivery", id, { closing: ["MessageSent", "MessageFailed"] });

async function appEvents(t: { context: Ctx }, owner: string) {
  return (await listAppEvents(t.context.p.bus, { app: t.context.app, owner, limit: 100 })).items;
}

test.serial(
  "send-message: gmail gets a base64url RFC 822 raw with the threading headers and the thread id; MessageSent, message.sent",
  async (t) => {
    const owner = "usr_gmail";
    const g = await connect(t, "gmail", owner, "rt-gmail-1");
    t.is(g.status, 200, g.text);
    t.like(g.body.connector, {
      app: t.context.app,
      provider: "gmail",
      owner,
      email: `${owner}@sender.example`,
    });
    t.false("sealed" in g.body.connector);
    const r = await post(t, "/connect/gmail/send", {
      app: t.context.app,
      owner,
      to: ["ada@example.com"],
      cc: ["cy@example.com"],
      bcc: ["hidden@example.com"],
      subject: "Re: commande n° 42 — expédiée",
      body: "Bonjour Ada,\nvotre commande est partie.",
      in_reply_to: "orig-1@mail.example.com",
      references: ["<root@mail.example.com>", "<orig-1@mail.example.com>"],
      thread_ref: "18c2f0a1b2c3d4e5",
    });
    t.is(r.status, 202, r.text);
    t.like(r.body.resource, {
      type: "EmailDelivery",
      status: "running",
      provider: "gmail",
      owner,
      channel: "email",
    });
    t.deepEqual(r.body.resource.to, ["a***@example.com"]);
    t.deepEqual(r.body.resource.bcc, ["h***@example.com"]);
    const { doc, events } = await ended(t, r.body.resource.id);
    t.is(doc.status, "succeeded", JSON.stringify(doc));
    t.like(doc, {
      provider_message_id: "msg1",
      provider_thread_id: "18c2f0a1b2c3d4e5",
      thread_ref: "18c2f0a1b2c3d4e5",
    });
    t.regex(doc.message_id, /^<eml_[^@]+@sender\.example>$/);
    const sent = events.find((e) => e.type === "MessageSent")!;
    t.like(sent.data, {
      provider: "gmail",
      channel: "email",
      message_id: doc.message_id,
      provider_message_id: "msg1",
    });
    t.like(sent.actor, { type: "app", id: "web-1", app: t.context.app });

    const g1 = t.context.mail.gmail.at(-1)!;
    t.is(g1.body.threadId, "18c2f0a1b2c3d4e5");
    t.is(g1.authorization, `Bearer ${t.context.mail.issued.at(-1)}`);
    t.true(/^[A-Za-z0-9_-]+$/.test(g1.body.raw!), "raw is base64url");
    const m = await simpleParser(g1.rfc822);
    t.is(m.subject, "Re: commande n° 42 — expédiée");
    t.is(m.inReplyTo, "<orig-1@mail.example.com>");
    t.deepEqual(m.references, ["<root@mail.example.com>", "<orig-1@mail.example.com>"]);
    t.is(m.messageId, doc.message_id);
    t.is(m.from?.text, `${owner}@sender.example`);
    t.is((m.bcc as { text: string }).text, "hidden@example.com");
    t.is(m.text?.trim(), "Bonjour Ada,\nvotre commande est partie.");
    const tokenReq = t.context.mail.tokenRequests.at(-1)!;
    t.like(tokenReq.form, {
      grant_type: "refresh_token",
      refresh_token: "rt-gmail-1",
      client_id: "google-client-1",
    });

    const evs = await appEvents(t, owner);
    const types = evs.map((e) => e.type);
    for (const ty of ["connector.connected", "connector.token_issued", "message.sent"])
      t.true(types.includes(ty), ty);
    for (const e of evs) t.like(e.actor, { type: "app", id: "web-1" }, e.type);
    t.like(evs.find((e) => e.type === "message.sent")!.data, {
      provider: "gmail",
      channel: "email",
      message_id: doc.message_id,
    });
    t.like(evs.find((e) => e.type === "connector.token_issued")!.data, {
      provider: "gmail",
      scopes: ["https://mail.example/send"],
    });
  },
);

test.serial(
  "send-message: outlook (called microsoft) gets Graph message JSON; a threaded reply goes as MIME with In-Reply-To",
  async (t) => {
    const owner = "usr_outlook";
    t.is((await connect(t, "microsoft", owner, "rt-ms-1", { rotate: true })).status, 200);
    const r = await call(
      t.context.p.dataUrl,
      "send-message",
      {
        app: t.context.app,
        owner,
        provider: "microsoft",
        to: ["ada@example.com", "bob@example.com"],
        bcc: ["hidden@example.com"],
        subject: "Weekly report",
        body: "<p>All green</p>",
        content_type: "text/html",
      },
      { authorization: `Bearer ${t.context.token}` },
    );
    t.is(r.status, 202, r.text);
    const { doc } = await ended(t, r.body.resource.id);
    t.is(doc.status, "succeeded", JSON.stringify(doc));
    t.like(doc, { provider: "outlook", provider_requested: "microsoft", provider_message_id: null });
    const sent = t.context.mail.graph.at(-1)!;
    t.like(sent, { contentType: "application/json" });
    t.deepEqual(sent.json, {
      message: {
        subject: "Weekly report",
        body: { contentType: "HTML", content: "<p>All green</p>" },
        toRecipients: [
          { emailAddress: { address: "ada@example.com" } },
          { emailAddress: { address: "bob@example.com" } },
        ],
        ccRecipients: [],
        bccRecipients: [{ emailAddress: { address: "hidden@example.com" } }],
      },
      saveToSentItems: true,
    });
    t.like(t.context.mail.tokenRequests.at(-1)!.form, {
      client_id: "ms-client-1",
      scope: "https://mail.example/send",
    });

    // the token endpoint rotated the refresh token: the next send uses the new one
    const reply = await post(t, "/connect/outlook/send", {
      app: t.context.app,
      owner,
      to: ["ada@example.com"],
      subject: "Re: Weekly report",
      body: "Thanks",
      in_reply_to: "<AAMk1@outlook.example>",
    });
    t.is(reply.status, 202, reply.text);
    t.is((await ended(t, reply.body.resource.id)).doc.status, "succeeded");
    t.regex(t.context.mail.tokenRequests.at(-1)!.form.refresh_token!, /^rt-rotated-/);
    const mime = t.context.mail.graph.at(-1)!;
    t.is(mime.contentType, "text/plain");
    const m = await simpleParser(mime.mime!);
    t.is(m.inReplyTo, "<AAMk1@outlook.example>");
    t.is(m.subject, "Re: Weekly report");
  },
);

test.serial(
  "send-message: a revoked grant is MessageFailed and message.failed; a grant the provider refuses too",
  async (t) => {
    const owner = "usr_revoked";
    t.is((await connect(t, "gmail", owner, "rt-gmail-2")).status, 200);
    const del = await fetch(`${t.context.p.dataUrl}/connect/gmail/grant?owner=${owner}`, {
      method: "DELETE",
      headers: auth(t),
    });
    const delBody = await del.json();
    t.is(del.status, 200, JSON.stringify(delBody));
    t.like(delBody.connector, { provider: "gmail", owner });
    t.is(
      (await t.context.p.bus.kv.vault.get(connectorGrantKey(t.context.app, "gmail", owner)))?.operation,
      "DEL",
    );
    const again = await fetch(`${t.context.p.dataUrl}/connect/gmail/grant?owner=${owner}`, {
      method: "DELETE",
      headers: auth(t),
    });
    t.is(again.status, 404);
    const before = t.context.mail.gmail.length;
    const r = await post(t, "/connect/google/send", {
      app: t.context.app,
      owner,
      to: ["ada@example.com"],
      subject: "Hi",
    });
    t.is(r.status, 202, r.text);
    const { doc, events } = await ended(t, r.body.resource.id);
    t.is(doc.status, "failed");
    t.regex(doc.error, /no gmail grant/);
    const failed = events.find((e) => e.type === "MessageFailed")!;
    t.like(failed.data, { provider: "gmail", stage: "grant" });
    t.like(failed.actor, { type: "app", id: "web-1" });
    t.is(t.context.mail.gmail.length, before, "nothing was sent");
    const evs = await appEvents(t, owner);
    const mf = evs.find((e) => e.type === "message.failed");
    t.truthy(mf);
    t.like(mf!.data, { provider: "gmail", channel: "email", message_id: doc.message_id });
    t.regex(String(mf!.data.error), /no gmail grant/);
    t.true(evs.some((e) => e.type === "connector.disconnected"));

    // revoked at the provider: the token endpoint answers invalid_grant
    const owner2 = "usr_refused";
    t.is((await connect(t, "gmail", owner2, "rt-gmail-3")).status, 200);
    t.context.mail.refreshTokens.delete("rt-gmail-3");
    const r2 = await post(t, "/connect/gmail/send", {
      app: t.context.app,
      owner: owner2,
      to: ["ada@example.com"],
      body: "x",
    });
    const e2 = await ended(t, r2.body.resource.id);
    t.is(e2.doc.status, "failed");
    t.regex(e2.doc.error, /invalid_grant/);
    t.like(e2.events.find((e) => e.type === "MessageFailed")!.data, { stage: "token" });
  },
);

test.serial(
  "send-message: no access or refresh token appears in any event, app event, resource, log or platform log line",
  async (t) => {
    const { p, mail, app } = t.context;
    t.true(mail.issued.length >= 3);
    const secrets = [
      ...mail.issued,
      "rt-gmail-1",
      "rt-ms-1",
      "rt-gmail-2",
      "rt-gmail-3",
      ...[...mail.refreshTokens.keys()],
    ];
    const texts: string[] = [];
    texts.push((await get(p.controlUrl, `/events?app_id=${app}&limit=500`)).text);
    const resources = await get(p.controlUrl, `/resources?app_id=${app}&limit=500`);
    texts.push(resources.text);
    for (const r of resources.body.items as Array<{ id: string }>)
      texts.push((await get(p.controlUrl, `/logs/${r.id}`)).text);
    for (const owner of ["usr_gmail", "usr_outlook", "usr_revoked", "usr_refused"])
      texts.push(JSON.stringify(await appEvents(t, owner)));
    texts.push(t.context.logs.join("\n"));
    const vault = await p.bus.kv.vault.get(connectorGrantKey(app, "outlook", "usr_outlook"));
    texts.push(vault ? new TextDecoder().decode(vault.value) : "");
    const all = texts.join("\n");
    t.true(all.includes("connector.token_issued"), "the reads did see the sends");
    for (const s of secrets) t.false(all.includes(s), `a token leaked: ${s.slice(0, 12)}...`);
    t.is(BUCKETS.vault, "slipway_vault");
  },
);

test.serial(
  "send-message: bad input is a 4xx in the documented shape; an unconfigured provider is 503",
  async (t) => {
    const { app } = t.context;
    const cases: Array<[string, unknown, number, string]> = [
      [
        "/connect/gmail/send",
        { app, owner: "u", to: ["a@example.com"], subject: "Hi\r\nBcc: v@example.com" },
        400,
        "invalid_input",
      ],
      [
        "/connect/gmail/send",
        { app, owner: "u", to: ['"a\r\nX: y"@example.com'], body: "x" },
        400,
        "invalid_input",
      ],
      [
        "/connect/gmail/send",
        { app, owner: "u", to: ["a@example.com"], body: "x", in_reply_to: "no id" },
        400,
        "invalid_input",
      ],
      [
        "/connect/outlook/send",
        { app, owner: "u", to: ["a@example.com"], body: "x", thread_ref: "t1" },
        400,
        "invalid_input",
      ],
      [
        "/connect/gmail/send",
        { app, owner: "u", provider: "outlook", to: ["a@example.com"], body: "x" },
        400,
        "invalid_input",
      ],
      ["/connect/gmail/send", { app, owner: "u", to: ["a@example.com"] }, 400, "invalid_input"],
      [
        "/connect/gmail/send",
        { app, owner: "u", to: ["a@example.com"], body: "x", channel: "sms" },
        400,
        "invalid_input",
      ],
      ["/connect/gmail/send", { app, owner: "u", to: [], body: "x" }, 400, "invalid_input"],
      ["/connect/yahoo/send", { app, owner: "u", to: ["a@example.com"], body: "x" }, 404, "not_found"],
      ["/connect/gmail/grant", { owner: "u" }, 400, "invalid_input"],
      ["/connect/gmail/grant", { owner: "u", refresh_token: "x", extra: 1 }, 400, "invalid_input"],
      ["/connect/gmail/grant", { owner: "u", refresh_token: "x", app: "other-app" }, 403, "forbidden"],
      ["/connect/gmail/grant", { owner: "u\n", refresh_token: "x" }, 400, "invalid_input"],
    ];
    for (const [path, body, status, code] of cases) {
      const r = await post(t, path, body);
      t.is(r.status, status, `${path} ${JSON.stringify(body)}: ${r.text}`);
      t.like(r.body, { status: "error", error: { code } });
      t.truthy(r.body.error.request_id);
    }
    const bad = await fetch(`${t.context.p.dataUrl}/connect/gmail/send`, {
      method: "POST",
      headers: auth(t),
      body: "{",
    });
    t.is(bad.status, 400);
    const noActor = await post(
      t,
      "/connect/gmail/grant",
      { owner: "u", refresh_token: "x" },
      { authorization: `Bearer ${t.context.token}`, "content-type": "application/json" },
    );
    t.is(noActor.status, 400);
    t.is(noActor.body.error.code, "missing_actor");
    const get405 = await fetch(`${t.context.p.dataUrl}/connect/gmail/send`, { headers: auth(t) });
    t.is(get405.status, 405);
    t.is(get405.headers.get("allow"), "POST");
    const noOwner = await fetch(`${t.context.p.dataUrl}/connect/gmail/grant`, {
      method: "DELETE",
      headers: auth(t),
    });
    t.is(noOwner.status, 400);
    const control = await fetch(`${t.context.p.controlUrl}/connect/gmail/grant`, {
      method: "POST",
      headers: { ...controlAuth(t.context.p.controlUrl), ...ACTOR, "content-type": "application/json" },
      body: JSON.stringify({ app, owner: "u", refresh_token: "x" }),
    });
    t.is(control.status, 403);
    t.is((await control.json()).error.code, "wrong_plane");
    const unauth = await fetch(`${t.context.p.dataUrl}/connect/gmail/grant`, {
      method: "POST",
      headers: { ...ACTOR, "content-type": "application/json" },
      body: JSON.stringify({ owner: "u", refresh_token: "x" }),
    });
    t.is(unauth.status, 401);

    const id = process.env.SLIPWAY_MICROSOFT_CLIENT_ID;
    delete process.env.SLIPWAY_MICROSOFT_CLIENT_ID;
    try {
      const r = await post(t, "/connect/outlook/send", { app, owner: "u", to: ["a@example.com"], body: "x" });
      t.is(r.status, 503, r.text);
      t.is(r.body.error.code, "connector_unavailable");
      t.regex(r.body.error.message, /SLIPWAY_MICROSOFT_CLIENT_ID/);
      // every send is persisted (spec 1.2): failed, with MessageFailed, the 503 naming it
      const id = /EmailDelivery (\S+), failed/.exec(r.body.error.message)?.[1];
      t.truthy(id, r.body.error.message);
      const doc = await eventually(async () => {
        const d = await get(t.context.p.dataUrl, `/resources/EmailDelivery/${id}`, auth(t));
        return d.status === 200 ? d.body : undefined;
      });
      t.like(doc, {
        status: "failed",
        kind: "message",
        provider: "outlook",
        error_code: "connector_unavailable",
      });
      const evs = await eventually(async () => {
        const e = await get(t.context.p.dataUrl, `/events?resource_id=${id}`, auth(t));
        return e.body.items?.length ? e.body.items : undefined;
      });
      t.deepEqual(
        evs.map((e: { type: string; status?: string }) => [e.type, e.status]),
        [["MessageFailed", "failed"]],
      );
    } finally {
      process.env.SLIPWAY_MICROSOFT_CLIENT_ID = id;
    }
  },
);
