#!/usr/bin/env node
// Only light modules are imported up front: `slipwayd up` starts the embedded nats-server first and
// loads the platform's code (about a second) while the server starts; the rest comes by import().
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { optionsFromEnv, PROXY_DEFAULT_PORTS } from "./options.js";
import type { PlatformHandle } from "./platform.js";
import { DEFAULT_PORTS, PLATFORM_MODEL } from "../proto/mod.js";
import type { Bus } from "../store/mod.js";
// biome-ignore lint/style/noRestrictedImports: only the nats-server launcher up front; store/mod.js (NATS client, LevelDB) loads while the server starts
import { natsRefusalLog, startEmbeddedNats, type EmbeddedNats } from "../store/embedded-nats.js";

const USAGE = `slipwayd: the Slipway platform (model ${PLATFORM_MODEL})

usage:
  slipwayd up                          embedded nats-server (:${DEFAULT_PORTS.nats}), control (:${DEFAULT_PORTS.control}) and data (:${DEFAULT_PORTS.data}) gateways, the edge proxy (:${PROXY_DEFAULT_PORTS.http}, :${PROXY_DEFAULT_PORTS.https}), one runtime node
  slipwayd gateway --plane control|data one gateway (needs NATS_URL)
  slipwayd node                         one runtime node (needs NATS_URL)
  slipwayd proxy                        the edge proxy only: app traffic by host (needs NATS_URL)
  slipwayd vault rotate                 new active vault key; re-seal every secret under it

environment:
  SLIPWAY_DATA_DIR (./.slipway)  SLIPWAY_WORKSPACE (<data>/apps)  NATS_URL (no embedded server)
  SLIPWAY_NATS_CREDS (with NATS_URL: a .creds or nkey seed file; or nats://user:pass@host in NATS_URL)
  SLIPWAY_NATS_INSECURE=1 (start even when the NATS_URL server accepts clients without credentials)
  SLIPWAY_NATS_ORDERED=1 (try the NATS_URL servers in their order, never shuffled: list this host's own first)
  SLIPWAY_REPLICAS (1; 3 in a NATS cluster: replicas of every stream and bucket, docs/cluster.md)
  SLIPWAY_CONTROL_HOST/PORT  SLIPWAY_DATA_HOST/PORT  SLIPWAY_NATS_PORT  SLIPWAY_VAULT_KEY  SLIPWAY_CONTROL_TOKEN
  SLIPWAY_NODE_ID (up: <data>/node.id)  SLIPWAY_ALLOWED_HOSTS  SLIPWAY_ALLOWED_ORIGINS
  SLIPWAY_TAILS_PER_TOKEN (32)  SLIPWAY_JOB_QUOTA (100)  SLIPWAY_JOB_TIMEOUT_MS (30000)
  proxy: SLIPWAY_HTTP_PORT (${PROXY_DEFAULT_PORTS.http})  SLIPWAY_HTTPS_PORT (${PROXY_DEFAULT_PORTS.https})  SLIPWAY_PROXY_HOST (127.0.0.1)  SLIPWAY_PROXY_ID
         SLIPWAY_PUBLIC_HTTPS_PORT  SLIPWAY_TRUSTED_PROXIES  SLIPWAY_ACME_CA_FILE  SLIPWAY_ACME_EMAIL
         SLIPWAY_PROXY_ADVERTISE_HTTP/HTTPS (host:port others reach it at, when not the listen address)
`;

/** Errors whose message says what to do: printed as one line, without a stack trace. */
const PLAIN_ERRORS = new Set([
  "NatsServerMissingError",
  "NatsServerStartError",
  "PortInUseError",
  "BusFeatureError",
  "OptionError",
  "VaultKeyMismatchError",
  "ControlTokenError",
  "BridgeAddressError",
  "NatsInsecureError",
  "NatsCredentialsError",
  "NatsIdentityError",
]);

/** The addresses a gateway listens on for app containers (besides the first, its own), as a note. */
function forContainers(hosts: readonly string[]): string {
  return hosts.length > 1 ? ` (and ${hosts.slice(1).join(", ")} for app containers)` : "";
}

function fail(msg: string, code = 1): never {
  process.stderr.write(`slipwayd: ${msg}\n`);
  process.exit(code);
}

const note = (m: string) => process.stderr.write(`slipwayd: ${m}\n`);

async function run(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { plane: { type: "string" }, help: { type: "boolean", short: "h" } },
  });
  const [cmd, sub] = positionals;
  if (values.help || !cmd) {
    process.stdout.write(USAGE);
    return;
  }
  const base = optionsFromEnv();
  if (cmd === "vault") {
    if (sub !== "rotate") fail(`unknown vault command ${sub ?? ""}; try: slipwayd vault rotate`, 2);
    const dataDir = resolve(base.dataDir ?? ".slipway");
    const store = await import("../store/mod.js");
    const { openBus, addKeyToFile, agreeOnVaultKey, Vault, resealAll } = store;
    // With SLIPWAY_VAULT_KEY the keys live in the environment: put the new key first in that list
    // (old ones after it), restart the processes, then run this to re-seal under it.
    const fromEnv = Boolean(process.env.SLIPWAY_VAULT_KEY);
    if (fromEnv) note("keys come from SLIPWAY_VAULT_KEY; re-sealing under its first key");
    let embedded: EmbeddedNats | undefined;
    let bus: Bus;
    if (base.natsUrl) {
      await store.refuseInsecureNats(base.natsUrl);
      const auth = store.natsAuthFromEnv(base.natsUrl);
      bus = await openBus({ servers: base.natsUrl, name: "slipwayd-vault", auth, replicas: base.replicas });
    } else {
      // the embedded server of a running `up` on this data dir, as the admin; else one of our own
      const port = base.natsPort ?? DEFAULT_PORTS.nats;
      try {
        const auth = store.roleAuth(dataDir, "admin");
        bus = await openBus({
          servers: `nats://127.0.0.1:${port}`,
          name: "slipwayd-vault",
          auth,
          replicas: base.replicas,
        });
      } catch {
        embedded = await startEmbeddedNats({ dir: dataDir, port, note, log: natsRefusalLog(note) });
        bus = await openBus({
          servers: embedded.url,
          name: "slipwayd-vault",
          auth: embedded.auth("admin"),
          replicas: base.replicas,
        });
      }
    }
    try {
      // this process's keys must be the deployment's before a new key joins them
      await agreeOnVaultKey(bus.kv.meta, Vault.open(dataDir));
      const kid = fromEnv ? Vault.open(dataDir).activeKeyId : addKeyToFile(dataDir);
      const report = await resealAll(bus, Vault.open(dataDir));
      process.stdout.write(`${JSON.stringify({ active_key_id: kid, ...report })}\n`);
      if (report.tampered.length) process.exitCode = 1;
    } finally {
      await bus.close();
      await embedded?.stop();
    }
    return;
  }
  if (cmd !== "up" && cmd !== "gateway" && cmd !== "node" && cmd !== "proxy")
    fail(`unknown command ${cmd}\n${USAGE}`, 2);
  if (cmd === "gateway" && values.plane !== "control" && values.plane !== "data")
    fail("gateway needs --plane control or --plane data", 2);
  if (cmd !== "up" && !base.natsUrl)
    fail(`${cmd} needs NATS_URL (the embedded server runs only with slipwayd up)`, 2);
  // up: the embedded server starts while the platform's code loads. "ready in" counts from the
  // moment the code is loaded, as it did when it was imported up front.
  let t0 = Date.now();
  const loading = import("./platform.js").then((m) => {
    t0 = Date.now();
    return m;
  });
  let embedded: EmbeddedNats | undefined;
  if (cmd === "up" && !base.natsUrl) {
    const [nats] = await Promise.allSettled([
      startEmbeddedNats({
        dir: resolve(base.dataDir ?? ".slipway"),
        port: base.natsPort ?? DEFAULT_PORTS.nats,
        note,
        log: natsRefusalLog(note),
      }),
      loading,
    ]);
    if (nats.status === "rejected") throw nats.reason;
    embedded = nats.value;
  }
  let handle: PlatformHandle;
  try {
    const { startPlatform } = await loading;
    handle = await startPlatform({
      ...base,
      role: cmd,
      ...(cmd === "gateway" ? { plane: values.plane as "control" | "data" } : {}),
      ...(embedded ? { embeddedNats: embedded } : {}),
    });
  } catch (e) {
    await embedded?.stop(); // startPlatform stops it too; stop() is idempotent
    throw e;
  }
  const parts = [
    handle.nats ? `nats ${handle.natsUrl}` : `nats ${handle.natsUrl} (external)`,
    handle.control
      ? `control http://127.0.0.1:${handle.control.port}${forContainers(handle.control.hosts)}`
      : "",
    handle.data ? `data http://127.0.0.1:${handle.data.port}${forContainers(handle.data.hosts)}` : "",
    handle.proxy
      ? `proxy http://${base.proxyHost ?? "127.0.0.1"}:${handle.proxy.httpPort} https://${base.proxyHost ?? "127.0.0.1"}:${handle.proxy.httpsPort}`
      : "",
    handle.node ? `node ${handle.node.nodeId}` : "",
  ].filter(Boolean);
  process.stdout.write(
    `slipwayd ${cmd} ready in ${Date.now() - t0} ms: ${parts.join(", ")} (data dir ${handle.dataDir})\n`,
  );
  let stopping = false;
  const stop = async (sig: string) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`slipwayd: ${sig}, shutting down\n`);
    const t = setTimeout(() => process.exit(1), 15_000);
    await handle.close();
    clearTimeout(t);
    process.exit(0);
  };
  // a promise nobody awaited that failed is a bug to log, never a reason to stop serving every app
  process.on("unhandledRejection", (reason) =>
    note(
      `unhandled rejection (logged, still serving): ${reason instanceof Error ? reason.stack : String(reason)}`,
    ),
  );
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
}

run(process.argv.slice(2)).catch((e) => {
  if (e instanceof Error && PLAIN_ERRORS.has(e.name)) fail(e.message);
  if (e && typeof e === "object" && "code" in e && (e as { code: unknown }).code === "ECONNREFUSED")
    fail(`cannot reach NATS: ${String((e as Error).message)}`);
  fail(e instanceof Error ? e.message : String(e));
});
