import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import {
  appendFileSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import WebSocket from "ws";
import {
  call,
  controlAuth,
  eventually,
  freePort,
  newApp,
  startTestNats,
  startTestPlatform,
  tempDir,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";
import { REPO_ROOT as repoRoot } from "../helpers/repo.js";
import { slipwaydSetup } from "../helpers/slipwayd-process.js";

/**
 * The operator console (issue 27, docs/console.md), end to end: a real platform on ephemeral ports
 * with its own nats-server, Debian's Chromium driven through playwright-core, and a real
 * Prometheus (Debian's binary) scraping the control plane's `/metrics` with the operator's token.
 * Screenshots go to docs/console/ with SLIPWAY_CONSOLE_SCREENSHOTS=1, else to a temporary folder.
 */
interface Ctx {
  nats: TestNats;
  p: TestPlatform;
  workspaces: string;
  promPort: number;
  amPort: number;
  browser: Browser;
  /** The processes a test starts (a shared array: ava gives each test a shallow copy of the context). */
  children: ChildProcess[];
}
const test = anyTest as TestFn<Ctx>;

/**
 * Where the screenshots go: docs/console/ with SLIPWAY_CONSOLE_SCREENSHOTS=1 (to refresh the docs'
 * pictures), else a temporary folder, so a test run leaves the checkout as it was.
 */
const SHOTS =
  process.env.SLIPWAY_CONSOLE_SCREENSHOTS === "1"
    ? join(repoRoot, "docs", "console")
    : mkdtempSync(join(tmpdir(), "slipway-console-shots-"));

test.before(async (t) => {
  const nats = await startTestNats();
  const workspaces = tempDir();
  // where the Prometheus of the last test will listen: configured from the start, started later
  const promPort = await freePort();
  const amPort = await freePort();
  const p = await startTestPlatform(nats, {
    workspaceRoot: workspaces,
    env: {
      SLIPWAY_PROMETHEUS_URL: `http://127.0.0.1:${promPort}`,
      SLIPWAY_ALERTMANAGER_URL: `http://127.0.0.1:${amPort}`,
    },
  });
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  t.context = { nats, p, workspaces, promPort, amPort, browser, children: [] };
  mkdirSync(SHOTS, { recursive: true });
});

test.after.always(async (t) => {
  for (const c of t.context.children ?? []) c.kill("SIGKILL");
  await t.context.browser?.close();
  await t.context.p?.close();
  await t.context.nats?.stop();
});

const tokenOf = (t: ExecutionContext<Ctx>) => t.context.p.controlToken;

/** A tab at the console with the token given through its form; problems of the page fail the test. */
async function openConsole(
  t: ExecutionContext<Ctx>,
  opts: { width?: number; height?: number; url?: string; token?: string } = {},
): Promise<Page> {
  const tab = await t.context.browser.newPage({
    viewport: { width: opts.width ?? 1280, height: opts.height ?? 900 },
  });
  t.teardown(() => tab.close());
  const problems: string[] = [];
  tab.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  tab.on("console", (m) => {
    // answers of 4xx and 5xx are the page's to show (Prometheus not there yet, a refused
    // WebSocket the test opens on purpose); anything else said as an error is a problem
    if (m.type() === "error" && !/^Failed to load resource|^WebSocket connection to/.test(m.text()))
      problems.push(`console: ${m.text()}`);
  });
  tab.on("dialog", (d) => {
    problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  pageProblems.set(tab, problems);
  const nav = await tab.goto(opts.url ?? `${t.context.p.controlUrl}/console`);
  t.is(nav?.status(), 200);
  await tab.getByLabel("Operator token").fill(opts.token ?? tokenOf(t));
  await tab.getByRole("button", { name: "Open the console" }).click();
  await tab.locator("nav.apps").waitFor();
  return tab;
}

const pageProblems = new WeakMap<Page, string[]>();

/** What went wrong in the page (script errors, CSP refusals, dialogs): nothing. */
function clean(t: ExecutionContext<Ctx>, tab: Page): void {
  t.deepEqual(pageProblems.get(tab), [], "no script error, no CSP refusal, no dialog");
}

async function shot(tab: Page, name: string): Promise<void> {
  const file = join(SHOTS, name);
  await tab.screenshot({ path: file, fullPage: true });
  if (statSync(file).size < 1000) throw new Error(`${name}: an empty screenshot`);
}

test.serial(
  "console: the page is public and strict (CSP script-src 'self', nosniff), its files are the shipped libraries, its own calls need the operator's token",
  async (t) => {
    const base = t.context.p.controlUrl;
    const page = await fetch(`${base}/console`);
    t.is(page.status, 200);
    t.regex(page.headers.get("content-type") ?? "", /^text\/html/);
    const csp = page.headers.get("content-security-policy") ?? "";
    t.true(csp.includes("script-src 'self'"), csp);
    t.true(csp.includes("default-src 'none'"), csp);
    t.false(csp.includes("unsafe-inline"), csp);
    t.is(page.headers.get("x-content-type-options"), "nosniff");
    const text = await page.text();
    t.false(/<script(?![^>]*\bsrc=)[^>]*>/.test(text), "no inline script");
    t.false(/https?:\/\//.test(text), "nothing from elsewhere");
    t.is((await fetch(`${base}/console/`)).status, 200);
    // the libraries, as installed (no CDN, no build at run time)
    for (const [name, file] of [
      ["vendor/preact.mjs", "node_modules/preact/dist/preact.mjs"],
      ["vendor/htm.mjs", "node_modules/htm/dist/htm.mjs"],
      ["vendor/uplot.mjs", "node_modules/uplot/dist/uPlot.esm.js"],
    ] as const) {
      const r = await fetch(`${base}/console/${name}`);
      t.is(r.status, 200, name);
      t.regex(r.headers.get("content-type") ?? "", /^text\/javascript/);
      t.is(await r.text(), readFileSync(join(repoRoot, file), "utf8"), name);
    }
    const etag = (await fetch(`${base}/console/app.js`)).headers.get("etag") ?? "";
    t.is((await fetch(`${base}/console/app.js`, { headers: { "if-none-match": etag } })).status, 304);
    t.is((await fetch(`${base}/console/../metrics`)).status, 401, "no way out of the list of files");
    t.is((await fetch(`${base}/console/nothing.js`)).status, 404);
    t.is((await fetch(`${base}/console/gateway/console.js`)).status, 404);
    t.is((await fetch(`${base}/console`, { method: "POST" })).status, 405);
    // the page's own calls: the operator's token
    t.is((await fetch(`${base}/console/api/monitoring`)).status, 401);
    const mon = await fetch(`${base}/console/api/monitoring`, { headers: controlAuth(base) });
    t.is(mon.status, 200);
    t.deepEqual(await mon.json(), {
      prometheus_url: `http://127.0.0.1:${t.context.promPort}`,
      alertmanager_url: `http://127.0.0.1:${t.context.amPort}`,
      source: "settings",
    });
    const down = await fetch(`${base}/console/api/query_range?query=up&start=1&end=2&step=1`, {
      headers: controlAuth(base),
    });
    t.is(down.status, 502, "Prometheus is not there yet");
    t.is((await down.json()).error.code, "bad_gateway");
    // a foreign page may not call it: the Origin policy admits only the console's own origin
    const foreign = await fetch(`${base}/console/api/monitoring`, {
      headers: { ...controlAuth(base), origin: "http://evil.example" },
    });
    t.is(foreign.status, 403);
    const own = await fetch(`${base}/console/api/monitoring`, {
      headers: { ...controlAuth(base), origin: base },
    });
    t.is(own.status, 200);
    const dataOrigin = await fetch(`${base}/console/api/monitoring`, {
      headers: { ...controlAuth(base), origin: t.context.p.dataUrl },
    });
    t.is(dataOrigin.status, 403, "not even the data plane's origin");
  },
);

test.serial(
  "console in Chromium: a wrong token is refused by the form, then the apps are listed and a secret set through the API is in the live tail within 1 s",
  async (t) => {
    const { p } = t.context;
    const a = await newApp(p, "cons");
    const b = await newApp(p, "cons");
    const tab = await t.context.browser.newPage({ viewport: { width: 1280, height: 900 } });
    t.teardown(() => tab.close());
    await tab.goto(`${p.controlUrl}/console`);
    await tab.getByLabel("Operator token").fill("slwc_not-the-token-000000000000000000000000");
    await tab.getByRole("button", { name: "Open the console" }).click();
    await tab.getByRole("alert").getByText("That token was refused.").waitFor();
    await tab.close();

    const page = await openConsole(t);
    for (const app of [a.name, b.name]) await page.locator(`button.app-link[data-app="${app}"]`).waitFor();
    // the token stays in the tab's session storage
    t.is(await page.evaluate(() => sessionStorage.getItem("slipway.console.token")), tokenOf(t));
    await page.locator('.live[data-state="live"]').waitFor({ timeout: 10_000 });

    const t0 = Date.now();
    const set = await call(p.controlUrl, "set-secret", {
      app: a.name,
      name: "CONSOLE_KEY",
      value: "s3cret-value",
    });
    t.is(set.status, 200, set.text);
    await page.locator(`.tail tr[data-type="SecretSet"][data-app="${a.name}"]`).waitFor({ timeout: 1000 });
    const ms = Date.now() - t0;
    t.log(`SecretSet in the tail ${ms} ms after the call was sent`);
    t.true(ms <= 1000, `${ms} ms`);
    const row =
      (await page.locator(`.tail tr[data-type="SecretSet"][data-app="${a.name}"]`).textContent()) ?? "";
    t.true(row.includes("CONSOLE_KEY"), row);
    t.false((await page.content()).includes("s3cret-value"), "the value is never shown");
    // what the page's WebSocket was answered: slipway.v1, and the token is not echoed
    const chosen = await page.evaluate(async (token) => {
      const b64 = btoa(token).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
      const ws = new WebSocket(`ws://${location.host}/events/stream`, ["slipway.v1", `bearer.${b64}`]);
      return await new Promise<string>((resolve) => {
        ws.onopen = () => {
          resolve(ws.protocol);
          ws.close();
        };
        ws.onerror = () => resolve("error");
      });
    }, tokenOf(t));
    t.is(chosen, "slipway.v1");
    const refused = await page.evaluate(async () => {
      const ws = new WebSocket(`ws://${location.host}/events/stream`, ["slipway.v1", "bearer.bm90LWl0"]);
      return await new Promise<string>((resolve) => {
        ws.onopen = () => resolve("open");
        ws.onerror = () => resolve("error");
      });
    });
    t.is(refused, "error", "a wrong token opens no tail");
    await page.locator(`button.app-link[data-app="${a.name}"]`).click();
    await page.locator(`.resources tr[data-type="Secret"]`).waitFor();
    await shot(page, "console-app.png");
    clean(t, page);
  },
);

test.serial(
  "console in Chromium: a build's log is followed live to its end; a job shows its next tick and how late the last one fired",
  async (t) => {
    const { p, workspaces } = t.context;
    // the app's own server, which its job calls
    const hits: number[] = [];
    const target = createServer((_req, res) => {
      hits.push(Date.now());
      res.writeHead(200).end("ok");
    });
    await new Promise<void>((r) => target.listen(0, "127.0.0.1", r));
    t.teardown(() => {
      target.closeAllConnections();
      target.close();
    });
    const base_url = `http://127.0.0.1:${(target.address() as { port: number }).port}`;
    const app = await newApp(p, "consb", { base_url });
    // a build script that prints a line every 300 ms (npm run build in the app's workspace: no engine)
    const pkgFile = join(workspaces, app.name, "package.json");
    const pkg = JSON.parse(readFileSync(pkgFile, "utf8"));
    pkg.scripts.build =
      "node -e \"let i=0;const t=setInterval(()=>{i++;console.log('build step '+i+' of 8');if(i===8)clearInterval(t)},300)\"";
    writeFileSync(pkgFile, JSON.stringify(pkg, null, 2));
    mkdirSync(join(workspaces, app.name, "node_modules"), { recursive: true });

    const page = await openConsole(t, { url: `${p.controlUrl}/console?app=${app.name}` });
    await page.locator(`button.app-link[data-app="${app.name}"][aria-current="true"]`).waitFor();
    const build = await call(p.controlUrl, "build", { app: app.name });
    t.is(build.status, 202, build.text);
    const id = build.body.resource.id as string;
    const row = page.locator(`.resources tr[data-id="${id}"]`);
    await row.waitFor({ timeout: 10_000 });
    await row.getByRole("button", { name: /Follow the log/ }).click();
    const pre = page.locator(".log pre");
    await pre.getByText("build step 1 of 8").waitFor({ timeout: 10_000 });
    const midway = await page.locator(".log-state").getAttribute("data-state");
    const seenEarly = (await pre.textContent()) ?? "";
    t.is(midway, "following", "the log was open while the build ran");
    t.false(seenEarly.includes("build step 8 of 8"), "lines came as they were printed");
    await page.locator('.log-state[data-state="ended"]').waitFor({ timeout: 20_000 });
    const all = (await pre.textContent()) ?? "";
    for (let i = 1; i <= 8; i++) t.true(all.includes(`build step ${i} of 8`), all);
    t.regex((await page.locator(".log-state").textContent()) ?? "", /ended \(succeeded\)/);

    const job = await call(p.controlUrl, "schedule-job", {
      app: app.name,
      name: "tick",
      target_path: "/t",
      every: "1s",
    });
    t.is(job.status, 200, job.text);
    await eventually(async () => hits.length >= 2, 20_000);
    // the panel reloads on the app's events (JobRan)
    const jobRow = page.locator(".jobs tbody tr", { hasText: "tick" });
    await jobRow.locator(".last-tick", { hasText: /ms late/ }).waitFor({ timeout: 15_000 });
    const text = (await jobRow.textContent()) ?? "";
    t.regex(text, /every 1s/, text);
    t.regex(text, /in \d+ s|overdue/, text);
    t.regex((await jobRow.locator(".last-tick").textContent()) ?? "", /^ok, \d+ ms late$/);
    await shot(page, "console-build-log.png");
    clean(t, page);
  },
);

test.serial(
  "console on a phone (375 px): nothing is wider than the screen, and the keyboard reaches and opens an app",
  async (t) => {
    const { p } = t.context;
    const page = await openConsole(t, { width: 375, height: 812 });
    await page.locator("button.app-link[data-app]").first().waitFor();
    const widths = await page.evaluate(() => ({
      doc: document.documentElement.scrollWidth,
      view: window.innerWidth,
    }));
    t.true(widths.doc <= widths.view, JSON.stringify(widths));
    // the token stays for the tab: a reload opens the console at once; then Tab from the top:
    // the skip link, the token's button, then the apps
    await page.reload();
    await page.locator("button.app-link[data-app]").first().waitFor();
    await page.keyboard.press("Tab");
    t.is(await page.evaluate(() => document.activeElement?.textContent?.trim()), "Skip to content");
    let target = "";
    for (let i = 0; i < 10 && !target; i++) {
      await page.keyboard.press("Tab");
      target = (await page.evaluate(() => (document.activeElement as HTMLElement | null)?.dataset.app)) ?? "";
    }
    t.truthy(target, "an app's button takes the focus");
    await page.keyboard.press("Enter");
    await page.locator(`button.app-link[data-app="${target}"][aria-current="true"]`).waitFor();
    await page.locator("#res-h").waitFor();
    // every control has a name
    const unnamed = await page.evaluate(
      () =>
        [...document.querySelectorAll("button, input, select, textarea")].filter(
          (el) =>
            !(
              el.getAttribute("aria-label") ||
              el.textContent?.trim() ||
              (el as HTMLInputElement).labels?.length
            ),
        ).length,
    );
    t.is(unnamed, 0);
    t.true(p.controlUrl.length > 0);
    await shot(page, "console-phone.png");
    clean(t, page);
  },
);

test.serial(
  "the tail's WebSocket: the token as a subprotocol is answered slipway.v1 (never the token); a wrong token, a foreign Origin or both ways at once are refused",
  async (t) => {
    const { p } = t.context;
    const url = `${p.controlUrl.replace("http", "ws")}/events/stream`;
    const b64 = (s: string) => Buffer.from(s).toString("base64url");
    const open = (protocols: string[], headers: Record<string, string> = {}) =>
      new Promise<{ status: number; protocol?: string; header?: string }>((resolve) => {
        const ws = new WebSocket(url, protocols, { headers });
        ws.on("upgrade", (res) => {
          resolve({ status: 101, header: String(res.headers["sec-websocket-protocol"] ?? "") });
          ws.close();
        });
        ws.on("unexpected-response", (_req, res) => {
          resolve({ status: res.statusCode ?? 0 });
          res.resume();
        });
        ws.on("error", () => resolve({ status: -1 }));
      });
    const good = await open(["slipway.v1", `bearer.${b64(tokenOf(t))}`], { origin: p.controlUrl });
    t.deepEqual(good, { status: 101, header: "slipway.v1" });
    t.is(
      (await open(["slipway.v1", `bearer.${b64(`${tokenOf(t)}x`)}`], { origin: p.controlUrl })).status,
      401,
    );
    t.is((await open(["slipway.v1"], { origin: p.controlUrl })).status, 401, "no token at all");
    t.is(
      (await open(["slipway.v1", `bearer.${b64(tokenOf(t))}`], { origin: "http://evil.example" })).status,
      403,
    );
    t.is(
      (await open(["slipway.v1", `bearer.${b64(tokenOf(t))}`], { origin: p.dataUrl })).status,
      403,
      "the data plane's origin is another origin",
    );
    t.is(
      (
        await open(["slipway.v1", `bearer.${b64(tokenOf(t))}`], {
          authorization: `Bearer ${tokenOf(t)}`,
        })
      ).status,
      400,
    );
    t.is((await open([`bearer.${b64(tokenOf(t))}`])).status, 400, "a token without slipway.v1");
    // the header way still works, and offers nothing to choose
    t.deepEqual(await open([], { authorization: `Bearer ${tokenOf(t)}` }), { status: 101, header: "" });
  },
);

const HAS_SETPRIV = spawnSync("setpriv", ["--version"]).status === 0;

/** Starts a binary with `args`, keeps its last words, and waits until `ready` answers 200. */
async function startBinary(
  t: ExecutionContext<Ctx>,
  bin: string,
  args: string[],
  dir: string,
  ready: string,
): Promise<ChildProcess> {
  // it dies with the test process, however that ends (setpriv execs: the pid is the binary's)
  const child = HAS_SETPRIV
    ? spawn("setpriv", ["--pdeathsig", "KILL", "--", bin, ...args], {
        cwd: dir,
        stdio: ["ignore", "ignore", "pipe"],
      })
    : spawn(bin, args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  child.stderr?.on("data", (d) => {
    err = (err + String(d)).slice(-4000);
  });
  t.context.children.push(child);
  await eventually(async () => {
    if (child.exitCode !== null) throw new Error(`${bin} exited: ${err}`);
    return (await fetch(ready)).ok;
  }, 20_000);
  return child;
}

/** Debian's prometheus-alertmanager on its port, loopback only (no cluster listener). */
async function startAlertmanager(t: ExecutionContext<Ctx>): Promise<void> {
  const dir = tempDir("slipway-am-");
  writeFileSync(
    join(dir, "alertmanager.yml"),
    ["route: { receiver: nobody }", "receivers: [{ name: nobody }]", ""].join("\n"),
  );
  await startBinary(
    t,
    "prometheus-alertmanager",
    [
      `--config.file=${join(dir, "alertmanager.yml")}`,
      `--storage.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${t.context.amPort}`,
      "--cluster.listen-address=",
    ],
    dir,
    `http://127.0.0.1:${t.context.amPort}/-/ready`,
  );
}

/** Debian's prometheus on its port, scraping the control plane every second with the token, alerting the Alertmanager. */
async function startPrometheus(t: ExecutionContext<Ctx>): Promise<void> {
  const dir = tempDir("slipway-prom-");
  const control = new URL(t.context.p.controlUrl);
  writeFileSync(join(dir, "token"), tokenOf(t), { mode: 0o600 });
  writeFileSync(
    join(dir, "rules.yml"),
    [
      "groups:",
      "  - name: console-test",
      "    rules:",
      "      - alert: ControlPlaneScraped",
      '        expr: up{job="slipway-control"} == 1',
      "        labels: { severity: info }",
      "        annotations: { summary: the control plane answers the scrape }",
      "",
    ].join("\n"),
  );
  writeFileSync(
    join(dir, "prometheus.yml"),
    [
      "global: { scrape_interval: 1s, evaluation_interval: 1s }",
      "rule_files: [rules.yml]",
      `alerting: { alertmanagers: [{ static_configs: [{ targets: ["127.0.0.1:${t.context.amPort}"] }] }] }`,
      "scrape_configs:",
      "  - job_name: slipway-control",
      "    authorization: { type: Bearer, credentials_file: token }",
      `    static_configs: [{ targets: ["${control.host}"] }]`,
      "",
    ].join("\n"),
  );
  await startBinary(
    t,
    "prometheus",
    [
      `--config.file=${join(dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${t.context.promPort}`,
      // the first notice goes out before the Alertmanager is discovered (dropped): send again soon
      "--rules.alert.resend-delay=1s",
    ],
    dir,
    `http://127.0.0.1:${t.context.promPort}/-/ready`,
  );
}

test.serial(
  "console in Chromium: without an answering Prometheus it says so; once one scrapes the platform, the charts are drawn, and the alert firing is listed from Alertmanager",
  async (t) => {
    const page = await openConsole(t);
    const mon = page.locator("section.monitoring");
    await mon.locator(".chart .error").first().waitFor({ timeout: 10_000 });
    t.regex((await mon.locator(".chart .error").first().textContent()) ?? "", /Prometheus is unreachable/);

    t.regex((await mon.textContent()) ?? "", /Alertmanager is unreachable/);

    await startAlertmanager(t);
    await startPrometheus(t);
    // the page asks again every 15 s; a reload asks at once. Three points a series: a line
    await eventually(
      async () => {
        await page.reload();
        await mon.locator(".chart").first().waitFor();
        await page.waitForTimeout(1000);
        const drawn = await mon.locator(".chart .plot canvas").count();
        const points = await mon
          .locator(".chart .plot")
          .evaluateAll((els) => Math.min(...els.map((e) => Number((e as HTMLElement).dataset.points))));
        return drawn === 3 && points >= 3;
      },
      60_000,
      1000,
    );
    const rate = mon.locator(".chart", { hasText: "Request rate" });
    t.is(await rate.locator("canvas").count(), 1);
    const legend = (await rate.locator(".u-legend").textContent()) ?? "";
    t.true(legend.includes("gateway control"), legend);
    await eventually(
      async () => {
        await page.reload();
        return (await mon.locator(".alerts li", { hasText: "ControlPlaneScraped" }).count()) === 1;
      },
      // Prometheus learns of the Alertmanager within about 5 s and sends again every second; a
      // machine busy with the rest of the suite has taken more than 45 s
      90_000,
      1000,
    ).catch(async (e) => {
      t.log(await mon.textContent());
      t.log(await fetch(`http://127.0.0.1:${t.context.promPort}/api/v1/alerts`).then((r) => r.text()));
      t.log(await fetch(`http://127.0.0.1:${t.context.promPort}/api/v1/alertmanagers`).then((r) => r.text()));
      throw e;
    });
    // from Alertmanager's API (the console asks it when SLIPWAY_ALERTMANAGER_URL is set)
    const alerts = await fetch(`${t.context.p.controlUrl}/console/api/alerts`, {
      headers: controlAuth(t.context.p.controlUrl),
    }).then((r) => r.json());
    t.is(alerts.source, "alertmanager");
    t.true(
      alerts.items.some(
        (a: { name: string; summary: string }) =>
          a.name === "ControlPlaneScraped" && /scrape/.test(a.summary),
      ),
      JSON.stringify(alerts),
    );
    await shot(page, "console-monitoring.png");
    clean(t, page);
  },
);

test.serial(
  "console: a control plane without SLIPWAY_PROMETHEUS_URL says monitoring is not configured",
  async (t) => {
    const other = await startTestPlatform(t.context.nats, { workspaceRoot: tempDir() });
    t.teardown(() => other.close());
    const page = await openConsole(t, { url: `${other.controlUrl}/console`, token: other.controlToken });
    await page.locator("section.monitoring .not-configured").waitFor({ timeout: 10_000 });
    t.regex((await page.locator("section.monitoring").textContent()) ?? "", /SLIPWAY_PROMETHEUS_URL/);
    t.is(await page.locator("section.monitoring canvas").count(), 0);
    clean(t, page);
  },
);

test.serial(
  "the single-file bundle carries the console: dist/bin/slipwayd.mjs beside dist/console, with no console/ source folder near, serves the page and its libraries from dist/console",
  async (t) => {
    for (const f of ["dist/bin/slipwayd.mjs", "dist/bin/node-thread.mjs", "dist/console/index.html"])
      t.true(existsSync(join(repoRoot, f)), `${f} is missing: run npm run build`);
    // what the image ships: dist/ and node_modules, no sources
    const root = tempDir("slipway-bundle-");
    mkdirSync(join(root, "dist", "bin"), { recursive: true });
    for (const f of ["slipwayd.mjs", "node-thread.mjs"])
      copyFileSync(join(repoRoot, "dist", "bin", f), join(root, "dist", "bin", f));
    cpSync(join(repoRoot, "dist", "console"), join(root, "dist", "console"), { recursive: true });
    symlinkSync(join(repoRoot, "node_modules"), join(root, "node_modules"));
    // a mark in the copy, to tell it from the package in node_modules
    appendFileSync(join(root, "dist", "console", "vendor", "preact.mjs"), "\n// from dist/console\n");
    const dataDir = tempDir();
    const s = await slipwaydSetup(dataDir);
    const child = spawn(process.execPath, [join(root, "dist", "bin", "slipwayd.mjs"), "up"], {
      env: s.env,
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"],
    });
    t.context.children.push(child);
    let out = "";
    child.stdout?.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr?.on("data", (b: Buffer) => (out += b.toString()));
    await eventually(async () => {
      if (child.exitCode !== null) throw new Error(`slipwayd exited: ${out}`);
      return out.includes("ready in");
    }, 60_000);
    const page = await fetch(`${s.control}/console`);
    t.is(page.status, 200, out);
    t.is(await page.text(), readFileSync(join(repoRoot, "console", "index.html"), "utf8"));
    const preact = await (await fetch(`${s.control}/console/vendor/preact.mjs`)).text();
    t.true(preact.endsWith("// from dist/console\n"), "the library comes from the bundle's copy");
    for (const f of ["app.js", "style.css", "vendor/htm.mjs", "vendor/uplot.mjs", "vendor/uplot.css"])
      t.is((await fetch(`${s.control}/console/${f}`)).status, 200, f);
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
  },
);
