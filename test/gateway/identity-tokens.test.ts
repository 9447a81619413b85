import { randomBytes, scryptSync } from "node:crypto";
import test from "ava";
import { checkPassword, hashPassword, signAccessToken, verifyAccessToken } from "../../gateway/identity.js";
import { hashPasswordScrypt } from "../../gateway/identity-tokens.js";

/** The gateway's side of identity without a bus (docs/identity.md): password hashes and access tokens. */

test("a password hash is argon2id with its parameters (m=19 MiB, t=2, p=1) and checks only the right password", async (t) => {
  const h = await hashPassword("correct horse battery");
  t.regex(h, /^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/);
  t.false(h.includes("correct horse"));
  t.true(await checkPassword("correct horse battery", h));
  t.false(await checkPassword("correct horse batterY", h));
  t.not(await hashPassword("correct horse battery"), h, "a new salt each time");
  t.false(await checkPassword("x", "not-a-hash"));
  t.false(await checkPassword("x", "$argon2id$v=19$m=19456,t=2,p=1$broken"));
});

test("a scrypt hash of before argon2id still checks (N=2^15, r=8, p=1)", async (t) => {
  const h = await hashPasswordScrypt("correct horse battery");
  const [kind, n, r, p, salt, hash] = h.split("$");
  t.deepEqual([kind, n, r, p], ["scrypt", "32768", "8", "1"]);
  t.is(Buffer.from(salt!, "base64url").length, 16);
  t.is(Buffer.from(hash!, "base64url").length, 32);
  t.true(await checkPassword("correct horse battery", h));
  t.false(await checkPassword("correct horse batterY", h));
});

test("a hash made with other parameters is checked with its own", async (t) => {
  const salt = randomBytes(16);
  const k = scryptSync("pw-old-params", salt, 32, { N: 2 ** 14, r: 8, p: 1 });
  const stored = `scrypt$16384$8$1$${salt.toString("base64url")}$${k.toString("base64url")}`;
  t.true(await checkPassword("pw-old-params", stored));
  t.false(await checkPassword("pw-other", stored));
});

test("an access token checks without a lookup: its app, its key, its signature, its expiry", (t) => {
  const key = randomBytes(32);
  const now = Math.floor(Date.now() / 1000);
  const claims = { app: "shop", sub: "usr_1", sid: "ses_1", iat: now, exp: now + 900, jti: "j" };
  const tok = signAccessToken(claims, key);
  t.deepEqual(verifyAccessToken(tok, key, "shop", now), claims);
  t.is(verifyAccessToken(tok, key, "other", now), undefined);
  t.is(verifyAccessToken(tok, randomBytes(32), "shop", now), undefined);
  t.is(verifyAccessToken(tok, key, "shop", now + 900), undefined, "expired");
  const [v, body, sig] = tok.split(".");
  const forged = Buffer.from(JSON.stringify({ ...claims, sub: "usr_2" })).toString("base64url");
  t.is(verifyAccessToken(`${v}.${forged}.${sig}`, key, "shop", now), undefined);
  t.is(verifyAccessToken(`${v}.${body}`, key, "shop", now), undefined);
  t.is(verifyAccessToken("garbage", key, "shop", now), undefined);
});

test("an access token is accepted only with a user's subject (usr_…): `operator` or any other name is refused", (t) => {
  const key = randomBytes(32);
  const now = Math.floor(Date.now() / 1000);
  const claims = (sub: string) => ({ app: "shop", sub, sid: "ses_1", iat: now, exp: now + 900, jti: "j" });
  t.truthy(
    verifyAccessToken(signAccessToken(claims("usr_I23X9tjMWZ-BNJYLbVr_fbtDGO"), key), key, "shop", now),
  );
  for (const sub of ["operator", "_app", "app", "", "usr_", "usr_a.b", "USR_abc", `usr_${"a".repeat(81)}`])
    t.is(verifyAccessToken(signAccessToken(claims(sub), key), key, "shop", now), undefined, sub);
});
