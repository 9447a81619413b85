import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import anyTest, { type TestFn } from "ava";
import {
  apiToolNames,
  McpConnectError,
  type McpSession,
  openMcp,
  readSuite,
  runSuite,
} from "../../effects/eval/mod.js";
import { type ModelConfig, requireModelConfig } from "../../effects/model.js";
import { type MessagesApi, startMessagesApi } from "../helpers/messages-api.js";

/**
 * eval's run against a local Messages API (the real SDK) and an MCP session of the test's: the
 * loop's tool calls and tool errors, a model error and an invalid judge as case failures, the
 * budget; and the MCP client's confinement to mcp_url's origin.
 */

const test = anyTest as TestFn<{ api: MessagesApi; cfg: ModelConfig }>;

test.before(async (t) => {
  const api = await startMessagesApi();
  const cfg = requireModelConfig({
    ANTHROPIC_API_KEY: "sk-test-eval-run-0123456789",
    ANTHROPIC_BASE_URL: api.url,
    SLIPWAY_MODEL_MAX_RETRIES: "0",
  });
  t.context = { api, cfg };
});
test.after.always(async (t) => t.context.api.close());

/** An MCP session of the test's: `shop.lookup` answers, `fail` errors. */
function session(seen: { name: string; args: unknown }[]): McpSession {
  return {
    tools: [
      { name: "shop.lookup", description: "Looks an item up", input_schema: { type: "object" } },
      { name: "fail", description: "Always fails", input_schema: { type: "object" } },
    ],
    call: async (name, args) => {
      seen.push({ name, args });
      return name === "fail"
        ? { text: "it broke", is_error: true }
        : { text: '{"price": 3}', is_error: false };
    },
    close: async () => {},
  };
}

const PRICES = { m: { input_per_mtok: 1, output_per_mtok: 1 }, j: { input_per_mtok: 1, output_per_mtok: 1 } };

test.serial(
  "the loop: tool names mapped both ways, tool errors given back, a model error and an invalid judge fail their case only",
  async (t) => {
    const { api, cfg } = t.context;
    t.deepEqual(
      [...apiToolNames(session([]).tools)],
      [
        ["shop_lookup", "shop.lookup"],
        ["fail", "fail"],
      ],
    );
    const plan = readSuite(
      "s.json",
      JSON.stringify({
        version: 1,
        defaults: { models: ["m"], judge_model: "j", prices: PRICES },
        cases: [
          {
            name: "lookup",
            prompt: "price?",
            expect_tools: [{ tool: "shop.lookup" }],
            assertions: [{ answer_contains: "3" }],
            judge: { rubric: "says 3", min_score: 5 },
          },
          { name: "errors", prompt: "break", assertions: [{ tool_called: "fail" }] },
          { name: "down", prompt: "x" },
        ],
      }),
      { configured_model: "m" },
    );
    const n = api.requests.length;
    api.script(
      { kind: "tools", calls: [{ name: "shop_lookup", input: { id: 7 } }] },
      { kind: "text", text: "It costs 3." },
      { kind: "tool", input: { score: 11, reasons: [] } },
      { kind: "tools", calls: [{ name: "fail", input: {} }] },
      { kind: "text", text: "It failed." },
      { kind: "error", status: 500 },
    );
    const seen: { name: string; args: unknown }[] = [];
    const cases: string[] = [];
    const out = await runSuite({
      plan,
      cfg,
      mcp: session(seen),
      budget_usd: 1,
      onCase: async (r) => {
        cases.push(r.case);
      },
    });
    t.deepEqual(cases, ["lookup", "errors", "down"]);
    t.deepEqual(seen, [
      { name: "shop.lookup", args: { id: 7 } },
      { name: "fail", args: {} },
    ]);
    const [lookup, errors, down] = out.results;
    t.is(lookup!.status, "failed");
    t.true(lookup!.assertions.every((a) => a.ok));
    t.regex(lookup!.failures[0]!, /^judge: invalid output: /);
    t.is(errors!.status, "passed");
    t.deepEqual(errors!.tool_calls, [{ tool: "fail", is_error: true }]);
    // the tool error went back to the model as a tool_result with is_error
    const back = api.requests[n + 4]!.body.messages.at(-1).content[0];
    t.like(back, { type: "tool_result", is_error: true, content: "it broke" });
    // the tools were the session's, by their API names
    t.deepEqual(
      api.requests[n]!.body.tools.map((x: { name: string }) => x.name),
      ["shop_lookup", "fail"],
    );
    t.is(down!.status, "failed");
    t.regex(down!.failures[0]!, /^model: model API at .* answered 500/);
    t.is(out.totals.failed, 2);
    t.true(out.totals.cost_usd > 0);
    t.is(api.requests.length - n, 6);
  },
);

/** A server that answers every request with a redirect to another origin. */
async function redirecting(): Promise<{ url: string; server: Server }> {
  const server = createServer((_req, res) => {
    res.writeHead(307, { location: "http://169.254.169.254/mcp" });
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, server };
}

test("the MCP client stays on mcp_url's origin: no redirect, no private address unless trusted", async (t) => {
  const { url, server } = await redirecting();
  t.teardown(() => server.close());
  const origin = new URL(url).origin;
  const refused = await t.throwsAsync(() => openMcp({ url, trustedOrigins: [], timeoutMs: 2000 }), {
    instanceOf: McpConnectError,
  });
  t.regex(refused!.message, /is not a public address \(loopback\)/);
  const redirected = await t.throwsAsync(() => openMcp({ url, trustedOrigins: [origin], timeoutMs: 2000 }), {
    instanceOf: McpConnectError,
  });
  t.regex(redirected!.message, /redirect/);
  const allowed = await t.throwsAsync(
    () => openMcp({ url, trustedOrigins: [], allow: () => true, timeoutMs: 2000 }),
    { instanceOf: McpConnectError },
  );
  t.regex(
    allowed!.message,
    /redirect/,
    "an address the operator allows is reached, the redirect still refused",
  );
});
