// The console's panels: the apps, the live tail, an app's resources, jobs, deployments and
// releases, and a followed log. Plain function components: the state is the Console's (app.js).
import { ago, html, Status, when } from "./lib.js";

export function Apps({ apps, selected, appsError, onSelect }) {
  return html`<nav class="apps" aria-labelledby="apps-h">
    <h2 id="apps-h">Apps <span class="count">${apps.length}</span></h2>
    ${appsError ? html`<p class="error" role="alert">${appsError}</p>` : null}
    <ul>
      <li>
        <button type="button" class="app-link" aria-current=${selected === "" ? "true" : undefined} onClick=${() => onSelect("")}>
          All apps (overview)
        </button>
      </li>
      ${apps.map(
        (a) => html`<li key=${a.name}>
          <button
            type="button"
            class="app-link"
            data-app=${a.name}
            aria-current=${selected === a.name ? "true" : undefined}
            onClick=${() => onSelect(a.name)}
          >
            <span class="app-name">${a.name}</span> <${Status} status=${a.status} />
          </button>
        </li>`,
      )}
    </ul>
    ${apps.length === 0 && !appsError ? html`<p class="muted">No apps yet.</p>` : null}
  </nav>`;
}

export function Tail({ tail, tailState }) {
  return html`<section class="panel tail" aria-labelledby="tail-h">
    <h2 id="tail-h">Live events <span class=${`live ${tailState === "live" ? "on" : ""}`} data-state=${tailState}>${tailState}</span></h2>
    <div class="scroll" tabindex="0" role="log" aria-live="polite" aria-label="Platform events, newest first">
      ${
        tail.length === 0
          ? html`<p class="muted">Events appear here as they happen.</p>`
          : html`<table>
            <thead><tr><th scope="col">time</th><th scope="col">app</th><th scope="col">event</th><th scope="col">resource</th></tr></thead>
            <tbody>
              ${tail.map(
                (e) => html`<tr key=${e.seq} data-type=${e.type} data-app=${e.app_id}>
                  <td class="nowrap">${when(e.timestamp).slice(11)}</td>
                  <td>${e.app_id}</td>
                  <td><strong>${e.type}</strong>${typeof e.data?.name === "string" ? html` <span class="muted">${e.data.name}</span>` : null}</td>
                  <td><code>${e.resource_id}</code></td>
                </tr>`,
              )}
            </tbody>
          </table>`
      }
    </div>
  </section>`;
}

export function Resources({ resources, selected, onLog }) {
  return html`<section class="panel" aria-labelledby="res-h">
    <h2 id="res-h">Resources of ${selected}</h2>
    <div class="scroll" tabindex="0" aria-label="Resources table">
      <table class="resources">
        <thead><tr><th scope="col">type</th><th scope="col">id</th><th scope="col">status</th><th scope="col">updated</th><th scope="col"><span class="sr-only">log</span></th></tr></thead>
        <tbody>
          ${resources.map(
            (r) => html`<tr key=${r.id} data-id=${r.id} data-type=${r.type}>
              <td>${r.type}</td>
              <td><code>${r.id}</code></td>
              <td><${Status} status=${r.status} /></td>
              <td class="nowrap">${when(r.updated_at)}</td>
              <td><button type="button" class="small" aria-label=${`Follow the log of ${r.type} ${r.id}`} onClick=${() => onLog(r)}>Log</button></td>
            </tr>`,
          )}
        </tbody>
      </table>
    </div>
    ${resources.length === 0 ? html`<p class="muted">No resources.</p>` : null}
  </section>`;
}

/** `{every: "1s"}` as `every 1s`; a cron or a time the same way. */
function scheduleText(s) {
  if (typeof s === "string") return s;
  if (!s || typeof s !== "object") return "";
  return Object.entries(s)
    .map(([k, v]) => `${k} ${String(v)}`)
    .join(", ");
}

export function Jobs({ jobs, lateness }) {
  const now = Date.now();
  return html`<section class="panel jobs" aria-labelledby="jobs-h">
    <h2 id="jobs-h">Jobs</h2>
    ${
      jobs.length === 0
        ? html`<p class="muted">No scheduled jobs.</p>`
        : html`<div class="scroll" tabindex="0" aria-label="Jobs table"><table>
          <thead><tr><th scope="col">job</th><th scope="col">schedule</th><th scope="col">next due</th><th scope="col">last tick</th><th scope="col">runs / failures</th></tr></thead>
          <tbody>
            ${jobs.map((j) => {
              const due = j.next_due_at ? Date.parse(j.next_due_at) : Number.NaN;
              const overdue = Number.isFinite(due) && due < now - 2000;
              const last = lateness[j.id];
              return html`<tr key=${j.id}>
                <td>${j.name}${j.disabled ? html` <span class="muted">(paused)</span>` : null}</td>
                <td><code>${scheduleText(j.schedule)}</code></td>
                <td class="nowrap">${j.next_due_at ? html`${when(j.next_due_at)} ${overdue ? html`<span class="warn">overdue ${ago(now - due)}</span>` : html`<span class="muted">in ${ago(due - now)}</span>`}` : "–"}</td>
                <td class="last-tick">${last ? html`${last.type === "JobRan" ? "ok" : "failed"}, ${Number(last.late_ms ?? 0)} ms late` : html`<span class="muted">none yet</span>`}</td>
                <td>${j.runs ?? 0} / ${j.failures ?? 0}</td>
              </tr>`;
            })}
          </tbody>
        </table></div>`
    }
  </section>`;
}

export function Rollouts({ rollouts }) {
  return html`<section class="panel" aria-labelledby="roll-h">
    <h2 id="roll-h">Deployments and releases</h2>
    ${
      rollouts.length === 0
        ? html`<p class="muted">No deployments or releases yet.</p>`
        : html`<ul class="rollouts">
          ${rollouts.map(
            (r) => html`<li key=${r.id}>
              <div><strong>${r.type}</strong> <code>${r.id}</code> <${Status} status=${r.status} /> <span class="muted">${when(r.created_at)}</span></div>
              ${
                r.type === "Release"
                  ? html`<ol class="phases" aria-label="phases">
                    ${(Array.isArray(r.phases) ? r.phases : []).map(
                      (p) =>
                        html`<li class=${`phase st-${String(p.status).replace(/[^a-z_]/g, "")}`}>${p.name}: ${p.status}</li>`,
                    )}
                  </ol>`
                  : html`<p class="muted">${r.service ?? ""} ${r.image ?? ""}${r.reason ? ` (${r.reason})` : ""}</p>`
              }
              ${r.error ? html`<p class="error">${String(r.error)}</p>` : null}
            </li>`,
          )}
        </ul>`
    }
  </section>`;
}

export function Log({ log, onClose }) {
  if (!log) return null;
  return html`<section class="panel log" aria-labelledby="log-h">
    <h2 id="log-h">Log of ${log.type} <code>${log.id}</code> <span class="log-state" data-state=${log.state}>${log.state === "ended" ? `ended${log.status ? ` (${log.status})` : ""}` : log.state}</span></h2>
    <pre tabindex="0" role="log" aria-live="polite" aria-label="Log lines">${log.lines.join("\n")}</pre>
    <button type="button" class="small" onClick=${onClose}>Close the log</button>
  </section>`;
}
