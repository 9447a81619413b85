import { rmSync } from "node:fs";
import test from "ava";
import { keys, type Resource } from "../../proto/mod.js";
import { ReadIndex } from "../../store/mod.js";
import { tempDir } from "../helpers/infra.js";

function secret(version: number): Resource {
  return {
    type: "Secret",
    id: "sec_01JREADINDEX000000000000",
    app_id: "ri",
    status: "succeeded",
    created_at: "2026-01-01T00:00:00.000Z",
    updated_at: `2026-01-01T00:00:0${version}.000Z`,
    name: "S",
    version,
  } as Resource;
}
const KEY = keys.resource("ri", "Secret", "sec_01JREADINDEX000000000000");

async function withIndex(fn: (ix: ReadIndex) => Promise<void>): Promise<void> {
  const dir = tempDir("slipway-ri-");
  const ix = await ReadIndex.open(dir);
  try {
    await fn(ix);
  } finally {
    await ix.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const version = async (ix: ReadIndex) => (await ix.getResource(secret(1).id))?.version;

test("read index: an answer written after revision r replaces r and gives way to the next revision, never to an older one", async (t) => {
  await withIndex(async (ix) => {
    await ix.applyResource(KEY, secret(1), 5);
    await ix.applyAnswer(KEY, secret(2), 5);
    t.is(await version(ix), 2, "the answer is newer than the revision it was written after");
    await ix.applyResource(KEY, secret(1), 5);
    await ix.applyResource(KEY, secret(1), 4);
    t.is(await version(ix), 2, "the same or an older revision, arriving late, does not hide the answer");
    await ix.applyResource(KEY, secret(2), 9);
    t.is(await version(ix), 2, "the write's own revision takes the answer's place");
    await ix.applyAnswer(KEY, secret(1), 5);
    t.is(await version(ix), 2, "an answer older than what is held is ignored");
    await ix.applyAnswer(KEY, secret(3), 9);
    await ix.applyResource(KEY, secret(4), 12);
    t.is(
      await version(ix),
      4,
      "a later revision than the answer's write wins (history of one revision per key)",
    );
  });
});

test("read index: an answered deletion hides the resource from reads and lists until a later revision", async (t) => {
  await withIndex(async (ix) => {
    await ix.applyResource(KEY, secret(1), 3);
    t.is((await ix.listResources({ app_id: "ri", type: "Secret", limit: 10 })).items.length, 1);
    await ix.applyAnswer(KEY, null, 3);
    t.is(await ix.getResource(secret(1).id), undefined);
    t.is((await ix.listResources({ app_id: "ri", type: "Secret", limit: 10 })).items.length, 0);
    await ix.applyResource(KEY, secret(1), 3);
    t.is(await ix.getResource(secret(1).id), undefined, "the revision the deletion came after stays hidden");
    await ix.applyResource(KEY, secret(5), 8);
    t.is(await version(ix), 5);
    t.is((await ix.listResources({ app_id: "ri", type: "Secret", limit: 10 })).items.length, 1);
  });
});
