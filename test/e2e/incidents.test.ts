import { randomUUID } from "node:crypto";
import { mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import anyTest, { type TestFn } from "ava";
import { chromium } from "playwright-core";
import {
  ACTOR,
  type CallResult,
  call,
  controlAuth,
  eventually,
  get,
  newApp,
  type PlatformContext,
  platformPerFile,
  result,
  type TestApp,
} from "../helpers/infra.js";
import { startTestSmtp, type TestSmtp } from "../helpers/smtp.js";

/**
 * Status incidents end to end (docs/incidents.md): open, update and resolve on
 * both planes, their events and actors, bad input, who may call (a user's
 * access token and another app's token are 403), 404 and 409, the
 * incident-update mails at a real smtp-server on loopback (and the answer when
 * the app has no SMTP server), and the public status page, checked over HTTP
 * (cache headers, ETag, 304, escaping) and in a real Chromium through
 * playwright-core (Debian's chromium: no browser is downloaded).
 */

type Ctx = PlatformContext & {
  smtp: TestSmtp;
  /** Has its own SMTP_URL in the vault. */
  a: TestApp;
  /** Has no SMTP server at all. */
  b: TestApp;
};
const test = anyTest as TestFn<Ctx>;

platformPerFile(test, {
  stubs: async () => ({ smtp: await startTestSmtp() }),
  processEnv: () => ({ SLIPWAY_SMTP_URL: undefined }),
  extra: async (p, _nats, { smtp }) => {
    const [a, b] = await Promise.all([newApp(p, "inc"), newApp(p, "incb")]);
    const s = await call(p.controlUrl, "set-secret", {
      app: a.name,
      name: "SMTP_URL",
      value: smtp.url({ from: "status@shop.example" }),
    });
    if (s.status !== 200) throw new Error(`set-secret: ${s.text}`);
    return { a, b };
  },
});

/** A POST to the data plane with `token` (the app's by default). */
async function dataPost(t: { context: Ctx }, path: string, body: unknown, token = t.context.a.token) {
  return result(
    await fetch(`${t.context.p.dataUrl}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}`, ...ACTOR },
      body: typeof body === "string" ? body : JSON.stringify(body),
    }),
  );
}

/** A POST to the control plane (loopback: the operator, no token). */
async function controlPost(
  t: { context: Ctx },
  path: string,
  body: unknown,
  headers: Record<string, string> = ACTOR,
) {
  return result(
    await fetch(`${t.context.p.controlUrl}${path}`, {
      method: "POST",
      headers: { ...controlAuth(t.context.p.controlUrl), "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    }),
  );
}

interface Ev {
  type: string;
  resource_type: string;
  actor: { type: string; id: string; app?: string };
  data: Record<string, unknown>;
}
async function eventsOf(t: { context: Ctx }, id: string, n: number): Promise<Ev[]> {
  return eventually(async () => {
    const r = await get(t.context.p.controlUrl, `/events?resource_id=${id}`);
    const items = r.body.items as Ev[];
    return items.length >= n ? [...items].reverse() : undefined;
  });
}

function isError(
  t: { is: (a: unknown, b: unknown, m?: string) => void; truthy: (a: unknown, m?: string) => void },
  r: CallResult,
  status: number,
  code: string,
) {
  t.is(r.status, status, r.text);
  t.is(r.body?.status, "error", r.text);
  t.is(r.body?.error?.code, code, r.text);
  t.truthy(r.body?.error?.request_id, r.text);
}

test.serial(
  "open, update and resolve on the data plane: the Incident, its events and their actor",
  async (t) => {
    const { a } = t.context;
    const open = await dataPost(t, "/status/incidents", {
      title: "Checkout is slow",
      message: "Payments take up to a minute.",
      severity: "major",
    });
    t.is(open.status, 201, open.text);
    const inc = open.body.resource;
    t.regex(inc.id, /^inc_/);
    t.is(inc.type, "Incident");
    t.is(inc.app_id, a.name);
    t.is(inc.status, "running");
    t.is(inc.incident_status, "investigating");
    t.is(inc.severity, "major");
    t.is(inc.title, "Checkout is slow");
    t.is(inc.resolved_at, null);
    t.is(inc.updates.length, 1);
    t.like(inc.updates[0], { status: "investigating", message: "Payments take up to a minute." });
    t.is(open.body.events[0].type, "IncidentOpened");

    const up = await dataPost(t, "/status/incidents/update", {
      app: a.name,
      id: inc.id,
      message: "A slow database index; a fix is rolling out.",
      status: "identified",
    });
    t.is(up.status, 200, up.text);
    t.is(up.body.resource.status, "running");
    t.is(up.body.resource.incident_status, "identified");
    t.is(up.body.resource.updates.length, 2);
    const same = await dataPost(t, "/status/incidents/update", { id: inc.id, message: "Still rolling out." });
    t.is(same.body.resource.incident_status, "identified", "no status: the state stays");

    const done = await dataPost(t, "/status/incidents/resolve", {
      id: inc.id,
      message: "All payments are fast again.",
    });
    t.is(done.status, 200, done.text);
    const r = done.body.resource;
    t.is(r.status, "succeeded");
    t.is(r.incident_status, "resolved");
    t.truthy(r.resolved_at);
    t.deepEqual(
      r.updates.map((u: { status: string }) => u.status),
      ["investigating", "identified", "identified", "resolved"],
    );

    const events = await eventsOf(t, inc.id, 4);
    t.deepEqual(
      events.map((e) => e.type),
      ["IncidentOpened", "IncidentUpdated", "IncidentUpdated", "IncidentResolved"],
    );
    for (const e of events) {
      t.is(e.resource_type, "Incident");
      t.deepEqual(
        e.actor,
        { type: "builder", id: "test-suite", app: a.name },
        "the data plane's actor names the app",
      );
    }
    t.like(events[0]!.data, {
      incident_id: inc.id,
      title: "Checkout is slow",
      severity: "major",
      status: "investigating",
    });
    t.like(events[1]!.data, { status: "identified", previous_status: "investigating" });
    t.like(events[3]!.data, { status: "resolved", message: "All payments are fast again." });

    // the read index has it at once (read your writes): the list and the resource
    const list = await get(t.context.p.dataUrl, "/status/incidents", { authorization: `Bearer ${a.token}` });
    t.is(list.status, 200, list.text);
    t.is(list.body.items[0].id, inc.id);
    t.is(list.body.items[0].incident_status, "resolved");
  },
);

test.serial(
  "the control plane: the operator names the app; its events carry the headers' actor",
  async (t) => {
    const { b } = t.context;
    const op = { "x-platform-actor-type": "operator", "x-platform-actor-id": "oncall" };
    const missing = await controlPost(t, "/status/incidents", { title: "No app named" }, op);
    isError(t, missing, 400, "invalid_input");
    t.deepEqual(missing.body.error.details, [{ path: "/app", message: "is required" }]);

    const open = await controlPost(t, "/status/incidents", { app: b.name, title: "Search is down" }, op);
    t.is(open.status, 201, open.text);
    const id = open.body.resource.id as string;
    t.is(open.body.resource.severity, "minor", "the default severity");
    t.deepEqual(open.body.resource.updates, []);
    const up = await controlPost(
      t,
      "/status/incidents/update",
      { app: b.name, id, message: "Watching the new nodes.", status: "monitoring" },
      op,
    );
    t.is(up.status, 200, up.text);
    const done = await controlPost(t, "/status/incidents/resolve", { app: b.name, id }, op);
    t.is(done.status, 200, done.text);
    t.is(done.body.resource.status, "succeeded");
    t.like(done.body.resource.updates.at(-1), { status: "resolved", message: null });

    const events = await eventsOf(t, id, 3);
    t.deepEqual(
      events.map((e) => e.type),
      ["IncidentOpened", "IncidentUpdated", "IncidentResolved"],
    );
    for (const e of events) t.deepEqual(e.actor, { type: "operator", id: "oncall" });

    // another app's incident is unknown here, even to the operator naming this app
    const other = await controlPost(t, "/status/incidents/resolve", { app: t.context.a.name, id }, op);
    isError(t, other, 404, "not_found");

    // the list: newest first, filtered by status, limited
    const second = await controlPost(
      t,
      "/status/incidents",
      { app: b.name, title: "Mail is delayed", severity: "critical" },
      op,
    );
    t.is(second.status, 201, second.text);
    const all = await get(t.context.p.controlUrl, `/status/incidents?app=${b.name}`);
    t.deepEqual(
      all.body.items.map((x: { id: string }) => x.id),
      [second.body.resource.id, id],
    );
    const open2 = await get(t.context.p.controlUrl, `/status/incidents?app=${b.name}&status=open`);
    t.deepEqual(
      open2.body.items.map((x: { id: string }) => x.id),
      [second.body.resource.id],
    );
    const resolved = await get(t.context.p.controlUrl, `/status/incidents?app=${b.name}&status=resolved`);
    t.deepEqual(
      resolved.body.items.map((x: { id: string }) => x.id),
      [id],
    );
    const one = await get(t.context.p.controlUrl, `/status/incidents?app=${b.name}&limit=1`);
    t.is(one.body.items.length, 1);
    t.truthy(one.body.next_cursor);
    isError(
      t,
      await get(t.context.p.controlUrl, `/status/incidents?app=${b.name}&status=gone`),
      400,
      "invalid_input",
    );
    isError(t, await get(t.context.p.controlUrl, "/status/incidents"), 400, "invalid_input");
    isError(
      t,
      await get(t.context.p.controlUrl, `/status/incidents?app=${b.name}&x=1`),
      400,
      "invalid_input",
    );
    const close = await controlPost(
      t,
      "/status/incidents/resolve",
      { app: b.name, id: second.body.resource.id },
      op,
    );
    t.is(close.status, 200, close.text);
  },
);

test.serial(
  "bad input is 400 in the documented shape, with details; the actor headers are required",
  async (t) => {
    const cases: [string, unknown, string][] = [
      ["/status/incidents", { title: "" }, "/title"],
      ["/status/incidents", { title: "x".repeat(201) }, "/title"],
      ["/status/incidents", { message: "no title" }, "/title"],
      ["/status/incidents", { title: "Down", severity: "apocalyptic" }, "/severity"],
      ["/status/incidents", { title: "Down", colour: "red" }, "/colour"],
      ["/status/incidents", { title: "Down", notify: [] }, "/notify"],
      ["/status/incidents", { title: "Down", notify: ["not-an-address"] }, "/notify/0"],
      [
        "/status/incidents",
        { title: "Down", notify: Array.from({ length: 51 }, (_, i) => `u${i}@shop.example`) },
        "/notify",
      ],
      ["/status/incidents/update", { id: "inc_x" }, "/message"],
      ["/status/incidents/update", { id: "inc_x", message: "m", status: "resolved" }, "/status"],
      ["/status/incidents/update", { id: "nope", message: "m" }, "/id"],
      ["/status/incidents/resolve", { id: "inc_x", extra: true }, "/extra"],
    ];
    for (const [path, body, at] of cases) {
      const r = await dataPost(t, path, body);
      isError(t, r, 400, "invalid_input");
      t.true(
        (r.body.error.details as { path: string }[]).some((d) => d.path === at),
        `${path} ${JSON.stringify(body).slice(0, 80)}: ${r.text}`,
      );
    }
    isError(t, await dataPost(t, "/status/incidents", "{not json"), 400, "invalid_json");
    const noActor = await result(
      await fetch(`${t.context.p.dataUrl}/status/incidents`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${t.context.a.token}` },
        body: JSON.stringify({ title: "Down" }),
      }),
    );
    isError(t, noActor, 400, "missing_actor");
    const noToken = await result(
      await fetch(`${t.context.p.dataUrl}/status/incidents`, {
        method: "POST",
        headers: { "content-type": "application/json", ...ACTOR },
        body: JSON.stringify({ title: "Down" }),
      }),
    );
    isError(t, noToken, 401, "unauthenticated");
    const put = await fetch(`${t.context.p.dataUrl}/status/incidents/update`, { method: "PUT" });
    t.is(put.status, 405);
    // nothing was opened by any of them
    const list = await get(t.context.p.dataUrl, "/status/incidents?status=open", {
      authorization: `Bearer ${t.context.a.token}`,
    });
    t.deepEqual(list.body.items, []);
  },
);

test.serial("404 for an unknown incident, 409 for a resolved one", async (t) => {
  const unknown = await dataPost(t, "/status/incidents/update", { id: "inc_01NOPE", message: "m" });
  isError(t, unknown, 404, "not_found");
  isError(t, await dataPost(t, "/status/incidents/resolve", { id: "inc_01NOPE" }), 404, "not_found");
  const open = await dataPost(t, "/status/incidents", { title: "Short blip" });
  const id = open.body.resource.id;
  t.is((await dataPost(t, "/status/incidents/resolve", { id })).status, 200);
  isError(t, await dataPost(t, "/status/incidents/resolve", { id }), 409, "conflict");
  isError(t, await dataPost(t, "/status/incidents/update", { id, message: "again" }), 409, "conflict");
  // the other app's token does not find it either
  isError(
    t,
    await dataPost(t, "/status/incidents/update", { id, message: "m" }, t.context.b.token),
    404,
    "not_found",
  );
});

test.serial("a user's access token and another app's token are 403", async (t) => {
  const { a, b, smtp } = t.context;
  // a real user of app a: sign-up (the mail goes through the app's SMTP_URL), verify, login
  const email = `ops.${randomUUID().slice(0, 6)}@shop.example`;
  const password = `pw-${randomUUID()}`;
  // no verify_url: the link opens the platform's own route (a link elsewhere must be on the app's origins)
  const su = await dataPost(t, "/auth/signup", { email, password });
  t.is(su.status, 202, su.text);
  const mail = await eventually(async () => smtp.received.find((m) => m.envelope.to.includes(email)), 20_000);
  const token = decodeURIComponent(/verify\?token=([A-Za-z0-9%._-]+)/.exec(mail.parsed.text ?? "")![1]!);
  t.is((await dataPost(t, "/auth/verify", { token })).status, 200);
  const login = await dataPost(t, "/auth/login", { email, password });
  t.is(login.status, 200, login.text);
  const access = login.body.access_token as string;

  isError(t, await dataPost(t, "/status/incidents", { title: "As a user" }, access), 403, "forbidden");
  const open = await dataPost(t, "/status/incidents", { title: "For the 403 checks" });
  const id = open.body.resource.id;
  isError(t, await dataPost(t, "/status/incidents/update", { id, message: "m" }, access), 403, "forbidden");
  isError(t, await dataPost(t, "/status/incidents/resolve", { id }, access), 403, "forbidden");
  isError(
    t,
    await get(t.context.p.dataUrl, "/status/incidents", { authorization: `Bearer ${access}` }),
    403,
    "forbidden",
  );
  // another app's token naming this app
  isError(
    t,
    await dataPost(t, "/status/incidents", { app: a.name, title: "Not mine" }, b.token),
    403,
    "forbidden",
  );
  isError(t, await dataPost(t, "/status/incidents/resolve", { app: a.name, id }, b.token), 403, "forbidden");
  isError(
    t,
    await get(t.context.p.dataUrl, `/status/incidents?app=${a.name}`, { authorization: `Bearer ${b.token}` }),
    403,
    "forbidden",
  );
  t.is((await dataPost(t, "/status/incidents/resolve", { id })).status, 200);
});

test.serial(
  "notify: the incident-update mail reaches each address; without SMTP the incident is still written",
  async (t) => {
    const { smtp, b } = t.context;
    const to = [
      `ada.${randomUUID().slice(0, 6)}@shop.example`,
      `bob.${randomUUID().slice(0, 6)}@shop.example`,
    ];
    const open = await dataPost(t, "/status/incidents", {
      title: "Logins fail",
      message: "Some users cannot sign in.",
      severity: "critical",
      notify: to,
    });
    t.is(open.status, 201, open.text);
    const m = open.body.result.mail;
    t.true(m.sent, open.text);
    t.deepEqual(
      m.deliveries.map((x: { to: string; status: string }) => [x.to, x.status]),
      to.map((a) => [a, "queued"]),
    );
    for (const d of m.deliveries) t.regex(d.delivery_id, /^eml_/);
    const got = await eventually(async () => {
      const ms = smtp.received.filter((x) => to.some((a) => x.envelope.to.includes(a)));
      return ms.length === 2 ? ms : undefined;
    }, 20_000);
    const app = t.context.a.name;
    for (const mail of got) {
      t.is(mail.envelope.from, "status@shop.example");
      t.is(mail.parsed.subject, `[${app}] investigating: Logins fail`);
      t.true(mail.parsed.text?.includes("Logins fail: investigating."), mail.parsed.text);
      t.true(mail.parsed.text?.includes("Some users cannot sign in."), mail.parsed.text);
      t.true(mail.parsed.text?.includes(`/status/page/${app}`), "the status page's link");
    }
    const id = open.body.resource.id;
    const done = await dataPost(t, "/status/incidents/resolve", { id, notify: [to[0]] });
    t.is(done.status, 200, done.text);
    const closing = await eventually(
      async () =>
        smtp.received.find((x) => x.envelope.to.includes(to[0]!) && x.parsed.subject?.includes("resolved")),
      20_000,
    );
    t.is(closing.parsed.subject, `[${app}] resolved: Logins fail`);
    t.true(closing.parsed.text?.includes("This incident has been resolved."));

    // app b has no SMTP server: the incident is written, the answer says the mail was not sent
    const before = smtp.received.length;
    const op = { "x-platform-actor-type": "operator", "x-platform-actor-id": "oncall" };
    const nomail = await controlPost(
      t,
      "/status/incidents",
      { app: b.name, title: "No mail here", notify: ["c@shop.example", "d@shop.example"] },
      op,
    );
    t.is(nomail.status, 201, nomail.text);
    t.is(nomail.body.resource.status, "running");
    t.false(nomail.body.result.mail.sent);
    for (const d of nomail.body.result.mail.deliveries) {
      t.is(d.status, "not_sent");
      t.is(d.error.code, "smtp_unavailable");
    }
    const listed = await get(t.context.p.controlUrl, `/status/incidents?app=${b.name}&status=open`);
    t.true(listed.body.items.some((x: { id: string }) => x.id === nomail.body.resource.id));
    t.is(
      (await controlPost(t, "/status/incidents/resolve", { app: b.name, id: nomail.body.resource.id }, op))
        .status,
      200,
    );
    // mails go out asynchronously: a marker mail of app a, sent after b's incident and its
    // resolution, has arrived before anything b's could still bring; then none of b's is there
    const marker = `marker.${randomUUID().slice(0, 6)}@shop.example`;
    const m2 = await dataPost(t, "/status/incidents", { title: "Marker", notify: [marker] });
    t.is(m2.status, 201, m2.text);
    await eventually(async () => smtp.received.some((x) => x.envelope.to.includes(marker)), 20_000);
    const bMail = smtp.received
      .slice(before)
      .filter((x) => ["c@shop.example", "d@shop.example"].some((a) => x.envelope.to.includes(a)));
    t.deepEqual(
      bMail.map((x) => x.parsed.subject),
      [],
      "no mail for the app without SMTP",
    );
    t.is((await dataPost(t, "/status/incidents/resolve", { id: m2.body.resource.id })).status, 200);
  },
);

test.serial(
  "the public status page: HTML without a token, cached 30 s, ETag and 304, escaped text, 404",
  async (t) => {
    const { p } = t.context;
    const page = await newApp(p, "page");
    const post = (path: string, body: unknown) => dataPost(t, path, body, page.token);
    const url = `${p.dataUrl}/status/page/${page.name}`;

    const calm = await fetch(url);
    t.is(calm.status, 200);
    t.is(calm.headers.get("content-type"), "text/html; charset=utf-8");
    t.is(calm.headers.get("cache-control"), "public, max-age=30");
    const calmTag = calm.headers.get("etag");
    t.regex(calmTag ?? "", /^"[A-Za-z0-9_-]+"$/);
    const calmHtml = await calm.text();
    t.true(calmHtml.includes("All systems operational"));
    const again = await fetch(url, { headers: { "if-none-match": calmTag! } });
    t.is(again.status, 304);
    t.is(await again.text(), "");
    t.is(again.headers.get("etag"), calmTag);

    const evil = `<script>document.title="pwned"</script> & "quotes"`;
    const o1 = await post("/status/incidents", {
      title: evil,
      message: "<img src=x onerror=alert(1)> we are on it",
      severity: "critical",
    });
    t.is(o1.status, 201, o1.text);
    await post("/status/incidents/update", {
      id: o1.body.resource.id,
      message: "Found the cause.",
      status: "identified",
    });
    const o2 = await post("/status/incidents", { title: "Old logs are late", severity: "minor" });
    await post("/status/incidents/resolve", { id: o2.body.resource.id, message: "Logs caught up." });

    const hot = await fetch(url, { headers: { "if-none-match": calmTag! } });
    t.is(hot.status, 200, "the page changed: a new ETag");
    const hotTag = hot.headers.get("etag");
    t.not(hotTag, calmTag);
    const html = await hot.text();
    t.false(html.includes("<script>"), "no script from the input");
    t.false(html.includes("<img"), "no element from the input");
    t.true(
      html.includes("&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt; &amp; &quot;quotes&quot;"),
    );
    t.false(html.includes("All systems operational"));
    t.is((await fetch(url, { headers: { "if-none-match": `W/${hotTag}, "other"` } })).status, 304);

    const unknown = await result(
      await fetch(`${p.dataUrl}/status/page/no-such-app-${randomUUID().slice(0, 6)}`),
    );
    isError(t, unknown, 404, "not_found");
    isError(t, await result(await fetch(`${p.dataUrl}/status/page/Bad%20Name`)), 404, "not_found");
    isError(
      t,
      await result(
        await fetch(`${p.controlUrl}/status/page/${page.name}`, { headers: controlAuth(p.controlUrl) }),
      ),
      403,
      "wrong_plane",
    );
    t.is(
      (await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" }))
        .status,
      405,
    );

    // the page in a real browser: what a reader sees
    const browser = await chromium.launch({
      executablePath: "/usr/bin/chromium",
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    });
    t.teardown(() => browser.close());
    const tab = await browser.newPage({ viewport: { width: 900, height: 900 } });
    const dialogs: string[] = [];
    tab.on("dialog", (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    const nav = await tab.goto(url);
    t.is(nav?.status(), 200);
    t.is(await tab.title(), `${page.name} status`, "the title in the input did not run");
    t.is(((await tab.locator("h1").textContent()) ?? "").trim(), page.name);
    t.is(((await tab.locator(".overall").textContent()) ?? "").trim(), "Major outage");
    const openCard = tab.locator("article.incident:not(.resolved)");
    t.is(await openCard.count(), 1);
    const openText = (await openCard.textContent()) ?? "";
    t.true(openText.includes(evil), openText);
    t.true(openText.includes("critical"), openText);
    t.true(openText.includes("Identified"), openText);
    t.true(openText.includes("Found the cause."), openText);
    t.true(openText.includes("<img src=x onerror=alert(1)> we are on it"), openText);
    t.is(await tab.locator("script").count(), 0);
    t.is(await tab.locator("article img").count(), 0);
    const headings = await tab.locator("h2").allTextContents();
    t.deepEqual(
      headings.map((h) => h.trim()),
      ["Open incidents", "Resolved in the last 14 days"],
    );
    const resolvedText = (await tab.locator("article.incident.resolved").textContent()) ?? "";
    t.true(resolvedText.includes("Old logs are late"), resolvedText);
    t.true(resolvedText.includes("Logs caught up."), resolvedText);
    t.true(resolvedText.includes("Resolved"), resolvedText);
    const dir = join(process.cwd(), ".tmp", "artifacts");
    mkdirSync(dir, { recursive: true });
    const shot = join(dir, "status-page.png");
    await tab.screenshot({ path: shot, fullPage: true });
    t.true(statSync(shot).size > 1000);
    t.deepEqual(dialogs, [], "nothing of the input ran");
  },
);
