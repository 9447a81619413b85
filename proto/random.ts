import { randomFillSync } from "node:crypto";

/*
 * Random bytes from a pool refilled 4 KiB at a time. `randomBytes(12)` costs a
 * call into OpenSSL each time: about 40 µs on the benchmark machine, for every
 * id and every seal, on the gateways' and the node's event loops
 * (docs/performance.md). The pool is filled by the same CSPRNG; bytes are
 * handed out once and never reused.
 */
const POOL_BYTES = 4096;
let pool = Buffer.allocUnsafe(0);
let used = 0;

/** `n` (at most 4096) fresh random bytes in a buffer of their own. */
export function randomBytesPooled(n: number): Buffer<ArrayBuffer> {
  if (n > POOL_BYTES) throw new RangeError(`at most ${POOL_BYTES} bytes`);
  if (used + n > pool.length) {
    pool = randomFillSync(Buffer.allocUnsafe(POOL_BYTES));
    used = 0;
  }
  const out = Buffer.alloc(n);
  pool.copy(out, 0, used, used + n);
  pool.fill(0, used, used + n);
  used += n;
  return out;
}
