import { randomUUID } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import { parseCompose } from "../../actors/production/compose.js";
import { PlatformError, validateInput } from "../../proto/mod.js";
import { call, type PlatformContext, platformPerFile } from "../helpers/infra.js";

/**
 * Hostile bodies of security finding #15 that answered 500 (or worse): each is a 4xx in the
 * documented error shape now, and nothing of it is used where it could do harm.
 */

const test = anyTest as TestFn<PlatformContext>;
platformPerFile(test);

/** `{"a":{"a":...}}`, `depth` levels deep, built as text (no recursion here either). */
const deepObject = (depth: number, leaf = "1") => `${'{"a":'.repeat(depth)}${leaf}${"}".repeat(depth)}`;

test("POST /connect/gmail/send with a 100,000-deep JSON object is 400, not 500", async (t) => {
  const { p } = t.context;
  const app = `hb${randomUUID().slice(0, 8)}`;
  const init = await call(p.controlUrl, "initialize-app", { name: app });
  t.is(init.status, 200, init.text);
  const headers = {
    authorization: `Bearer ${init.body.result.token}`,
    "content-type": "application/json",
    "x-platform-actor-type": "app",
    "x-platform-actor-id": "t",
  };
  for (const body of [
    deepObject(100_000),
    `{"to":"a@example.com","subject":"s","text":"t","x":${deepObject(100_000)}}`,
  ]) {
    const r = await fetch(`${p.dataUrl}/connect/gmail/send`, { method: "POST", headers, body });
    const text = await r.text();
    t.is(r.status, 400, text);
    const b = JSON.parse(text);
    t.is(b.status, "error");
    t.is(b.error.code, "invalid_input");
    t.is(typeof b.error.request_id, "string");
    t.false(text.includes("Maximum call stack"));
  }
});

test("productionize: mcp_mtls_tls_options with a newline is 400 (it names a vault secret, and becomes a KV key)", async (t) => {
  const { p } = t.context;
  const app = `hb${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app })).status, 200);
  const r = await call(p.controlUrl, "productionize", {
    app,
    host: `${app}.example.com`,
    mcp_mtls_host: `mcp.${app}.example.com`,
    mcp_mtls_tls_options: "X\n privileged: true",
  });
  t.is(r.status, 400, r.text);
  t.is(r.body.error.code, "invalid_input");
  t.is(r.body.error.details[0].path, "/mcp_mtls_tls_options");
  t.throws(() => validateInput("productionize", { app, mcp_mtls_tls_options: "A.B" }), {
    instanceOf: PlatformError,
  });
  t.notThrows(() => validateInput("productionize", { app, mcp_mtls_tls_options: "MCP_CLIENT_CA" }));
});

test("a compose file with a YAML alias bomb is refused as invalid_input (400), not 500", (t) => {
  const levels = ["a: &a [x, x, x, x, x, x, x, x, x]"];
  for (let i = 1; i < 9; i++) {
    const prev = String.fromCharCode(96 + i);
    const name = String.fromCharCode(97 + i);
    levels.push(`${name}: &${name} [${Array(9).fill(`*${prev}`).join(", ")}]`);
  }
  const bomb = `x-bomb:\n${levels.map((l) => `  ${l}`).join("\n")}\nservices:\n  web:\n    image: "shop@sha256:${"ab".repeat(32)}"\n`;
  const e = t.throws(() => parseCompose(bomb, "compose.prod.yaml"), { instanceOf: PlatformError });
  t.is((e as PlatformError).code, "invalid_input");
  t.regex(e!.message, /^compose\.prod\.yaml is not a compose file the platform reads: .*alias/i);
});
