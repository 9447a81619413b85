import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createServer, request as httpRequest, type Server } from "node:http";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import anyTest, { type TestFn } from "ava";
import { verifyServiceToken } from "../../proto/service-token.js";
import {
  ACTOR,
  type CallResult,
  call,
  eventually,
  freePort,
  newApp,
  type PlatformContext,
  platformPerFile,
  result,
  type TestPlatform,
  controlAuth,
} from "../helpers/infra.js";

/**
 * MCP end to end (docs/mcp.md): a real platform, the starter itself running
 * (its server on a loopback port, no container) behind a small counting
 * proxy that is the app's base_url, and the official MCP client of
 * `@modelcontextprotocol/sdk` talking to the app's endpoint on the data plane.
 */

interface Seen {
  method: string;
  url: string;
  authorization: string | undefined;
  body: string;
}
type Ctx = PlatformContext & {
  app: string;
  token: string;
  other: { app: string; token: string };
  starter: { child: ChildProcess; output: () => string };
  front: { server: Server; seen: Seen[]; base: string };
  serviceKey: string;
};
const test = anyTest as TestFn<Ctx>;
const tsxLoader = import.meta.resolve("tsx");

/** The app's base_url: forwards to the starter, keeping what it saw (was a call proxied?). */
async function startFront(port: number, to: () => number): Promise<Ctx["front"]> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      seen.push({
        method: req.method ?? "",
        url: req.url ?? "",
        authorization: req.headers.authorization,
        body: body.toString(),
      });
      // targets that misbehave (docs/mcp.md: what the platform makes of the app's answer)
      if (req.url === "/tools/slow") return; // never answers (the platform gives up after 10 s)
      if (req.url === "/tools/big") {
        res.writeHead(200, { "content-type": "application/json" });
        return res.end(JSON.stringify({ blob: "x".repeat(1024 * 1024 + 16) }));
      }
      if (req.url === "/tools/teapot") {
        res.writeHead(418, { "content-type": "text/plain" });
        return res.end("short and stout");
      }
      if (req.url === "/tools/moved") {
        res.writeHead(302, { location: "/tools/word_count" });
        return res.end();
      }
      const out = httpRequest(
        { host: "127.0.0.1", port: to(), method: req.method, path: req.url, headers: req.headers },
        (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        },
      );
      out.on("error", () => {
        res.writeHead(502);
        res.end();
      });
      out.end(body);
    });
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  return { server, seen, base: `http://127.0.0.1:${port}` };
}

async function http(
  method: string,
  url: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<CallResult> {
  return result(
    await fetch(url, {
      method,
      headers: {
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...ACTOR,
        ...(Object.keys(headers).some((k) => k.toLowerCase() === "authorization") ? {} : controlAuth(url)),
        ...headers,
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    }),
  );
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** The official MCP client on the app's endpoint with this token. */
async function mcpClient(dataUrl: string, token: string): Promise<Client> {
  const client = new Client({ name: "slipway-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${dataUrl}/mcp`), {
    requestInit: { headers: bearer(token) },
  });
  await client.connect(transport);
  return client;
}

/** The app's `mcp.tool_call` events, newest first (the operator reads them on the control plane). */
async function toolCalls(p: TestPlatform, app: string): Promise<any[]> {
  const r = await http("GET", `${p.controlUrl}/app-events?app=${app}&type=mcp.tool_call&limit=500`);
  if (r.status !== 200) throw new Error(r.text);
  return r.body.items;
}

platformPerFile(test, {
  // the starter and its front run on top of the platform: `teardown` stops them before it closes
  extra: async (p, _nats, ctx) => {
    const app = `mcp-${randomUUID().slice(0, 8)}`;
    const frontPort = await freePort();
    const init = await call(p.controlUrl, "initialize-app", {
      name: app,
      base_url: `http://127.0.0.1:${frontPort}`,
    });
    if (init.status !== 200) throw new Error(`initialize-app: ${init.text}`);
    const workspace = join(p.dataDir, "apps", init.body.resource.workspace as string);
    const other = await newApp(p, "mcp");
    // the starter as initialize-app wrote it, with the .env it wrote (its service key)
    await eventually(
      async () => existsSync(join(workspace, ".env")) && existsSync(join(workspace, "src", "server.ts")),
    );
    const env = Object.fromEntries(
      readFileSync(join(workspace, ".env"), "utf8")
        .split("\n")
        .filter((l) => l.includes("="))
        .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
    ) as Record<string, string>;
    const starterPort = await freePort();
    let out = "";
    const child = spawn(process.execPath, [`--import=${tsxLoader}`, join(workspace, "src", "server.ts")], {
      cwd: workspace,
      env: {
        PATH: process.env.PATH ?? "",
        PORT: String(starterPort),
        HOST: "127.0.0.1",
        SLIPWAY_DATA_URL: p.dataUrl,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (out += d.toString()));
    ctx.starter = { child, output: () => out };
    const front = await startFront(frontPort, () => starterPort);
    ctx.front = front;
    await eventually(async () => (await fetch(`${front.base}/health`)).ok, 20_000, 100).catch((e) => {
      throw new Error(`the starter did not start: ${String(e)}\n${out}`);
    });
    // the tools of these tests, registered by the operator on the control plane
    const word = await http("POST", `${p.controlUrl}/mcp/tools`, {
      app,
      name: "word_count",
      description: "Counts the words, characters and lines of a text",
      input_schema: {
        type: "object",
        properties: { text: { type: "string", maxLength: 10_000 } },
        required: ["text"],
        additionalProperties: false,
      },
      target_path: "/tools/word_count",
    });
    if (word.status !== 200) throw new Error(`register: ${word.text}`);
    return {
      app,
      token: init.body.result.token,
      other: { app: other.name, token: other.token },
      serviceKey: env.SLIPWAY_SERVICE_KEY!,
    };
  },
  teardown: async ({ starter, front }) => {
    if (starter && starter.child.exitCode === null) {
      const exited = new Promise((r) => starter.child.once("exit", r));
      starter.child.kill("SIGTERM");
      await exited;
    }
    front?.server.closeAllConnections();
    front?.server.close();
  },
});

test.serial(
  "the official MCP client lists the app's tools, gets its instructions and calls a tool that the starter answers",
  async (t) => {
    const { p, app, token, front, serviceKey } = t.context;
    const set = await http(
      "POST",
      `${p.dataUrl}/mcp/instructions`,
      { instructions: "Count words with word_count." },
      bearer(token),
    );
    t.is(set.status, 200, set.text);
    t.is(set.body.resource.type, "McpRegistry");
    t.is(set.body.resource.id, `mcp_${app}`);
    const echo = await http(
      "POST",
      `${p.dataUrl}/mcp/tools`,
      {
        name: "echo",
        description: "Echoes its arguments",
        input_schema: {
          type: "object",
          properties: { q: { type: "string", maxLength: 100 }, n: { type: "integer" } },
        },
        target_path: "/tools/echo",
        method: "GET",
        high_risk: false,
      },
      bearer(token),
    );
    t.is(echo.status, 200, echo.text);
    t.deepEqual(echo.body.result, { tool: "echo", replaced: false });
    const listed = await http("GET", `${p.controlUrl}/mcp/tools?app=${app}`);
    t.deepEqual(
      listed.body.items.map((x: any) => [x.name, x.method, x.high_risk]),
      [
        ["word_count", "POST", false],
        ["echo", "GET", false],
      ],
    );

    const client = await mcpClient(p.dataUrl, token);
    t.teardown(() => client.close());
    t.is(client.getInstructions(), "Count words with word_count.");
    const { tools } = await client.listTools();
    t.deepEqual(
      tools.map((x) => x.name),
      ["word_count", "echo"],
    );
    t.is(tools[0]!.inputSchema.type, "object");
    t.deepEqual(tools[0]!.inputSchema.required, ["text"]);

    const before = front.seen.length;
    const r = await client.callTool({ name: "word_count", arguments: { text: "the quick brown fox" } });
    t.falsy(r.isError, JSON.stringify(r));
    t.deepEqual(r.structuredContent, { tool: "word_count", ok: true, words: 4, characters: 19, lines: 1 });
    t.deepEqual(JSON.parse((r.content as any[])[0].text), r.structuredContent);
    // proxied once, to the target, with a service token of the app for job mcp:word_count
    const seen = front.seen.slice(before);
    t.is(seen.length, 1);
    t.is(seen[0]!.method, "POST");
    t.is(seen[0]!.url, "/tools/word_count");
    t.deepEqual(JSON.parse(seen[0]!.body), { text: "the quick brown fox" });
    const v = verifyServiceToken(seen[0]!.authorization!.replace(/^Bearer /, ""), serviceKey, { app });
    t.true(v.ok);
    if (v.ok) t.is(v.claims.job, "mcp:word_count");

    // GET: the arguments as the query
    const e = await client.callTool({ name: "echo", arguments: { q: "hi", n: 2 } });
    t.deepEqual(e.structuredContent, { tool: "echo", ok: true, arguments: { q: "hi", n: "2" } });

    const events = await eventually(async () => {
      const all = await toolCalls(p, app);
      return all.length >= 2 ? all : undefined;
    });
    const ok = events.find((x) => x.subject === "word_count")!;
    t.like(ok, { type: "mcp.tool_call", owner: "_app", subject: "word_count" });
    t.like(ok.data, { tool: "word_count", ok: true, status: 200 });
    t.regex(ok.data.host, /^127\.0\.0\.1:\d+$/);
  },
);

test.serial(
  "arguments that break the tool's schema are an error naming why; nothing is proxied or recorded as allowed",
  async (t) => {
    const { p, app, token, front } = t.context;
    const client = await mcpClient(p.dataUrl, token);
    t.teardown(() => client.close());
    const before = front.seen.length;
    const okBefore = (await toolCalls(p, app)).filter((x) => x.data.ok).length;
    const r = await client.callTool({ name: "word_count", arguments: { text: 42, extra: true } });
    t.true(r.isError);
    const text = (r.content as any[])[0].text as string;
    t.regex(text, /^invalid arguments: /);
    t.regex(text, /\/text must be string/);
    t.regex(text, /\/extra unknown field/);
    const missing = await client.callTool({ name: "word_count", arguments: {} });
    t.regex((missing.content as any[])[0].text, /\/text is required/);
    t.is(front.seen.length, before, "nothing reached the app");
    const events = await eventually(async () => {
      const all = await toolCalls(p, app);
      return all.filter((x) => x.data.reason?.startsWith("invalid arguments")).length >= 2 ? all : undefined;
    });
    t.is(events.filter((x) => x.data.ok).length, okBefore);
    t.like(events[0].data, { tool: "word_count", ok: false });
    // an unknown tool is a JSON-RPC error
    await t.throwsAsync(() => client.callTool({ name: "nope", arguments: {} }), {
      message: /unknown tool nope/,
    });
  },
);

test.serial("the registry refuses bad input with 400 naming why", async (t) => {
  const { p, app } = t.context;
  const base = { app, name: "t1", description: "d", target_path: "/tools/t1" };
  const bad = async (body: Record<string, unknown>, re: RegExp) => {
    const r = await http("POST", `${p.controlUrl}/mcp/tools`, body);
    t.is(r.status, 400, r.text);
    t.is(r.body.error.code, "invalid_input");
    t.regex(r.body.error.message, re, r.text);
  };
  await bad({ ...base, input_schema: { type: "object", properties: 5 } }, /^input_schema: /);
  await bad(
    { ...base, input_schema: { type: "object", properties: { a: { type: "strin" } } } },
    /^input_schema: /,
  );
  await bad({ ...base, input_schema: { type: "object", frobnicate: true } }, /^input_schema: .*frobnicate/);
  await bad({ ...base, input_schema: { type: "array" } }, /^input_schema: must describe an object/);
  await bad(
    { ...base, input_schema: { type: "object", properties: { s: { type: "string", pattern: "^(a+)+$" } } } },
    /safe/,
  );
  await bad({ ...base, name: "Bad Name" }, /^name: /);
  await bad({ ...base, name: "9lives" }, /^name: /);
  await bad({ ...base, target_path: "//evil.example/x" }, /^target_path: /);
  await bad({ ...base, target_path: "http://evil.example/x" }, /^target_path: /);
  await bad({ ...base, target_path: "tools/x" }, /^target_path: /);
  await bad({ ...base, method: "TRACE" }, /^method: /);
  await bad({ ...base, description: "" }, /^description: /);
  await bad({ ...base, extra: 1 }, /extra/);
  const long = await http("POST", `${p.controlUrl}/mcp/instructions`, {
    app,
    instructions: "x".repeat(10_001),
  });
  t.is(long.status, 400);
  const unknown = await http("POST", `${p.controlUrl}/mcp/proactive`, {
    app,
    settings: { enabled: true, tools: ["nope"], interval_seconds: 600 },
  });
  t.is(unknown.status, 400, unknown.text);
  t.regex(unknown.body.error.message, /nope is not a registered tool/);
  const short = await http("POST", `${p.controlUrl}/mcp/proactive`, {
    app,
    settings: { enabled: true, tools: [], interval_seconds: 59 },
  });
  t.is(short.status, 400);
  const tz = await http("POST", `${p.controlUrl}/mcp/proactive`, {
    app,
    settings: {
      enabled: true,
      tools: [],
      interval_seconds: 60,
      quiet_hours: { start: "22:00", end: "07:00", timezone: "Mars/Olympus" },
    },
  });
  t.is(tz.status, 400);
  t.is(
    (await http("POST", `${p.controlUrl}/mcp/tools`, { ...base, app: undefined })).status,
    400,
    "app is required on the control plane",
  );
  t.is((await http("DELETE", `${p.controlUrl}/mcp/tools?app=${app}&name=nope`)).status, 404);
  t.is((await http("GET", `${p.controlUrl}/mcp/tools?app=no-such-app`)).status, 404);
  t.is((await http("PUT", `${p.controlUrl}/mcp/instructions`, { app })).status, 405);
});

test.serial(
  "proactive settings name registered tools; a proactive tool cannot be deleted until taken out",
  async (t) => {
    const { p, app, token } = t.context;
    const settings = {
      enabled: true,
      tools: ["word_count"],
      interval_seconds: 900,
      quiet_hours: { start: "22:00", end: "07:00", timezone: "Europe/Paris" },
    };
    const set = await http("POST", `${p.dataUrl}/mcp/proactive`, { settings }, bearer(token));
    t.is(set.status, 200, set.text);
    t.deepEqual((await http("GET", `${p.dataUrl}/mcp/proactive`, undefined, bearer(token))).body, {
      app,
      settings,
    });
    const del = await http("DELETE", `${p.dataUrl}/mcp/tools?name=word_count`, undefined, bearer(token));
    t.is(del.status, 409, del.text);
    const tmp = await http(
      "POST",
      `${p.dataUrl}/mcp/tools`,
      { name: "tmp", description: "d", target_path: "/tools/tmp" },
      bearer(token),
    );
    t.is(tmp.status, 200);
    const gone = await http("DELETE", `${p.dataUrl}/mcp/tools?name=tmp`, undefined, bearer(token));
    t.is(gone.status, 200, gone.text);
    t.false(
      (await http("GET", `${p.dataUrl}/mcp/tools`, undefined, bearer(token))).body.items.some(
        (x: any) => x.name === "tmp",
      ),
    );
  },
);

test.serial(
  "a user's access token reads the registry and calls tools as its owner; writes need the app's token",
  async (t) => {
    const { p, app, token } = t.context;
    const email = `owner.${randomUUID().slice(0, 6)}@example.com`;
    const password = `pw-${randomUUID()}`;
    const seeded = await http("POST", `${p.controlUrl}/auth/admin/seed-owner`, { app, email, password });
    t.is(seeded.status, 200, seeded.text);
    const login = await http("POST", `${p.dataUrl}/auth/login`, { email, password }, bearer(token));
    t.is(login.status, 200, login.text);
    const access = login.body.access_token as string;
    const userId = login.body.user.id as string;
    t.is((await http("GET", `${p.dataUrl}/mcp/tools`, undefined, bearer(access))).status, 200);
    t.is((await http("GET", `${p.dataUrl}/mcp/instructions`, undefined, bearer(access))).status, 200);
    const write = await http(
      "POST",
      `${p.dataUrl}/mcp/instructions`,
      { instructions: "mine" },
      bearer(access),
    );
    t.is(write.status, 403);
    t.is((await http("DELETE", `${p.dataUrl}/mcp/tools?name=echo`, undefined, bearer(access))).status, 403);

    const client = await mcpClient(p.dataUrl, access);
    t.teardown(() => client.close());
    const r = await client.callTool({ name: "word_count", arguments: { text: "a b c" } });
    t.falsy(r.isError, JSON.stringify(r));
    const ev = await eventually(async () => (await toolCalls(p, app)).find((x) => x.owner === userId));
    t.like(ev, { subject: "word_count", owner: userId });
    t.like(ev.data, { tool: "word_count", ok: true });
  },
);

test.serial(
  "another app's token is 403 on this app's registry and sees none of its tools; the endpoint is the data plane's and POST only",
  async (t) => {
    const { p, app, other, token } = t.context;
    const o = bearer(other.token);
    const write = await http(
      "POST",
      `${p.dataUrl}/mcp/tools`,
      { app, name: "x", description: "d", target_path: "/x" },
      o,
    );
    t.is(write.status, 403, write.text);
    t.is((await http("GET", `${p.dataUrl}/mcp/tools?app=${app}`, undefined, o)).status, 403);
    t.is((await http("DELETE", `${p.dataUrl}/mcp/tools?app=${app}&name=echo`, undefined, o)).status, 403);
    const client = await mcpClient(p.dataUrl, other.token);
    t.teardown(() => client.close());
    t.deepEqual((await client.listTools()).tools, []);
    await t.throwsAsync(() => client.callTool({ name: "word_count", arguments: { text: "x" } }), {
      message: /unknown tool/,
    });
    // no token, the control plane, GET
    t.is(
      (await http("POST", `${p.dataUrl}/mcp`, { jsonrpc: "2.0", id: 1, method: "tools/list" })).status,
      401,
    );
    t.is(
      (await http("POST", `${p.controlUrl}/mcp`, { jsonrpc: "2.0", id: 1, method: "tools/list" })).status,
      403,
    );
    const get = await http("GET", `${p.dataUrl}/mcp`, undefined, bearer(token));
    t.is(get.status, 405);
    t.is(get.body.error.code, "method_not_allowed");
    // what the MCP transport refuses before any JSON-RPC exchange is in the platform's error shape
    const list = { jsonrpc: "2.0", id: 1, method: "tools/list" };
    const noAccept = await http("POST", `${p.dataUrl}/mcp`, list, bearer(token));
    t.is(noAccept.status, 406, noAccept.text);
    t.is(noAccept.body.status, "error");
    t.is(noAccept.body.error.code, "not_acceptable");
    t.regex(noAccept.body.error.request_id, /^req_/);
    const mcpHeaders = { ...bearer(token), accept: "application/json, text/event-stream" };
    const notJson = await fetch(`${p.dataUrl}/mcp`, {
      method: "POST",
      headers: { ...mcpHeaders, "content-type": "application/json" },
      body: "{nope",
    });
    const notJsonBody = (await notJson.json()) as { status: string; error: { code: string } };
    t.is(notJson.status, 400);
    t.is(notJsonBody.status, "error");
    t.is(notJsonBody.error.code, "invalid_json");
  },
);

test.serial(
  "policies: a deny rule fails the call naming the rule; a stage rule answers pending_approval and the approval runs it",
  async (t) => {
    const { p, app, token, front } = t.context;
    const rule = async (body: Record<string, unknown>) => {
      const r = await http("POST", `${p.dataUrl}/policies`, body, bearer(token));
      t.is(r.status, 200, r.text);
    };
    // echo, registered again as high-risk: the stage rule applies to high-risk calls only
    const risky = await http("POST", `${p.controlUrl}/mcp/tools`, {
      app,
      name: "echo",
      description: "Answers its arguments (registered high-risk here)",
      input_schema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
      target_path: "/tools/echo",
      high_risk: true,
    });
    t.is(risky.status, 200, risky.text);
    await rule({ id: "hold-risky", effect: "stage", action: "mcp:*", high_risk: true });
    const client = await mcpClient(p.dataUrl, token);
    t.teardown(() => client.close());
    const plain = await client.callTool({ name: "word_count", arguments: { text: "not risky" } });
    t.falsy(plain.isError, "word_count is not high-risk: the stage rule does not apply");
    await rule({ id: "no-words", effect: "deny", action: "mcp:word_count" });
    const before = front.seen.length;
    const denied = await client.callTool({ name: "word_count", arguments: { text: "x" } });
    t.true(denied.isError);
    t.is((denied.content as any[])[0].text, "denied by policy rule no-words");
    const staged = await client.callTool({ name: "echo", arguments: { text: "later on" } });
    t.falsy(staged.isError);
    const pending = staged.structuredContent as Record<string, string>;
    t.is(pending.status, "pending_approval");
    t.regex(pending.approval_id!, /^apr_/);
    t.truthy(pending.expires_at);
    t.is(front.seen.length, before, "neither call reached the app");
    const events = await eventually(async () => {
      const all = await toolCalls(p, app);
      return all.some((x) => x.data.reason?.startsWith("pending approval")) ? all : undefined;
    });
    t.like(events.find((x) => x.data.reason === "policy: denied by no-words")!.data, {
      ok: false,
      tool: "word_count",
    });
    t.like(events.find((x) => x.subject === "echo" && x.data.reason?.startsWith("pending"))!.data, {
      ok: false,
      reason: `pending approval ${pending.approval_id}`,
    });
    const decisions = await eventually(async () => {
      const r = await http("GET", `${p.controlUrl}/app-events?app=${app}&type=authz.decision&limit=50`);
      const xs = r.body.items as any[];
      return xs.some((x) => x.data.rule === "hold-risky") ? xs : undefined;
    });
    t.like(decisions.find((x) => x.data.rule === "no-words").data, {
      decision: "deny",
      action: "mcp:word_count",
    });
    t.like(decisions.find((x) => x.data.rule === "hold-risky").data, {
      decision: "stage",
      high_risk: true,
      action: "mcp:echo",
    });
    // the operator approves: the call runs as it was asked
    const approved = await http("POST", `${p.controlUrl}/policies/approvals/${pending.approval_id}`, { app });
    t.is(approved.status, 200, approved.text);
    t.is(front.seen.length, before + 1);
    t.deepEqual(JSON.parse(front.seen.at(-1)!.body), { text: "later on" });
    t.like(approved.body.ran, { ok: true });
    t.deepEqual(approved.body.ran.result.structuredContent, {
      tool: "echo",
      ok: true,
      arguments: { text: "later on" },
    });
    const replayed = await eventually(async () => (await toolCalls(p, app)).find((x) => x.data.replayed));
    t.like(replayed.data, { tool: "echo", ok: true, replayed: true });
    const again = await http("POST", `${p.controlUrl}/policies/approvals/${pending.approval_id}`, { app });
    t.is(again.status, 409, "it runs once");
    t.is(front.seen.length, before + 1);
    const approvals = await eventually(async () => {
      const r = await http("GET", `${p.controlUrl}/app-events?app=${app}&type=authz.approval&limit=10`);
      return (r.body.items as any[]).length ? r.body.items : undefined;
    });
    t.like(approvals[0].data, { decision: "approved", rule: "hold-risky", action: "mcp:echo" });
    // a deny or stage rule binds the app's token: the operator removes them
    for (const id of ["no-words", "hold-risky"]) {
      t.is((await http("DELETE", `${p.dataUrl}/policies?id=${id}`, undefined, bearer(token))).status, 403);
      t.is((await http("DELETE", `${p.controlUrl}/policies?app=${app}&id=${id}`)).status, 200);
    }
  },
);

/** A raw JSON-RPC POST to the app's MCP endpoint with the headers an MCP client sends. */
async function rpc(
  dataUrl: string,
  token: string,
  body: string,
): Promise<{ status: number; body: any; text: string }> {
  const r = await fetch(`${dataUrl}/mcp`, {
    method: "POST",
    headers: {
      ...bearer(token),
      accept: "application/json, text/event-stream",
      "content-type": "application/json",
    },
    body,
  });
  const text = await r.text();
  let parsed: any;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: r.status, body: parsed, text };
}

test.serial(
  "hostile tools/call bodies: 50,000-deep arguments and __proto__ keys answer a clean JSON-RPC error, nothing is proxied",
  async (t) => {
    const { p, token, front } = t.context;
    const before = front.seen.length;
    const deep = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"word_count","arguments":{"text":${"[".repeat(50_000)}${"]".repeat(50_000)}}}}`;
    const d = await rpc(p.dataUrl, token, deep);
    t.is(d.status, 200, d.text.slice(0, 300));
    t.is(d.body.id, 7);
    t.is(d.body.error.code, -32600);
    t.regex(d.body.error.message, /nests deeper than 128 levels/);
    t.notRegex(d.text, /stack|RangeError|Maximum/);
    const proto = await rpc(
      p.dataUrl,
      token,
      '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"word_count","arguments":{"__proto__":{"polluted":1},"text":"a"}}}',
    );
    t.is(proto.body.id, 8);
    t.regex(proto.body.error.message, /__proto__/);
    // in a batch too (the SDK's path)
    const batch = await rpc(
      p.dataUrl,
      token,
      '[{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"word_count","arguments":{"__proto__":{},"text":"a"}}}]',
    );
    t.regex(batch.body.error.message, /__proto__/);
    t.is(front.seen.length, before, "nothing reached the app");
  },
);

test.serial(
  "the app's answer: past 10 s a tool error, over 1 MiB a tool error, non-2xx isError naming the status, a redirect is not followed",
  async (t) => {
    const { p, app, token, front } = t.context;
    const schema = { type: "object", properties: {}, additionalProperties: false };
    for (const name of ["slow", "big", "teapot", "moved"]) {
      const r = await http("POST", `${p.controlUrl}/mcp/tools`, {
        app,
        name,
        description: name,
        input_schema: schema,
        target_path: `/tools/${name}`,
      });
      t.is(r.status, 200, r.text);
    }
    const client = await mcpClient(p.dataUrl, token);
    t.teardown(() => client.close());
    const callOf = (name: string) => client.callTool({ name, arguments: {} }, undefined, { timeout: 30_000 });
    const teapot = await callOf("teapot");
    t.true(teapot.isError);
    t.regex(JSON.stringify(teapot.content), /the app answered HTTP 418: short and stout/);
    const seenBefore = front.seen.length;
    const moved = await callOf("moved");
    t.true(moved.isError, JSON.stringify(moved));
    t.regex(JSON.stringify(moved.content), /HTTP 302/);
    t.is(front.seen.length, seenBefore + 1, "the redirect's target was not called");
    const big = await callOf("big");
    t.true(big.isError);
    t.regex(JSON.stringify(big.content), /larger than 1048576 bytes/);
    const t0 = Date.now();
    const slow = await callOf("slow");
    t.true(slow.isError);
    t.regex(JSON.stringify(slow.content), /did not answer within 10000 ms/);
    t.true(Date.now() - t0 >= 9_900, `${Date.now() - t0} ms`);
    const events = await eventually(async () => {
      const xs = await toolCalls(p, app);
      return xs.some((x) => x.subject === "slow") ? xs : undefined;
    });
    t.is(events.find((x) => x.subject === "slow").data.reason, "timeout after 10000 ms");
    t.is(events.find((x) => x.subject === "teapot").data.reason, "HTTP 418");
    for (const name of ["slow", "big", "teapot", "moved"])
      t.is((await http("DELETE", `${p.controlUrl}/mcp/tools?app=${app}&name=${name}`)).status, 200);
  },
);

test.serial(
  "the control token on the data plane's /mcp is 403; an app holds at most 64 tools (the 65th is 409)",
  async (t) => {
    const { p, other } = t.context;
    const op = await rpc(p.dataUrl, p.controlToken, '{"jsonrpc":"2.0","id":1,"method":"tools/list"}');
    t.is(op.status, 403, op.text);
    t.is(op.body.error.code, "forbidden");
    const tool = (i: number) => ({
      app: other.app,
      name: `t${i}`,
      description: "d",
      target_path: `/tools/t${i}`,
    });
    for (let i = 0; i < 64; i += 16) {
      const rs = await Promise.all(
        Array.from({ length: 16 }, (_, k) => http("POST", `${p.controlUrl}/mcp/tools`, tool(i + k))),
      );
      t.true(
        rs.every((r) => r.status === 200),
        rs.find((r) => r.status !== 200)?.text,
      );
    }
    const over = await http("POST", `${p.controlUrl}/mcp/tools`, tool(64));
    t.is(over.status, 409, over.text);
    t.regex(over.body.error.message, /64 tools/);
    t.is((await http("POST", `${p.controlUrl}/mcp/tools`, { ...tool(3), description: "again" })).status, 200);
  },
);

test.serial(
  "a hostile input-schema pattern (`^(a+)+$`, maxLength 100) is refused at registration at once, and /healthz answers meanwhile",
  async (t) => {
    const { p, app, token } = t.context;
    // the review's schema: `^(a+)+$` with maxLength 100 was accepted, and a call froze the gateway
    // (26 characters: 2.5 s, doubling with each more; 100: never). Both answer in a few ms on an idle
    // machine; the bounds are wall times on a shared 2-core machine under load (20+ runnable
    // processes were seen), so they are 250 ms: far from a stall, not a measure of the engine. The
    // CPU bound of 50 ms on the checks themselves is test/gateway/mcp-schema.test.ts's.
    const hostile = {
      name: "redos",
      description: "r",
      input_schema: {
        type: "object",
        properties: { t: { type: "string", maxLength: 100, pattern: "^(a+)+$" } },
        required: ["t"],
        additionalProperties: false,
      },
      target_path: "/tools/echo",
    };
    const t0 = performance.now();
    const refused = await http("POST", `${p.dataUrl}/mcp/tools`, hostile, bearer(token));
    const ms = performance.now() - t0;
    t.is(refused.status, 400, refused.text);
    t.regex(refused.body.error.message, /nested quantifiers/);
    t.log(`first refusal ${ms.toFixed(1)} ms`);
    const timed = async (f: () => Promise<unknown>) => {
      const s = performance.now();
      await f();
      return performance.now() - s;
    };
    // the best of 3 (a single sample on this machine measures its other load)
    let call = Infinity;
    let health = Infinity;
    for (let i = 0; i < 3; i++) {
      const [c, h] = await Promise.all([
        timed(() => http("POST", `${p.dataUrl}/mcp/tools`, hostile, bearer(token))),
        timed(() => fetch(`${p.controlUrl}/healthz`).then((r) => r.text())),
      ]);
      call = Math.min(call, c);
      health = Math.min(health, h);
    }
    t.log(`refusal ${call.toFixed(1)} ms, /healthz ${health.toFixed(1)} ms`);
    t.true(call < 250, `refusal ${call.toFixed(1)} ms`);
    t.true(health < 250, `/healthz ${health.toFixed(1)} ms`);
    void app;
  },
);
