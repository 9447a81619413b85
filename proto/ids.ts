import { randomBytesPooled } from "./random.js";

/**
 * Time-sortable identifiers (ULID layout: 48-bit millisecond time + 80 random
 * bits, Crockford base32), monotonic within one process.
 */
const ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
let lastTime = 0;
let lastRandom = Buffer.alloc(10);

function encodeTime(t: number): string {
  let out = "";
  for (let i = 9; i >= 0; i--) {
    const mod = t % 32;
    out = ALPHABET[mod] + out;
    t = (t - mod) / 32;
  }
  return out;
}

function encodeRandom(b: Buffer): string {
  let out = "";
  let bits = 0;
  let value = 0;
  for (const byte of b) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return out;
}

/** A new ULID (26 chars). */
export function ulid(now = Date.now()): string {
  if (now <= lastTime) {
    now = lastTime;
    // increment the random part so ids stay strictly increasing
    const r = Buffer.from(lastRandom);
    for (let i = r.length - 1; i >= 0; i--) {
      if (r[i]! < 255) {
        r[i]! += 1;
        break;
      }
      r[i] = 0;
    }
    lastRandom = r;
  } else {
    lastTime = now;
    lastRandom = randomBytesPooled(10);
  }
  return encodeTime(now) + encodeRandom(lastRandom);
}

/** A prefixed id such as `sec_01J...`. Prefixes keep ids readable in logs. */
export function newId(prefix: string): string {
  return `${prefix}_${ulid()}`;
}

/** Millisecond time encoded in an id made by `newId`/`ulid`. */
export function timeOfId(id: string): number {
  const u = id.includes("_") ? id.slice(id.lastIndexOf("_") + 1) : id;
  let t = 0;
  for (const ch of u.slice(0, 10)) t = t * 32 + ALPHABET.indexOf(ch);
  return t;
}

const PREFIX: Record<string, string> = {
  Application: "app",
  Secret: "sec",
  Inspection: "ins",
  Environment: "env",
  DependencyInstall: "dep",
  DevServer: "dev",
  Build: "bld",
  TestRun: "tst",
  CheckRun: "chk",
  Verification: "vfy",
  Analysis: "ana",
  Plan: "pln",
  ScheduledJob: "job",
  Deployment: "dpl",
  ProductionArtifacts: "prd",
  Release: "rel",
  AgentTask: "agt",
  Artifact: "art",
  EmailDelivery: "eml",
  ObservabilityStack: "obs",
  MonitoringStack: "mon",
  EvalRun: "evl",
  DeliveryCheckRun: "dcr",
  Incident: "inc",
  User: "usr",
  Session: "ses",
  LoginThrottle: "thr",
  UserEmail: "uem",
  Group: "grp",
  AppOwnership: "own",
  McpRegistry: "mcp",
  PolicySet: "pol",
  Approval: "apr",
};

/** A new resource id for a resource type. */
export function newResourceId(type: string): string {
  return newId(PREFIX[type] ?? "res");
}

const TYPE_OF_PREFIX = new Map(Object.entries(PREFIX).map(([type, prefix]) => [prefix, type]));

/**
 * The resource type an id was made for, from its prefix (`mon_...`: MonitoringStack), or `other`
 * for an id of no known prefix: a bounded set (the log shipper's `resource_type` label).
 */
export function resourceTypeOfId(id: string): string {
  const i = id.indexOf("_");
  return (i > 0 ? TYPE_OF_PREFIX.get(id.slice(0, i)) : undefined) ?? "other";
}
