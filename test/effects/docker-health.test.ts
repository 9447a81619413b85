import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import test from "ava";
import { waitHealthy } from "../../effects/docker/health.js";
import { ContainerExitedError, type ContainerStatus } from "../../effects/docker/types.js";

const status = (running: boolean, exitCode: number | null): ContainerStatus => ({
  running,
  state: running ? "running" : "exited",
  containerId: "c1",
  startedAt: "2026-11-28T00:00:00Z",
  exitCode,
});

/** A server on loopback that answers 200 to everything: another container holding a freed address. */
async function answering(t: { teardown(fn: () => void): void }): Promise<string> {
  const server = createServer((_req, res) => res.writeHead(200).end("ok"));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.teardown(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
}

test("waitHealthy: a 2xx from the address of a container that already stopped is not its health", async (t) => {
  const url = await answering(t);
  const asked: string[] = [];
  const e = await t.throwsAsync(
    waitHealthy(url, 5_000, undefined, { containerId: "c1" }, async (id) => {
      asked.push(id);
      return status(false, 3);
    }),
    { instanceOf: ContainerExitedError },
  );
  t.is(e?.exitCode, 3);
  t.deepEqual(asked, ["c1"], "asked once, after the answer");
});

test("waitHealthy: a 2xx while the container runs is its health; without a container, any 2xx", async (t) => {
  const url = await answering(t);
  const got = await waitHealthy(url, 5_000, undefined, { containerId: "c1" }, async () => status(true, null));
  t.is(got.status, 200);
  const plain = await waitHealthy(url, 5_000, undefined, {}, async () => {
    throw new Error("not asked without a container");
  });
  t.is(plain.status, 200);
});
