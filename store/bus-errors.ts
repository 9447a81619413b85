/** Names of the NATS client errors that mean "the bus is (briefly) not there", worth a retry. */
const TRANSIENT = new Set([
  "TimeoutError",
  "ClosedConnectionError",
  "ConnectionError",
  "DrainingConnectionError",
  "NoRespondersError",
  "RequestError",
  "JetStreamNotEnabled",
  "JetStreamError",
  "JetStreamStatusError",
]);

/** True for an error of the NATS client that a retry after reconnecting may cure. */
export function isTransientBusError(e: unknown): boolean {
  if (!(e instanceof Error) || e.name === "PlatformError" || e.name === "CodecError") return false;
  if (TRANSIENT.has(e.name) || TRANSIENT.has(e.constructor?.name ?? "")) return true;
  return /^(timeout|disconnected|connection closed|no responders|jetstream is not enabled)/i.test(e.message);
}
