import test from "ava";
import { runCli } from "../../cli/mod.js";
import { collectingIo } from "../cli/fake-platform.js";

/**
 * `slipway infra release-image` from the CLI: the build itself is proven by release-image.test.ts
 * (a private engine and a registry); here, what the verb answers when it cannot build. An engine
 * that does not answer is exit 4 with the reason, nothing built; a registry that is not host[:port]
 * is a usage error before any engine is asked.
 */
async function cli(argv: string[], env: Record<string, string | undefined>) {
  const c = collectingIo(env);
  const code = await runCli(argv, c.io);
  return { code, stdout: c.stdout(), stderr: c.stderr() };
}

test("release-image without a reachable engine: exit 4, the reason, no image", async (t) => {
  const r = await cli(["infra", "release-image", "--json"], {
    DOCKER_HOST: "unix:///nonexistent/docker.sock",
  });
  t.is(r.code, 4, r.stderr);
  const body = JSON.parse(r.stdout);
  t.is(body.status, "error");
  t.is(body.error.code, "container_runtime_unavailable");
  t.regex(body.error.message, /nonexistent\/docker\.sock.*no image was built/);
});

test("release-image --push that is not a registry host[:port]: exit 2, nothing asked of the engine", async (t) => {
  const r = await cli(["infra", "release-image", "--push", "http://x/y; rm -rf /"], {
    DOCKER_HOST: "unix:///nonexistent/docker.sock",
  });
  t.is(r.code, 2, r.stderr);
  t.regex(r.stderr, /--push expects a registry as host\[:port\]/);
});
