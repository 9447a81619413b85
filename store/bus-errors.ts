import { JetStreamApiCodes, JetStreamApiError, JetStreamError } from "@nats-io/jetstream";
import {
  ClosedConnectionError,
  ConnectionError,
  DrainingConnectionError,
  NoRespondersError,
  RequestError,
  TimeoutError,
} from "@nats-io/transport-node";
import { PlatformError } from "../proto/mod.js";

/**
 * The NATS client's errors, recognised by their classes and JetStream API
 * codes (as the KV client itself does in `create`), never by message text.
 */

/**
 * True when a compare-and-set lost: a KV `update` on a revision that is no
 * longer the key's, or a `create` of a key that exists (JetStream's "wrong last
 * sequence"). Another writer moved the key; the caller re-reads or gives up.
 */
export function isCasConflict(e: unknown): boolean {
  return (
    e instanceof JetStreamApiError &&
    (e.code === JetStreamApiCodes.StreamWrongLastSequence ||
      e.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

const TRANSIENT: readonly (abstract new (...args: never[]) => Error)[] = [
  TimeoutError,
  ClosedConnectionError,
  ConnectionError,
  DrainingConnectionError,
  NoRespondersError,
  RequestError,
];

/** True for an error of the NATS client that a retry after reconnecting may cure. */
export function isTransientBusError(e: unknown): boolean {
  if (!(e instanceof Error) || e instanceof PlatformError) return false;
  if (isCasConflict(e)) return false;
  if (TRANSIENT.some((c) => e instanceof c)) return true;
  // JetStream not (yet) enabled after a server restart, or not available for a moment (HTTP-like 503)
  if (e.name === "JetStreamNotEnabled") return true;
  if (e instanceof JetStreamApiError)
    return e.code === JetStreamApiCodes.JetStreamNotEnabledForAccount || e.status === 503;
  return e instanceof JetStreamError;
}

/** The one 503 a process answers while its bus is away. */
export function busUnavailable(): PlatformError {
  return new PlatformError("bus_unavailable", "the platform bus is unavailable; retry shortly");
}
