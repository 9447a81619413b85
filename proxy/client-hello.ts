/**
 * The server name (SNI) of a TLS ClientHello, read from the first bytes of a connection before the
 * handshake starts, so the proxy can choose how to handshake (with or without asking for a client
 * certificate) by host. RFC 8446 §4.1.2 and RFC 6066 §3.
 */

/** The bytes so far do not hold the whole ClientHello record yet. */
export const INCOMPLETE = Symbol("incomplete");

/** The largest record a ClientHello comes in (a TLS record's limit, plus its 5-byte header). */
export const MAX_HELLO_BYTES = 16_384 + 5;

/**
 * The host name a ClientHello asks for (lower-case); undefined when the bytes are no ClientHello
 * or it names none; {@link INCOMPLETE} when more bytes are needed.
 */
export function serverNameOf(b: Buffer): string | undefined | typeof INCOMPLETE {
  if (b.length < 5) return INCOMPLETE;
  if (b[0] !== 0x16) return undefined; // not a handshake record
  const recordLength = b.readUInt16BE(3);
  if (b.length < 5 + recordLength) return INCOMPLETE;
  const end = 5 + recordLength;
  let p = 5;
  if (b[p] !== 0x01) return undefined; // not a ClientHello
  p += 4; // type, 3-byte length
  p += 2 + 32; // legacy version, random
  if (p + 1 > end) return undefined;
  p += 1 + b[p]!; // session id
  if (p + 2 > end) return undefined;
  p += 2 + b.readUInt16BE(p); // cipher suites
  if (p + 1 > end) return undefined;
  p += 1 + b[p]!; // compression methods
  if (p + 2 > end) return undefined;
  const extEnd = Math.min(end, p + 2 + b.readUInt16BE(p));
  p += 2;
  while (p + 4 <= extEnd) {
    const type = b.readUInt16BE(p);
    const len = b.readUInt16BE(p + 2);
    p += 4;
    if (p + len > extEnd) return undefined;
    if (type === 0x0000) return firstHostName(b.subarray(p, p + len));
    p += len;
  }
  return undefined;
}

/** The first `host_name` entry of a server_name extension's body. */
function firstHostName(ext: Buffer): string | undefined {
  if (ext.length < 2) return undefined;
  const listEnd = Math.min(ext.length, 2 + ext.readUInt16BE(0));
  let p = 2;
  while (p + 3 <= listEnd) {
    const kind = ext[p]!;
    const len = ext.readUInt16BE(p + 1);
    p += 3;
    if (p + len > listEnd) return undefined;
    if (kind === 0)
      return ext
        .subarray(p, p + len)
        .toString("latin1")
        .toLowerCase();
    p += len;
  }
  return undefined;
}
