import { createHmac } from "node:crypto";
import test from "ava";
import {
  newServiceKey,
  SERVICE_TOKEN_TTL_SECONDS,
  signServiceToken,
  verifyServiceToken,
} from "../../proto/service-token.js";

const NOW = Date.parse("2030-01-02T03:04:05.678Z");
const claims = { app: "shop", job: "cleanup", tick: "2030-01-02T03:04:00.000Z" };

function b64json(v: unknown): string {
  return Buffer.from(JSON.stringify(v)).toString("base64url");
}

test("service token: a new key is 32 random bytes in base64url", (t) => {
  const a = newServiceKey();
  const b = newServiceKey();
  t.regex(a, /^[A-Za-z0-9_-]{43}$/);
  t.is(Buffer.from(a, "base64url").length, 32);
  t.not(a, b);
});

test("service token: a signed token verifies and carries app, job, tick and exp = issue + 60 s", (t) => {
  const key = newServiceKey();
  const token = signServiceToken(key, claims, NOW);
  t.regex(token, /^v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
  const r = verifyServiceToken(token, key, { now: NOW, app: "shop" });
  t.deepEqual(r, {
    ok: true,
    claims: { ...claims, exp: Math.floor(NOW / 1000) + SERVICE_TOKEN_TTL_SECONDS },
  });
  // The claims part is plain base64url JSON in the documented order.
  const part = token.split(".")[1]!;
  t.deepEqual(Object.keys(JSON.parse(Buffer.from(part, "base64url").toString())), [
    "app",
    "job",
    "tick",
    "exp",
  ]);
});

test("service token: without opts.app any app's token verifies, and Date.now() is the default clock", (t) => {
  const key = newServiceKey();
  const r = verifyServiceToken(signServiceToken(key, claims), key);
  t.true(r.ok);
});

test("service token: a tampered payload is a bad signature", (t) => {
  const key = newServiceKey();
  const [v, , sig] = signServiceToken(key, claims, NOW).split(".");
  const forged = `${v}.${b64json({ ...claims, job: "drop-tables", exp: Math.floor(NOW / 1000) + 60 })}.${sig}`;
  t.deepEqual(verifyServiceToken(forged, key, { now: NOW, app: "shop" }), {
    ok: false,
    reason: "bad_signature",
  });
});

test("service token: a flipped signature bit or another key is a bad signature", (t) => {
  const key = newServiceKey();
  const token = signServiceToken(key, claims, NOW);
  const [v, part, sig] = token.split(".") as [string, string, string];
  const bytes = Buffer.from(sig, "base64url");
  bytes[0] = bytes[0]! ^ 1;
  const flipped = `${v}.${part}.${bytes.toString("base64url")}`;
  t.deepEqual(verifyServiceToken(flipped, key, { now: NOW }), { ok: false, reason: "bad_signature" });
  t.deepEqual(verifyServiceToken(token, newServiceKey(), { now: NOW }), {
    ok: false,
    reason: "bad_signature",
  });
  t.deepEqual(verifyServiceToken(token, "not a key", { now: NOW }), { ok: false, reason: "bad_signature" });
});

test("service token: a token is valid until its exp and expired from then on", (t) => {
  const key = newServiceKey();
  const token = signServiceToken(key, claims, NOW);
  const exp = Math.floor(NOW / 1000) + 60;
  t.true(verifyServiceToken(token, key, { now: exp * 1000 - 1 }).ok);
  t.deepEqual(verifyServiceToken(token, key, { now: exp * 1000 }), { ok: false, reason: "expired" });
  t.deepEqual(verifyServiceToken(token, key, { now: NOW + 3_600_000 }), { ok: false, reason: "expired" });
  const short = signServiceToken(key, claims, NOW, 5);
  t.deepEqual(verifyServiceToken(short, key, { now: NOW + 6000 }), { ok: false, reason: "expired" });
});

test("service token: a valid token for another app is refused as wrong_app", (t) => {
  const key = newServiceKey();
  const token = signServiceToken(key, { ...claims, app: "blog" }, NOW);
  t.deepEqual(verifyServiceToken(token, key, { now: NOW, app: "shop" }), { ok: false, reason: "wrong_app" });
});

test("service token: garbage is malformed and never throws", (t) => {
  const key = newServiceKey();
  const good = signServiceToken(key, claims, NOW);
  const [, part, sig] = good.split(".") as [string, string, string];
  const garbage: unknown[] = [
    "",
    "v1",
    "v1.",
    "v1..",
    "..",
    "v1.abc",
    "v1.abc.def",
    "v2." + part + "." + sig,
    "V1." + part + "." + sig,
    good + ".extra",
    "v1." + part + "." + sig + "=",
    "v1." + part + "!." + sig,
    "v1." + part + "." + sig.slice(0, 42),
    "v1.\u0000.\u0000",
    "v1.💥.💥",
    "x".repeat(10_000),
    `v1.${"A".repeat(5000)}.${sig}`,
    null,
    undefined,
    42,
    {},
    ["v1", part, sig],
  ];
  for (const g of garbage) {
    t.notThrows(() => verifyServiceToken(g as string, key, { now: NOW, app: "shop" }));
    t.deepEqual(
      verifyServiceToken(g as string, key, { now: NOW }),
      { ok: false, reason: "malformed" },
      String(g),
    );
  }
});

test("service token: correctly signed claims of the wrong shape are malformed", (t) => {
  const key = newServiceKey();
  const sign = (part: string) =>
    `v1.${part}.${createHmac("sha256", Buffer.from(key, "base64url")).update(`v1.${part}`).digest("base64url")}`;
  const exp = Math.floor(NOW / 1000) + 60;
  const shapes: unknown[] = [
    null,
    [],
    "shop",
    { app: "shop", job: "cleanup", tick: claims.tick },
    { app: "shop", job: "cleanup", tick: claims.tick, exp: String(exp) },
    { app: "", job: "cleanup", tick: claims.tick, exp },
    { app: "shop", job: 1, tick: claims.tick, exp },
    { app: "shop", job: "cleanup", tick: claims.tick, exp: exp + 0.5 },
  ];
  for (const s of shapes) {
    t.deepEqual(verifyServiceToken(sign(b64json(s)), key, { now: NOW }), { ok: false, reason: "malformed" });
  }
  t.deepEqual(verifyServiceToken(sign(Buffer.from("{not json").toString("base64url")), key, { now: NOW }), {
    ok: false,
    reason: "malformed",
  });
});

test("service token: signing refuses a key that is not 32 base64url bytes and empty claims", (t) => {
  t.throws(() => signServiceToken("short", claims), { instanceOf: TypeError });
  t.throws(() => signServiceToken(Buffer.alloc(16).toString("base64url"), claims), { instanceOf: TypeError });
  t.throws(() => signServiceToken(newServiceKey(), { ...claims, app: "" }), { instanceOf: TypeError });
  t.throws(() => signServiceToken(newServiceKey(), claims, NOW, 0), { instanceOf: TypeError });
});
