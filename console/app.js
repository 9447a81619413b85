// The operator console (docs/console.md): plain ES modules, no build step. Preact renders, htm
// writes the markup (text is always escaped: nothing here sets HTML), uPlot draws the charts.
// Every data call carries the operator's token from sessionStorage; the live tail is a WebSocket
// that offers the token as a subprotocol (a browser cannot set Authorization on a WebSocket).
import { Component, createRef, render } from "./vendor/preact.mjs";
import { api, bearerProtocol, html, Unauthorized } from "./lib.js";
import { loadCharts, Monitoring } from "./monitoring.js";
import { Apps, Jobs, Log, Resources, Rollouts, Tail } from "./panels.js";

const TOKEN_KEY = "slipway.console.token";
const TAIL_MAX = 200;
const LOG_MAX = 2000;
const REFRESH_MS = 15_000;

/** The token form: the only thing shown until a token works. */
class TokenForm extends Component {
  constructor() {
    super();
    this.state = { value: "" };
    this.input = createRef();
  }
  componentDidMount() {
    this.input.current?.focus();
  }
  render({ onToken, error, checking }, { value }) {
    const submit = (e) => {
      e.preventDefault();
      if (value.trim()) onToken(value.trim());
    };
    return html`<main id="main" class="login">
      <h1>Slipway console</h1>
      <form onSubmit=${submit} aria-describedby="token-help">
        <label for="token">Operator token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="off"
          spellcheck="false"
          required
          ref=${this.input}
          value=${value}
          onInput=${(e) => this.setState({ value: e.currentTarget.value })}
        />
        <p id="token-help" class="help">
          The control token (<code>slwc_…</code>, in <code>control.token</code> of the data
          directory). It stays in this tab only (session storage).
        </p>
        ${error ? html`<p class="error" role="alert">${error}</p>` : null}
        <button type="submit" disabled=${checking}>${checking ? "Checking…" : "Open the console"}</button>
      </form>
    </main>`;
  }
}

class Console extends Component {
  constructor(props) {
    super(props);
    this.state = {
      apps: [],
      appsError: "",
      selected: new URLSearchParams(location.search).get("app") ?? "",
      resources: [],
      jobs: [],
      lateness: {},
      rollouts: [],
      appError: "",
      tail: [],
      tailState: "connecting",
      log: undefined,
      monitoring: undefined,
      charts: {},
      alerts: undefined,
      alertsError: "",
    };
    this.lastSeq = 0;
    this.closed = false;
  }

  get token() {
    return this.props.token;
  }

  async call(path, signal) {
    try {
      return await api(this.token, path, signal);
    } catch (e) {
      if (e instanceof Unauthorized) this.props.onUnauthorized();
      throw e;
    }
  }

  componentDidMount() {
    this.loadApps();
    if (this.state.selected) this.loadApp(this.state.selected);
    this.openTail();
    this.loadMonitoring();
    this.timer = setInterval(() => {
      this.loadApps();
      if (this.state.selected) this.loadApp(this.state.selected);
      this.loadMonitoring();
    }, REFRESH_MS);
  }

  componentWillUnmount() {
    this.closed = true;
    clearInterval(this.timer);
    clearTimeout(this.reconnect);
    clearTimeout(this.soon);
    this.ws?.close();
    this.logAbort?.abort();
  }

  async loadApps() {
    try {
      const page = await this.call("/resources?type=Application&limit=500");
      const apps = page.items
        .map((r) => ({ name: r.app_id, status: r.status, base_url: r.base_url, updated_at: r.updated_at }))
        .sort((a, b) => a.name.localeCompare(b.name));
      this.setState({ apps, appsError: "" });
    } catch (e) {
      this.setState({ appsError: e.message });
    }
  }

  async loadApp(app) {
    const q = encodeURIComponent(app);
    try {
      const [all, jobs, deps, rels] = await Promise.all([
        this.call(`/resources?app_id=${q}&limit=100`),
        this.call(`/resources?app_id=${q}&type=ScheduledJob&limit=100`),
        this.call(`/resources?app_id=${q}&type=Deployment&limit=20`),
        this.call(`/resources?app_id=${q}&type=Release&limit=20`),
      ]);
      if (this.state.selected !== app) return;
      const rollouts = [...deps.items, ...rels.items].sort((a, b) =>
        String(b.created_at).localeCompare(String(a.created_at)),
      );
      this.setState({ resources: all.items, jobs: jobs.items, rollouts, appError: "" });
      // each job's last tick: how late it fired
      const lateness = {};
      await Promise.all(
        jobs.items.slice(0, 50).map(async (j) => {
          const ev = await this.call(`/events?resource_id=${encodeURIComponent(j.id)}&limit=5`);
          const ran = ev.items.find((e) => e.type === "JobRan" || e.type === "JobRunFailed");
          if (ran) lateness[j.id] = { late_ms: ran.data?.late_ms, type: ran.type, at: ran.data?.due_at };
        }),
      );
      if (this.state.selected === app) this.setState({ lateness });
    } catch (e) {
      if (this.state.selected === app) this.setState({ appError: e.message });
    }
  }

  select(app) {
    this.setState({ selected: app, resources: [], jobs: [], rollouts: [], lateness: {}, appError: "" });
    const u = new URL(location.href);
    if (app) u.searchParams.set("app", app);
    else u.searchParams.delete("app");
    history.replaceState(null, "", u);
    if (app) this.loadApp(app);
  }

  openTail() {
    if (this.closed) return;
    const u = new URL("/events/stream", location.href);
    u.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    if (this.lastSeq) u.searchParams.set("from_seq", String(this.lastSeq + 1));
    let ws;
    try {
      ws = new WebSocket(u, ["slipway.v1", bearerProtocol(this.token)]);
    } catch (e) {
      this.setState({ tailState: `closed: ${e.message}` });
      return;
    }
    this.ws = ws;
    this.setState({ tailState: "connecting" });
    ws.onopen = () => this.setState({ tailState: "live" });
    ws.onmessage = (m) => {
      let ev;
      try {
        ev = JSON.parse(m.data);
      } catch {
        return;
      }
      this.lastSeq = Math.max(this.lastSeq, ev.seq ?? 0);
      this.setState(({ tail }) => ({ tail: [ev, ...tail].slice(0, TAIL_MAX) }));
      if (ev.resource_type === "Application") this.later("apps", () => this.loadApps());
      if (ev.app_id === this.state.selected) this.later("app", () => this.loadApp(ev.app_id));
    };
    ws.onclose = (c) => {
      if (this.ws !== ws || this.closed) return;
      this.setState({ tailState: `reconnecting (closed${c.code ? ` ${c.code}` : ""})` });
      this.reconnect = setTimeout(() => this.openTail(), 2000);
    };
  }

  /** Runs each reload once within 500 ms, however many events ask for it (the last `f` of a key). */
  later(key, f) {
    this.pending ??= new Map();
    this.pending.set(key, f);
    if (this.soon) return;
    this.soon = setTimeout(() => {
      this.soon = undefined;
      const fs = this.pending;
      this.pending = undefined;
      for (const g of fs.values()) g();
    }, 500);
  }

  async followLog(resource) {
    this.logAbort?.abort();
    const ac = new AbortController();
    this.logAbort = ac;
    const log = { id: resource.id, type: resource.type, lines: [], state: "following" };
    this.setState({ log });
    const update = (patch) => {
      if (this.logAbort === ac) this.setState(({ log }) => ({ log: { ...log, ...patch } }));
    };
    try {
      const r = await fetch(`/logs/${encodeURIComponent(resource.id)}?follow=1`, {
        headers: { authorization: `Bearer ${this.token}` },
        signal: ac.signal,
      });
      if (r.status === 401) {
        this.props.onUnauthorized();
        return;
      }
      if (!r.ok || !r.body) {
        update({ state: `failed: ${r.status}` });
        return;
      }
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let rest = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        rest += value;
        const parts = rest.split("\n");
        rest = parts.pop() ?? "";
        if (parts.length)
          this.setState(({ log: l }) =>
            l && this.logAbort === ac ? { log: { ...l, lines: [...l.lines, ...parts].slice(-LOG_MAX) } } : {},
          );
      }
      if (rest)
        this.setState(({ log: l }) =>
          l && this.logAbort === ac ? { log: { ...l, lines: [...l.lines, rest] } } : {},
        );
      let status = "";
      try {
        status = (
          await this.call(
            `/resources/${encodeURIComponent(resource.type)}/${encodeURIComponent(resource.id)}`,
          )
        ).status;
      } catch {
        status = "";
      }
      update({ state: "ended", status });
    } catch (e) {
      if (e.name !== "AbortError") update({ state: `failed: ${e.message}` });
    }
  }

  async loadMonitoring() {
    let monitoring;
    try {
      monitoring = await this.call("/console/api/monitoring");
    } catch (e) {
      this.setState({ monitoring: { error: e.message } });
      return;
    }
    this.setState({ monitoring });
    if (!monitoring.prometheus_url && !monitoring.alertmanager_url) return;
    if (monitoring.prometheus_url) this.setState(await loadCharts((path) => this.call(path)));
    try {
      const alerts = await this.call("/console/api/alerts");
      this.setState({ alerts, alertsError: "" });
    } catch (e) {
      this.setState({ alertsError: e.message });
    }
  }

  closeLog() {
    this.logAbort?.abort();
    this.setState({ log: undefined });
  }

  render() {
    const { selected, appError } = this.state;
    return html`<div class="layout">
      <header class="top">
        <h1>Slipway console</h1>
        <button type="button" class="small" onClick=${this.props.onForget}>Forget the token</button>
      </header>
      <${Apps} apps=${this.state.apps} selected=${selected} appsError=${this.state.appsError} onSelect=${(a) => this.select(a)} />
      <main id="main" tabindex="-1">
        ${appError ? html`<p class="error" role="alert">${appError}</p>` : null}
        <${Log} log=${this.state.log} onClose=${() => this.closeLog()} />
        ${
          selected
            ? html`<${Resources} resources=${this.state.resources} selected=${selected} onLog=${(res) => this.followLog(res)} />
                <${Jobs} jobs=${this.state.jobs} lateness=${this.state.lateness} />
                <${Rollouts} rollouts=${this.state.rollouts} />`
            : null
        }
        <${Tail} tail=${this.state.tail} tailState=${this.state.tailState} />
        <${Monitoring} ...${this.state} />
      </main>
    </div>`;
  }
}

class App extends Component {
  constructor() {
    super();
    this.state = { token: sessionStorage.getItem(TOKEN_KEY) ?? "", error: "", checking: false };
  }
  async tryToken(token) {
    this.setState({ checking: true, error: "" });
    try {
      await api(token, "/resources?type=Application&limit=1");
      sessionStorage.setItem(TOKEN_KEY, token);
      this.setState({ token, checking: false });
    } catch (e) {
      this.setState({
        checking: false,
        error: e instanceof Unauthorized ? "That token was refused." : e.message,
      });
    }
  }
  forget(error = "") {
    sessionStorage.removeItem(TOKEN_KEY);
    this.setState({ token: "", error });
  }
  render(_p, { token, error, checking }) {
    if (!token)
      return html`<${TokenForm} error=${error} checking=${checking} onToken=${(t) => this.tryToken(t)} />`;
    return html`<${Console}
      token=${token}
      onForget=${() => this.forget()}
      onUnauthorized=${() => this.forget("The token was refused; give it again.")}
    />`;
  }
}

const root = document.getElementById("root");
root.textContent = "";
render(html`<${App} />`, root);
