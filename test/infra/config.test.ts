import test from "ava";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  INFRA_SCHEMA_PATH,
  type InfraProblem,
  infraJsonSchema,
  infraJsonSchemaText,
  lintInfraText,
} from "../../infra/mod.js";
import { runCli } from "../../cli/mod.js";
import { collectingIo } from "../cli/fake-platform.js";
import { repoPath } from "../helpers/repo.js";
import { ALL_ROLES, IMAGE, clusterYaml, hostYaml, infraYaml, writeInfra } from "./fixtures.js";

function problems(text: string): InfraProblem[] {
  const r = lintInfraText(text);
  return r.ok ? [] : r.problems;
}

async function cli(argv: string[], env: Record<string, string | undefined> = {}) {
  const c = collectingIo(env);
  const code = await runCli(argv, c.io);
  return { code, stdout: c.stdout(), stderr: c.stderr() };
}

test("docs/infra.schema.json is generated from the TypeBox schema and current", (t) => {
  const published = readFileSync(repoPath(INFRA_SCHEMA_PATH), "utf8");
  t.is(
    published,
    infraJsonSchemaText(),
    "docs/infra.schema.json is stale: npx tsc -p . && node scripts/infra-schema.mjs",
  );
  const schema = infraJsonSchema() as { properties: Record<string, unknown>; required: string[] };
  t.deepEqual([...schema.required].sort(), ["environment", "hosts", "image", "replicas"]);
  t.false(published.includes("~kind"), "no TypeBox markers in the published schema");
});

test("lint: a valid cluster file has no problems", (t) => {
  const r = lintInfraText(clusterYaml());
  t.true(r.ok);
  if (r.ok) {
    t.is(r.file.environment.name, "staging");
    t.is(r.file.hosts.length, 3);
  }
  // one host with every role, replicas 1, a registry image pinned by digest
  const single = infraYaml({
    image: `registry.example.com:5000/slipway/platform@sha256:${"0".repeat(64)}`,
    hosts: [
      hostYaml({ name: "solo", address: "203.0.113.7", roles: ALL_ROLES, keyFile: "~/.ssh/id_ed25519" }),
    ],
  });
  t.deepEqual(problems(single), []);
});

test("lint: the schema's problems name the field as a JSON pointer and the host", (t) => {
  const text = infraYaml({
    hosts: [
      hostYaml({ name: "a", address: "10.0.0.1", roles: ALL_ROLES }),
      hostYaml({ name: "b", address: "10.0.0.2", roles: ["nats", "dns"] }),
    ],
  });
  const p = problems(text);
  t.true(p.length > 0);
  const roles = p.find((x) => x.path.startsWith("/hosts/1/roles"));
  t.truthy(roles, JSON.stringify(p));
  t.is(roles?.host, "b");
  t.regex(roles?.message ?? "", /^host 'b': /);
  const port = problems(text.replace("port: 22", "port: 70000"));
  t.truthy(
    port.find((x) => x.path === "/hosts/0/ssh/port" && x.host === "a"),
    JSON.stringify(port),
  );
  const extra = problems(`${clusterYaml()}surprise: 1\n`);
  t.deepEqual(
    extra.map((x) => x.path),
    ["/surprise"],
  );
  const missing = problems("environment: {name: x, production: false}\nreplicas: 1\nhosts: []\n");
  t.truthy(missing.find((x) => x.path === "/image"));
});

test("lint: the image must be pinned by digest", (t) => {
  for (const image of [
    "slipway/platform:latest",
    "slipway/platform",
    `sha256:${"a".repeat(63)}`,
    `platform@sha256:${"A".repeat(64)}`,
  ]) {
    const p = problems(
      infraYaml({ image, hosts: [hostYaml({ name: "a", address: "10.0.0.1", roles: ALL_ROLES })] }),
    );
    t.is(p.length, 1, image);
    t.is(p[0]?.path, "/image", image);
    t.regex(p[0]?.message ?? "", /must be pinned by digest/, image);
  }
});

test("lint: unique names and addresses, every role, an odd number >= 3 of nats hosts for replicas 3", (t) => {
  const dup = problems(
    infraYaml({
      hosts: [
        hostYaml({ name: "a", address: "10.0.0.1", roles: ALL_ROLES }),
        hostYaml({ name: "a", address: "10.0.0.1", roles: ["node"] }),
      ],
    }),
  );
  t.deepEqual(
    dup.map((x) => [x.path, x.host]),
    [
      ["/hosts/1/name", "a"],
      ["/hosts/1/address", "a"],
    ],
  );
  t.regex(dup[0]?.message ?? "", /already used by hosts\/0/);

  const noProxy = problems(
    infraYaml({
      hosts: [hostYaml({ name: "a", address: "10.0.0.1", roles: ALL_ROLES.filter((r) => r !== "proxy") })],
    }),
  );
  t.deepEqual(
    noProxy.map((x) => x.path),
    ["/hosts"],
  );
  t.regex(noProxy[0]?.message ?? "", /no host has the role 'proxy'/);

  const hosts = (natsCount: number) =>
    ["a", "b", "c", "d"].map((n, i) =>
      hostYaml({ name: n, address: `10.0.0.${i + 1}`, roles: i < natsCount ? ALL_ROLES : ["node", "apps"] }),
    );
  const two = problems(infraYaml({ replicas: 3, hosts: hosts(2) }));
  t.deepEqual(two.map((x) => x.path).sort(), ["/hosts", "/replicas"]);
  t.truthy(
    two.find((x) =>
      /odd number of at least 3 hosts with the role 'nats'.*2 have it \(a, b\)/.test(x.message),
    ),
  );
  const four = problems(infraYaml({ replicas: 3, hosts: hosts(4) }));
  t.deepEqual(
    four.map((x) => x.path),
    ["/hosts"],
  );
  t.deepEqual(problems(infraYaml({ replicas: 3, hosts: hosts(3) })), []);
  const r5 = problems(infraYaml({ replicas: 5, hosts: hosts(3) }));
  t.deepEqual(
    r5.map((x) => x.path),
    ["/replicas"],
  );
});

test("lint: YAML syntax errors and duplicate keys are problems with a line", (t) => {
  const p = problems("environment: [\n");
  t.is(p.length > 0, true);
  t.regex(p[0]?.message ?? "", /^not valid YAML: .*line \d+, column \d+$/);
  const dupKey = problems(`${clusterYaml()}replicas: 1\n`);
  t.regex(dupKey[0]?.message ?? "", /not valid YAML/);
});

test("cli: infra lint prints the problems in the CLI's error shape (exit 1), a valid file exits 0", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "slipway-infra-lint-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const bad = writeInfra(
    dir,
    infraYaml({
      image: "slipway:latest",
      hosts: [hostYaml({ name: "web-1", address: "10.0.0.1", roles: ["nats", "bogus"] })],
    }),
    "bad.yaml",
  );
  const r = await cli(["infra", "lint", "--file", bad, "--json"]);
  t.is(r.code, 1, r.stderr);
  const body = JSON.parse(r.stdout) as {
    status: string;
    error: { code: string; message: string; details: { path: string; message: string; host?: string }[] };
  };
  t.is(body.status, "error");
  t.is(body.error.code, "invalid_infra_file");
  t.truthy(body.error.details.find((d) => d.path === "/image" && /pinned by digest/.test(d.message)));
  t.truthy(body.error.details.find((d) => d.path.startsWith("/hosts/0/roles") && d.host === "web-1"));
  t.regex(r.stderr, /^slipway: invalid_infra_file: /m);
  t.regex(r.stderr, /^ {2}\/image: the platform image must be pinned by digest/m);

  const good = writeInfra(dir, clusterYaml());
  const ok = await cli(["infra", "lint", "--file", good, "--json"]);
  t.is(ok.code, 0, ok.stderr);
  const doc = JSON.parse(ok.stdout) as { status: string; verb: string; result: Record<string, unknown> };
  t.is(doc.status, "succeeded");
  t.is(doc.verb, "infra lint");
  t.is(doc.result.environment, "staging");
  t.is(doc.result.image, IMAGE);
  t.deepEqual((doc.result.roles as Record<string, string[]>).nats, ["a", "b", "c"]);
  const human = await cli(["infra", "lint", "--file", good]);
  t.is(human.code, 0);
  t.regex(human.stdout, /no problems/);

  const wrongEnv = await cli(["infra", "lint", "--file", good, "--env", "production"]);
  t.is(wrongEnv.code, 2);
  t.regex(wrongEnv.stderr, /--env production does not match the environment of .* \('staging'\)/);
  const missing = await cli(["infra", "lint", "--file", join(dir, "nope.yaml"), "--json"]);
  t.is(missing.code, 1);
  t.is((JSON.parse(missing.stdout) as { error: { code: string } }).error.code, "infra_file_missing");
});
