/**
 * A process that starts an embedded nats-server and waits, for tests that kill -9 it.
 * argv: <death signal: setpriv|watchdog|none> <data dir> <port>. Prints `PID <server pid>` when the
 * server listens.
 */
import { startEmbeddedNats, type DeathSignal } from "../../store/embedded-nats.js";

const [mode, dir, port] = process.argv.slice(2);
const nats = await startEmbeddedNats({ dir: dir!, port: Number(port), deathSignal: mode as DeathSignal });
process.stdout.write(`PID ${nats.pid}\n`);
process.on("SIGTERM", () => void nats.stop().then(() => process.exit(0)));
setInterval(() => {}, 60_000);
