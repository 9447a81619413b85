import { parseDocument } from "yaml";
import { type ErrorDetail, PlatformError, parseMemoryLimit } from "../../proto/mod.js";

/**
 * The subset of the compose file format the production path reads
 * (DESIGN §8, docs/deploy.md): per service `image`, `environment`, `env_file`,
 * `ports`, `labels`, `healthcheck`, `command`, `volumes`, `depends_on`,
 * `mem_limit`, `pids_limit` (the container's limits, up to the operator's
 * ceiling: proto/containers.ts); at the
 * top `name`, `services` (and the obsolete `version`, ignored). Anything else
 * is refused by name: a feature the platform would silently not honour is a
 * surprise in production.
 */

/** A service of the subset, normalized (lists as lists, maps as maps). */
export interface ComposeService {
  name: string;
  image?: string;
  environment: Record<string, string>;
  env_file: string[];
  /** `"<container port>"` or `"<host port>:<container port>"` as written. */
  ports: string[];
  labels: Record<string, string>;
  healthcheck?: { test: string[]; interval?: string; timeout?: string; retries?: number };
  command?: string[];
  volumes: string[];
  depends_on: string[];
  /** `mem_limit` in MiB. */
  mem_limit_mb?: number;
  pids_limit?: number;
}

export interface ComposeFile {
  name?: string;
  services: Record<string, ComposeService>;
}

const TOP_KEYS = new Set(["name", "services", "version"]);
const SERVICE_KEYS = new Set([
  "image",
  "environment",
  "env_file",
  "ports",
  "labels",
  "healthcheck",
  "command",
  "volumes",
  "depends_on",
  "mem_limit",
  "pids_limit",
]);
const HEALTH_KEYS = new Set(["test", "interval", "timeout", "retries"]);
const SERVICE_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

/** `repo@sha256:<64 hex>` (a registry's digest) or `sha256:<64 hex>` (a local image id). */
const PINNED = /^(?:[a-z0-9][a-z0-9._:/-]*@)?sha256:[0-9a-f]{64}$/;

/** True when an image reference names one image for good: by digest, or by a local image id. */
export function isPinned(image: string): boolean {
  return PINNED.test(image);
}

/** The `sha256:<hex>` part of a pinned reference. */
export function digestOf(image: string): string | undefined {
  const i = image.lastIndexOf("sha256:");
  return isPinned(image) ? image.slice(i) : undefined;
}

class Refusal {
  readonly details: ErrorDetail[] = [];
  add(path: string, message: string): void {
    if (this.details.length < 20) this.details.push({ path, message });
  }
}

type Plain = Record<string, unknown>;
const isMap = (v: unknown): v is Plain => typeof v === "object" && v !== null && !Array.isArray(v);

function scalar(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  return undefined;
}

function stringList(v: unknown, at: string, r: Refusal, splitString = false): string[] {
  if (v === undefined || v === null) return [];
  if (typeof v === "string") return splitString ? v.split(/\s+/).filter(Boolean) : [v];
  if (!Array.isArray(v)) {
    r.add(at, "must be a list of strings");
    return [];
  }
  const out: string[] = [];
  v.forEach((x, i) => {
    const s = scalar(x);
    if (s === undefined) r.add(`${at}/${i}`, "must be a string");
    else out.push(s);
  });
  return out;
}

/** `KEY: value` maps and `- KEY=value` lists, both accepted (as compose does). */
function stringMap(v: unknown, at: string, r: Refusal, names?: RegExp): Record<string, string> {
  const out: Record<string, string> = {};
  if (v === undefined || v === null) return out;
  const put = (k: string, val: string, path: string) => {
    if (names && !names.test(k)) r.add(path, `${JSON.stringify(k)} is not a valid name`);
    else out[k] = val;
  };
  if (Array.isArray(v)) {
    v.forEach((x, i) => {
      const s = scalar(x);
      const eq = s?.indexOf("=") ?? -1;
      if (s === undefined || eq <= 0) r.add(`${at}/${i}`, "must be KEY=value");
      else put(s.slice(0, eq), s.slice(eq + 1), `${at}/${i}`);
    });
  } else if (isMap(v)) {
    for (const [k, x] of Object.entries(v)) {
      const s = x === null ? "" : scalar(x);
      if (s === undefined) r.add(`${at}/${k}`, "must be a string, number or boolean");
      else put(k, s, `${at}/${k}`);
    }
  } else r.add(at, "must be a map or a list of KEY=value");
  return out;
}

function service(name: string, v: unknown, r: Refusal): ComposeService | undefined {
  const at = `/services/${name}`;
  if (!SERVICE_NAME.test(name)) r.add(at, "service names are lower-case letters, digits, - and _");
  if (!isMap(v)) {
    r.add(at, "must be a map");
    return undefined;
  }
  for (const k of Object.keys(v))
    if (!SERVICE_KEYS.has(k))
      r.add(
        `${at}/${k}`,
        `${k} is outside the compose subset the platform honours (${[...SERVICE_KEYS].join(", ")})`,
      );
  const s: ComposeService = {
    name,
    environment: stringMap(v.environment, `${at}/environment`, r, ENV_NAME),
    env_file: stringList(v.env_file, `${at}/env_file`, r),
    ports: stringList(v.ports, `${at}/ports`, r),
    labels: stringMap(v.labels, `${at}/labels`, r),
    volumes: stringList(v.volumes, `${at}/volumes`, r),
    depends_on: isMap(v.depends_on)
      ? Object.keys(v.depends_on)
      : stringList(v.depends_on, `${at}/depends_on`, r),
  };
  if (v.image !== undefined) {
    if (typeof v.image !== "string" || v.image === "") r.add(`${at}/image`, "must be an image reference");
    else s.image = v.image;
  }
  if (v.command !== undefined) s.command = stringList(v.command, `${at}/command`, r, true);
  if (v.mem_limit !== undefined) {
    const mb =
      typeof v.mem_limit === "string" || typeof v.mem_limit === "number"
        ? parseMemoryLimit(v.mem_limit)
        : undefined;
    if (mb === undefined) r.add(`${at}/mem_limit`, "must be a size of at least 6m, e.g. 512m or 1g");
    else s.mem_limit_mb = mb;
  }
  if (v.pids_limit !== undefined) {
    if (typeof v.pids_limit !== "number" || !Number.isInteger(v.pids_limit) || v.pids_limit < 16)
      r.add(`${at}/pids_limit`, "must be a whole number of at least 16");
    else s.pids_limit = v.pids_limit;
  }
  for (const p of s.ports)
    if (!/^(\d{1,5}:)?\d{1,5}$/.test(p))
      r.add(`${at}/ports`, `${JSON.stringify(p)}: ports are "<port>" or "<host>:<container>"`);
  if (v.healthcheck !== undefined) {
    const h = v.healthcheck;
    if (!isMap(h)) r.add(`${at}/healthcheck`, "must be a map");
    else {
      for (const k of Object.keys(h))
        if (!HEALTH_KEYS.has(k)) r.add(`${at}/healthcheck/${k}`, `${k} is outside the compose subset`);
      const test = stringList(h.test, `${at}/healthcheck/test`, r, true);
      s.healthcheck = {
        test,
        ...(typeof h.interval === "string" ? { interval: h.interval } : {}),
        ...(typeof h.timeout === "string" ? { timeout: h.timeout } : {}),
        ...(typeof h.retries === "number" ? { retries: h.retries } : {}),
      };
    }
  }
  return s;
}

/**
 * Reads a compose file of the subset. Throws `invalid_input` (400) naming each
 * problem: YAML that does not parse, a key outside the subset, a value of the
 * wrong shape, a `depends_on` naming no service.
 */
export function parseCompose(text: string, file: string): ComposeFile {
  const doc = parseDocument(text, { prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0)
    throw new PlatformError(
      "invalid_input",
      `${file} is not valid YAML: ${doc.errors[0]!.message.split("\n")[0]}`,
    );
  let root: unknown;
  try {
    root = doc.toJS({ maxAliasCount: 50 });
  } catch (e) {
    // an alias bomb ("Excessive alias count ...") or a cycle: the file is refused, as bad YAML is
    const why = e instanceof Error ? e.message.split("\n")[0]!.slice(0, 200) : "it cannot be read";
    throw new PlatformError("invalid_input", `${file} is not a compose file the platform reads: ${why}`, {
      details: [{ path: "", message: why }],
    });
  }
  const r = new Refusal();
  if (!isMap(root))
    throw new PlatformError("invalid_input", `${file}: the top level must be a map with services`);
  for (const k of Object.keys(root))
    if (!TOP_KEYS.has(k))
      r.add(`/${k}`, `${k} is outside the compose subset the platform honours (name, services)`);
  const services: Record<string, ComposeService> = {};
  if (!isMap(root.services)) r.add("/services", "must be a map of services");
  else
    for (const [name, v] of Object.entries(root.services)) {
      const s = service(name, v, r);
      if (s) services[name] = s;
    }
  for (const s of Object.values(services))
    for (const d of s.depends_on)
      if (!services[d]) r.add(`/services/${s.name}/depends_on`, `no service ${d}`);
  if (r.details.length > 0)
    throw new PlatformError(
      "invalid_input",
      `${file}: ${r.details.map((d) => `${d.path}: ${d.message}`).join("; ")}`,
      { details: r.details },
    );
  return { ...(typeof root.name === "string" ? { name: root.name } : {}), services };
}
