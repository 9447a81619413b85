import test from "ava";
import {
  engineSince,
  LineIds,
  LOOK_BACK_MS,
  lineId,
  noticeId,
  resumeOf,
  storedResume,
} from "../../actors/container-logs.js";
import { splitTimestamp } from "../../effects/docker/logs.js";
import { appendLog } from "../../store/logs.js";
import { startTestNats } from "../helpers/infra.js";

// Where a follower that takes a dev container's log over resumes (docs/architecture.md, gap 6).

const CID = "0123456789abcdef0123456789abcdef";

test("the engine's stamp is split off a line, with nine digits of fraction", (t) => {
  t.deepEqual(splitTimestamp("2026-11-27T10:00:01.5Z hello world"), {
    time: "2026-11-27T10:00:01.500000000Z",
    line: "hello world",
  });
  t.deepEqual(splitTimestamp("2026-11-27T10:00:01.123456789Z "), {
    time: "2026-11-27T10:00:01.123456789Z",
    line: "",
  });
  t.deepEqual(splitTimestamp("no stamp here"), { line: "no stamp here" });
});

test("a line's and a notice's message ids say where collection stands; other ids say nothing", (t) => {
  const at = { time: "2026-11-27T10:00:01.123456789Z", rank: 2 };
  t.deepEqual(resumeOf(lineId("r1", CID, at), "r1", CID), { after: at });
  t.deepEqual(resumeOf(noticeId("r1", CID, { after: at }), "r1", CID), { after: at });
  t.deepEqual(resumeOf(noticeId("r1", CID, { since: 1700000000 }), "r1", CID), { since: 1700000000 });
  t.deepEqual(resumeOf(noticeId("r1", CID, { start: true }), "r1", CID), { start: true });
  t.is(resumeOf(lineId("r1", "fedcba9876543210", at), "r1", CID), undefined, "another container");
  t.is(resumeOf("cmd-1/log/0", "r1", CID), undefined);
  t.is(resumeOf(`r1/container/${CID.slice(0, 12)}/1700000000000/4`, "r1", CID), undefined, "older ids");
  t.is(engineSince({ after: at }), "1795773601.123456789");
  t.is(engineSince({ since: 17 }), 17);
  t.is(engineSince({ start: true }), undefined);
});

test("a resumed follower skips the lines stored up to its place, ranks among lines of one stamp included", (t) => {
  const s = "2026-11-27T10:00:01.000000001Z";
  const ids = new LineIds("r1", CID, { after: { time: s, rank: 1 } });
  t.true(ids.next("2026-11-27T10:00:00.999999999Z").skip);
  t.true(ids.next(s).skip);
  t.true(ids.next(s).skip);
  const third = ids.next(s);
  t.false(third.skip);
  t.is(third.id, lineId("r1", CID, { time: s, rank: 2 }));
  const cut = ids.next(undefined);
  t.is(cut.time, s, "a line without a stamp takes the previous one");
  t.false(cut.skip);
  t.false(ids.next("2026-11-27T10:00:02.000000000Z").skip);
});

test("the stored log says where a follower resumes: its last line, the container's last line before the platform's, or a minute before", async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("test-admin");
  try {
    t.deepEqual(await storedResume(bus, "dev_empty", CID), { start: true }, "an empty log: from the start");

    const line = (ts: string) => ({ ts, stream: "stdout", line: "x" });
    const a = { time: "2026-11-27T10:00:01.000000000Z", rank: 0 };
    const b = { time: "2026-11-27T10:00:01.200000000Z", rank: 0 };
    await appendLog(bus, "dev_1", line(a.time), lineId("dev_1", CID, a));
    await appendLog(bus, "dev_1", line(b.time), lineId("dev_1", CID, b));
    t.deepEqual(await storedResume(bus, "dev_1", CID), { after: b });
    // the platform's lines after it: the container's last line is found before them
    await appendLog(bus, "dev_1", { ts: new Date().toISOString(), stream: "platform", line: "ready" });
    await appendLog(
      bus,
      "dev_1",
      { ts: new Date().toISOString(), stream: "platform", line: "more" },
      "c/log/1",
    );
    t.deepEqual(await storedResume(bus, "dev_1", CID), { after: b });
    // a resumed follower's notice is a place too
    await appendLog(bus, "dev_1", line(""), noticeId("dev_1", CID, { after: a }));
    t.deepEqual(await storedResume(bus, "dev_1", CID), { after: a });

    // nothing of the container in the minute before the last line: from that minute's start
    const t0 = Date.now();
    await appendLog(bus, "dev_2", { ts: new Date().toISOString(), stream: "platform", line: "starting" });
    const r = await storedResume(bus, "dev_2", CID);
    t.true("since" in r);
    const since = "since" in r ? r.since * 1000 : 0;
    t.true(Math.abs(since - (t0 - LOOK_BACK_MS)) < 5000, `${since} vs ${t0 - LOOK_BACK_MS}`);
  } finally {
    await bus.close();
    await nats.stop();
  }
});
