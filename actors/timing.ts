/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Waits for `p` at most `ms`; the timer never outlives the wait. */
export async function within(p: Promise<unknown>, ms: number): Promise<void> {
  let t: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise<void>((r) => (t = setTimeout(r, ms)))]);
  clearTimeout(t);
}
