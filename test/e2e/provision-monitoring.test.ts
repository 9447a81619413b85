import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import anyTest, { type TestFn } from "ava";
import {
  call,
  eventually,
  get,
  startWorkspacePlatform,
  stopWorkspacePlatform,
  tempDir,
  type WorkspacePlatform,
} from "../helpers/infra.js";

/**
 * provision-monitoring through the control plane (docs/monitoring.md): bad input is 400 naming
 * the field; without skip_deploy and without an engine 503; with skip_deploy the stack's files
 * are written under the platform's folder (promtool and amtool take them), the MonitoringStack
 * ends succeeded with MonitoringConfigured; a second call with the same input changes nothing;
 * secrets are in files of mode 0600 and in no answer, resource, event or log; a folder that is a
 * symbolic link is refused.
 */

const test = anyTest as TestFn<WorkspacePlatform>;

const SMTP_PASSWORD = `smtp-${randomUUID()}`;
const DB_PASSWORD = `db-${randomUUID()}`;
const TRACING = Buffer.from(`pk:${randomUUID()}`).toString("base64");

const FULL = {
  project_name: "mon-e2e",
  public_host: "status.example.com",
  ui_port: 19090,
  network: "mon-e2e-net",
  proxy_network: "slipway-proxy",
  alert_email: "ops@example.com",
  log_scope_regex: "error|fatal",
  tracing_otlp_b64: TRACING,
  smtp_host: "smtp.example.com",
  smtp_user: "alerts",
  smtp_password: SMTP_PASSWORD,
  smtp_from: "alerts@example.com",
  tracing_public_url: "https://traces.example.com/",
  tracing_project_id: "proj-1",
  app_db_network: "shop-db",
  app_db_host: "db.internal",
  app_db_port: 5433,
  app_db_database: "shop",
  app_db_user: "shop",
  app_db_app_id: "shop",
  app_db_password: DB_PASSWORD,
  health_url: "http://127.0.0.1:8080/health",
  env_file: "mon.env",
  context: "monitoring-context",
  regenerate_secrets: true,
  health_timeout_ms: 5_000,
  skip_deploy: true,
};

const saved = { DOCKER_HOST: process.env.DOCKER_HOST };

test.before(async (t) => {
  // an engine that is not there
  process.env.DOCKER_HOST = `unix://${join(tempDir(), "no-docker.sock")}`;
  t.context = await startWorkspacePlatform();
});

test.after.always(async (t) => {
  await stopWorkspacePlatform(t.context);
  for (const [k, v] of Object.entries(saved)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

async function provision(t: { context: WorkspacePlatform }, body: Record<string, unknown>) {
  const r = await call(t.context.p.controlUrl, "provision-monitoring", body);
  if (r.status !== 202) throw new Error(`${r.status}: ${r.text}`);
  const id = r.body.resource.id as string;
  const doc = await eventually(
    async () => {
      const d = await get(t.context.p.controlUrl, `/resources/MonitoringStack/${id}`);
      return ["succeeded", "failed"].includes(d.body?.status) ? d.body : undefined;
    },
    30_000,
    100,
  );
  return { answer: r, doc: doc as Record<string, any> };
}

test.serial("provision-monitoring: bad input is 400 naming the field", async (t) => {
  const { p } = t.context;
  const base = { dir: "monitoring", public_host: "status.example.com", skip_deploy: true };
  const cases: [Record<string, unknown>, string][] = [
    [{ public_host: "status.example.com" }, "/dir"],
    [{ dir: "monitoring" }, "/public_host"],
    [{ ...base, dir: "../outside" }, "/dir"],
    [{ ...base, dir: "/etc/monitoring" }, "/dir"],
    [{ ...base, dir: "." }, "/dir"],
    [{ ...base, env_file: "../.env" }, "/env_file"],
    [{ ...base, public_host: "not a host" }, "/public_host"],
    [{ ...base, project_name: "Bad Name" }, "/project_name"],
    [{ ...base, network: "-net" }, "/network"],
    [{ ...base, ui_port: 70000 }, "/ui_port"],
    [{ ...base, alert_email: "nobody" }, "/alert_email"],
    [{ ...base, log_scope_regex: "(unclosed" }, "/log_scope_regex"],
    [{ ...base, log_scope_regex: "(a)\\1" }, "/log_scope_regex"],
    // the shipper runs it on the node: a backtracking without bound, or one too short to be of use
    [{ ...base, log_scope_regex: "^(a+)+$" }, "/log_scope_regex"],
    [{ ...base, log_scope_regex: "^.*a.*b.*c.*$" }, "/log_scope_regex"],
    [{ ...base, smtp_user: "u" }, "/smtp_host"],
    [{ ...base, smtp_host: "smtp.example.com", smtp_password: "pw" }, "/smtp_user"],
    [{ ...base, app_db_user: "u" }, "/app_db_host"],
    [{ ...base, app_db_host: "db", app_db_user: "u" }, "/app_db_database"],
    [{ ...base, health_url: "ftp://x" }, "/health_url"],
    [{ ...base, health_timeout_ms: -1 }, "/health_timeout_ms"],
    [{ ...base, app: "shop" }, "/app"],
  ];
  for (const [body, path] of cases) {
    const r = await call(p.controlUrl, "provision-monitoring", body);
    t.is(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    t.is(r.body.error.code, "invalid_input");
    t.true(
      (r.body.error.details ?? []).some((d: { path: string }) => d.path === path),
      `${JSON.stringify(body)}: ${r.text}`,
    );
  }
  const listed = await get(p.controlUrl, "/resources?type=MonitoringStack");
  t.is(listed.body.items.length, 0, "bad input saves nothing");
});

test.serial("provision-monitoring: without skip_deploy and without an engine, 503", async (t) => {
  const r = await call(t.context.p.controlUrl, "provision-monitoring", {
    dir: "monitoring",
    public_host: "status.example.com",
  });
  t.is(r.status, 503, r.text);
  t.is(r.body.error.code, "container_runtime_unavailable");
});

test.serial(
  "provision-monitoring: skip_deploy writes the stack only, MonitoringConfigured; a second call changes nothing",
  async (t) => {
    const { p, workspaces } = t.context;
    const dir = "stacks/mon";
    // env_file: a file of the platform's folder, which every service reads
    mkdirSync(join(workspaces, "_platform"), { recursive: true });
    writeFileSync(join(workspaces, "_platform", "mon.env"), "TZ=UTC\n");
    const { answer, doc } = await provision(t, { dir, ...FULL });
    t.is(doc.status, "succeeded", JSON.stringify(doc));
    t.is(doc.id.slice(0, 4), "mon_");
    t.is(doc.app_id, "_platform");
    t.false(doc.deployed);
    t.false(doc.unchanged);
    t.true(doc.alerts_mailed);
    t.regex(doc.loki, /not started/);
    // what cannot take effect here is said, field by field
    t.deepEqual(Object.keys(doc.not_applied).sort(), [
      "context",
      "health_timeout_ms",
      "regenerate_secrets",
      "tracing_otlp_b64",
      "ui_port",
    ]);
    t.deepEqual(doc.components, ["prometheus", "alertmanager", "blackbox", "postgres-exporter"]);
    const folder = join(workspaces, "_platform", dir);
    for (const f of doc.files as string[]) t.true(existsSync(join(folder, f)), f);
    t.deepEqual([...doc.secret_files].sort(), ["secrets/app_db_password", "secrets/smtp_password"]);
    // the control plane on loopback is out of the containers' reach: said, not scraped
    t.regex(doc.control_scrape, /loopback/);
    for (const s of doc.secret_files as string[]) t.is(statSync(join(folder, s)).mode & 0o777, 0o600, s);
    t.is(readFileSync(join(folder, "secrets/smtp_password"), "utf8"), SMTP_PASSWORD);
    t.is(readFileSync(join(folder, "secrets/app_db_password"), "utf8"), DB_PASSWORD);
    // the real tools take what was written
    execFileSync("promtool", ["check", "config", join(folder, "prometheus/prometheus.yml")], {
      stdio: "pipe",
    });
    execFileSync("amtool", ["check-config", join(folder, "alertmanager/alertmanager.yml")], {
      stdio: "pipe",
    });
    t.regex(readFileSync(join(folder, "compose.yaml"), "utf8"), /env_file:\n\s+- \.\.\/\.\.\/mon\.env/);
    const prom = readFileSync(join(folder, "prometheus/prometheus.yml"), "utf8");
    t.false(prom.includes(new URL(p.controlUrl).host), "loopback is not scraped from a container");
    // the event
    const event = await eventually(async () => {
      const e = await get(p.controlUrl, `/events?resource_id=${doc.id}`);
      return (e.body.items as { type: string; data: Record<string, any> }[]).find(
        (x) => x.type === "MonitoringConfigured",
      );
    });
    t.is(event.data.dir, dir);
    t.false(event.data.unchanged);
    // secrets: in no answer, resource, event or log
    const log = await get(p.controlUrl, `/logs/${doc.id}`);
    const events = await get(p.controlUrl, `/events?resource_id=${doc.id}`);
    for (const text of [answer.text, JSON.stringify(doc), events.text, log.text])
      for (const secret of [SMTP_PASSWORD, DB_PASSWORD, TRACING])
        t.false(text.includes(secret), "a secret leaked");
    // a second call with the same input changes nothing
    const mtimes = (doc.files as string[]).map((f) => statSync(join(folder, f)).mtimeMs);
    const again = await provision(t, { dir, ...FULL });
    t.is(again.doc.previous, doc.id, "the last stack of the folder is named");
    t.is(again.doc.status, "succeeded");
    t.true(again.doc.unchanged);
    t.deepEqual(again.doc.changed, []);
    t.is(again.doc.config_hash, doc.config_hash);
    t.deepEqual(
      (doc.files as string[]).map((f) => statSync(join(folder, f)).mtimeMs),
      mtimes,
      "no file rewritten",
    );
    // a call without the database and the probe removes their files
    const smaller = await provision(t, { dir, public_host: "status.example.com", skip_deploy: true });
    t.is(smaller.doc.status, "succeeded");
    t.false(existsSync(join(folder, "blackbox/blackbox.yml")));
    t.false(existsSync(join(folder, "secrets/smtp_password")));
    t.false(smaller.doc.alerts_mailed);
  },
);

test.serial(
  "provision-monitoring: a folder that is a symbolic link is refused, never followed",
  async (t) => {
    const { workspaces } = t.context;
    const outside = tempDir();
    mkdirSync(join(workspaces, "_platform"), { recursive: true });
    symlinkSync(outside, join(workspaces, "_platform", "linked"));
    const { doc } = await provision(t, {
      dir: "linked/mon",
      public_host: "status.example.com",
      skip_deploy: true,
    });
    t.is(doc.status, "failed");
    t.regex(doc.error, /linked is a symbolic link/);
    t.false(existsSync(join(outside, "mon")));
  },
);
