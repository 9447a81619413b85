import test from "ava";
import {
  checkInput,
  consumerVerdict,
  type ConsumerAnswer,
  inRepository,
  lastSucceeded,
  namesPin,
  outcome,
  parsePin,
  producerVerdict,
  readVersion,
  refusedAddress,
  releaseVerdict,
  repositoryOf,
  runsPin,
  versionUrl,
} from "../../actors/production/delivery.js";
import { REVISION_LABEL } from "../../effects/mod.js";
import { isPlatformError, type Resource } from "../../proto/mod.js";

/**
 * delivery-check's comparisons (actors/production/delivery.ts), without I/O:
 * paths, pins, repositories, releases, version routes, refused addresses and
 * the verdicts with their evidence. The whole chain runs in
 * test/e2e/delivery-check.test.ts.
 */

const C = "a".repeat(40);
const OLD = "b".repeat(40);
const D1 = `sha256:${"1".repeat(64)}`;
const D2 = `sha256:${"2".repeat(64)}`;
const ID = `sha256:${"9".repeat(64)}`;

test("delivery: a repo_root or source path that leaves its folder is 400 with one detail per field", (t) => {
  t.notThrows(() => checkInput({ checks: ["producer"], repo_root: "svc/api", source_paths: ["src", "./x"] }));
  const e = t.throws(() =>
    checkInput({
      checks: ["producer"],
      repo_root: "../other",
      source_paths: ["src", "/etc", "a/../../b", "-p"],
    }),
  );
  t.true(isPlatformError(e) && e.code === "invalid_input");
  t.deepEqual(
    (e as unknown as { details: { path: string }[] }).details.map((d) => d.path),
    ["/repo_root", "/source_paths/1", "/source_paths/2", "/source_paths/3"],
  );
  const c = t.throws(() => checkInput({ checks: ["consumer"] }));
  t.regex(c!.message, /consumers/);
});

test("delivery: repositories are compared without tag or digest, docker.io/library folded", (t) => {
  t.is(repositoryOf("registry:5000/shop-web:v1"), "registry:5000/shop-web");
  t.is(repositoryOf(`registry:5000/shop-web@${D1}`), "registry:5000/shop-web");
  t.is(repositoryOf("registry:5000/shop-web"), "registry:5000/shop-web");
  t.is(repositoryOf("docker.io/library/node:20"), "node");
  t.true(inRepository({ tags: ["registry:5000/shop-web:abc"], digests: [] }, "registry:5000/shop-web"));
  t.true(inRepository({ tags: [], digests: [`registry:5000/shop-web@${D1}`] }, "registry:5000/shop-web:v9"));
  t.false(inRepository({ tags: ["registry:5000/shop-api:abc"], digests: [] }, "registry:5000/shop-web"));
  t.false(inRepository({ tags: ["<none>:<none>"], digests: [] }, "<none>"));
});

test("delivery: a pin is a repo digest or an image id; a container runs it by digest or by id", (t) => {
  const pushed = parsePin(`registry:5000/shop-web@${D1}`)!;
  t.deepEqual(pushed, {
    kind: "digest",
    repository: "registry:5000/shop-web",
    digest: D1,
    ref: `registry:5000/shop-web@${D1}`,
  });
  t.deepEqual(parsePin(ID), { kind: "id", id: ID, ref: ID });
  t.is(parsePin("shop-web:latest"), undefined);
  t.true(runsPin(pushed, { id: ID, digests: [`registry:5000/shop-web@${D1}`] }));
  t.false(runsPin(pushed, { id: ID, digests: [`registry:5000/shop-web@${D2}`] }), "another digest");
  t.false(runsPin(pushed, { id: ID, digests: [`registry:5000/other@${D1}`] }), "another repository");
  t.true(runsPin(parsePin(ID)!, { id: ID, digests: [] }));
  t.false(runsPin(parsePin(ID)!, { id: D2, digests: [] }));
  t.true(namesPin(`registry:5000/shop-web:v1@${D1}`, pushed), "a tag beside the digest");
  t.false(namesPin(D1, pushed), "a bare digest is an image id, not the registry digest");
  t.true(namesPin(ID, parsePin(ID)!));
});

const rel = (
  id: string,
  status: Resource["status"],
  updated_at: string,
  extra: Record<string, unknown> = {},
): Resource => ({
  type: "Release",
  id,
  app_id: "shop",
  status,
  created_at: "2024-01-01T00:00:00.000Z",
  updated_at,
  ...extra,
});

test("delivery: the last release is the one that succeeded last; failed ones never count", (t) => {
  t.is(lastSucceeded([]), undefined);
  const last = lastSucceeded([
    rel("rel_1", "succeeded", "2024-01-02T00:00:00.000Z", { commit: OLD, image_ref: ID, service: "web" }),
    rel("rel_2", "failed", "2024-01-05T00:00:00.000Z", { commit: C, image_ref: D2 }),
    rel("rel_3", "succeeded", "2024-01-03T00:00:00.000Z", { commit: C, image_ref: D1 }),
  ]);
  t.deepEqual(last, {
    id: "rel_3",
    commit: C,
    image_ref: D1,
    service: null,
    updated_at: "2024-01-03T00:00:00.000Z",
  });
});

const base = { repo_root: ".", source_paths: ["src"], image_label: REVISION_LABEL, image: null };

test("delivery: producer passes with a tag and a labelled image, and says which is missing", (t) => {
  const image = { id: ID, tags: ["registry:5000/shop-web:x"], digests: [] };
  const ok = producerVerdict({ ...base, commit: C, tags: ["release-aaaaaaaaaaaa"], images: [image] });
  t.true(ok.ok);
  t.is(ok.reason, null);
  t.is(ok.evidence.commit, C);
  const none = producerVerdict({ ...base, commit: C, tags: [], images: [] });
  t.false(none.ok);
  t.regex(none.reason!, /no tag points at a{40}/);
  t.regex(none.reason!, /no image on the engine has org\.opencontainers\.image\.revision=a{40}/);
  const other = producerVerdict({
    ...base,
    image: "registry:5000/shop-api",
    commit: C,
    tags: ["v1"],
    images: [image],
  });
  t.false(other.ok, "only images of the named repository count");
  t.deepEqual(other.evidence.other_images, [ID]);
  const missing = producerVerdict({
    ...base,
    commit: null,
    missing: "not a repository",
    tags: [],
    images: [],
  });
  t.is(missing.reason, "not a repository");
});

test("delivery: release passes when a running container runs the pin and the release holds the latest commit", (t) => {
  const release = { id: "rel_1", commit: C, image_ref: ID, service: "web", updated_at: "x" };
  const running = { id: "c1", name: "shop-web-1", service: "web", image_id: ID, digests: [] };
  const ok = releaseVerdict({ app: "shop", release, containers: [running], latest: C, contains: true });
  t.true(ok.ok, ok.reason ?? "");
  t.true((ok.evidence.containers as { runs_pin: boolean }[])[0]!.runs_pin);
  const stale = releaseVerdict({
    app: "shop",
    release: { ...release, commit: OLD },
    containers: [running],
    latest: C,
    contains: false,
  });
  t.false(stale.ok);
  t.regex(stale.reason!, /commit a{40} is not released: release rel_1 shipped b{40}/);
  t.is(stale.evidence.released_latest, false);
  const other = releaseVerdict({
    app: "shop",
    release,
    containers: [{ ...running, image_id: D2 }],
    latest: C,
    contains: true,
  });
  t.false(other.ok);
  t.regex(other.reason!, /no running container of shop runs/);
  const none = releaseVerdict({
    app: "shop",
    release: undefined,
    containers: [],
    latest: C,
    contains: undefined,
  });
  t.is(none.reason, "shop has no succeeded release");
  t.is(none.evidence.release_id, null);
});

const answer = (over: Partial<ConsumerAnswer>): ConsumerAnswer => ({
  url: "http://127.0.0.1:1",
  version_url: "http://127.0.0.1:1/version",
  via: "127.0.0.1:1",
  status: 200,
  commit: null,
  image: null,
  error: null,
  ms: 1,
  ...over,
});

test("delivery: a consumer passes when it reports the commit or the pinned image, and each failure is named", (t) => {
  const expected = { commit: C, commit_from: "producer" as const, pin: ID };
  t.true(consumerVerdict([answer({ commit: C }), answer({ image: ID })], expected).ok);
  const stale = consumerVerdict([answer({ commit: OLD, image: D2 }), answer({ error: "refused" })], expected);
  t.false(stale.ok);
  t.regex(stale.reason!, /reports commit b{40} and image sha256:2{64}, not a{40} or sha256:9{64}/);
  t.regex(stale.reason!, /refused/);
  const nothing = consumerVerdict([answer({ commit: C })], { commit: null, commit_from: null, pin: null });
  t.false(nothing.ok);
  t.regex(nothing.reason!, /nothing to compare/);
});

test("delivery: the outcome passes only when every check asked passes", (t) => {
  const pass = { check: "producer" as const, ok: true, evidence: {}, reason: null };
  const fail = { check: "release" as const, ok: false, evidence: {}, reason: "x" };
  t.deepEqual(outcome([pass]), { ok: true, summary: "producer passed" });
  t.deepEqual(outcome([pass, fail]), { ok: false, summary: "release failed" });
});

test("delivery: a consumer's version route is /version unless its URL names a path", (t) => {
  t.is(versionUrl("http://shop.example.com").href, "http://shop.example.com/version");
  t.is(versionUrl("http://shop.example.com/").href, "http://shop.example.com/version");
  t.is(versionUrl("http://shop.example.com/api/v?x=1").href, "http://shop.example.com/api/v?x=1");
});

test("delivery: loopback and private addresses may be called; unspecified, link-local and multicast may not", (t) => {
  for (const ok of ["127.0.0.1", "::1", "10.1.2.3", "192.168.1.1", "203.0.113.9", "2001:db8::1"])
    t.is(refusedAddress(ok), undefined, ok);
  for (const no of [
    "0.0.0.0",
    "169.254.169.254",
    "::ffff:169.254.169.254",
    "224.0.0.1",
    "::",
    "fe80::1",
    "ff02::1",
  ])
    t.truthy(refusedAddress(no), no);
});

test("delivery: a version body is a JSON object whose commit and image are read", (t) => {
  t.deepEqual(readVersion(JSON.stringify({ name: "shop", commit: C, image: ID })), { commit: C, image: ID });
  t.deepEqual(readVersion("{}"), { commit: null, image: null });
  t.deepEqual(readVersion("nope"), { error: "the version route did not answer JSON" });
  t.deepEqual(readVersion("[1]"), { error: "the version route did not answer a JSON object" });
});
