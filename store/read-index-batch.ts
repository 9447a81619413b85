/**
 * The read index's helpers for its feeds (store/read-index.ts): a bounded map of recent entries and
 * the queue that writes a feed's entries many to a LevelDB batch.
 */

/**
 * A bounded map of recent entries: the newest `half` and up to `half` before them. Dropping the
 * older half at once costs nothing per entry, where dropping a Map's first key each time scans
 * the holes its earlier deletions left (quadratic: seconds over a rebuild's million events).
 */
export class Recent<V> {
  private young = new Map<string, V>();
  private old = new Map<string, V>();
  constructor(private readonly half: number) {}

  get(key: string): V | undefined {
    return this.young.has(key) ? this.young.get(key) : this.old.get(key);
  }

  has(key: string): boolean {
    return this.young.has(key) || this.old.has(key);
  }

  clear(): void {
    this.young = new Map();
    this.old = new Map();
  }

  set(key: string, value: V): void {
    this.old.delete(key);
    this.young.set(key, value);
    if (this.young.size >= this.half) {
      this.old = this.young;
      this.young = new Map();
    }
  }
}

/** Most feed entries a rebuild holds in memory waiting for their write (the feed waits beyond). */
const QUEUE_MAX = 10_000;

/**
 * A feed's entries waiting for their write, applied many to one LevelDB batch: while a batch is
 * written the next one gathers, so a rebuild (thousands of entries a second) writes in few large
 * batches and a quiet feed still writes each entry at once.
 */
export class Batcher<T> {
  private queue: T[] = [];
  private running: Promise<void> | undefined;
  /** Called after each batch, written or failed (the feed's position moves past it). */
  onWritten: (items: T[]) => void = () => {};
  constructor(
    private readonly apply: (items: T[]) => Promise<void>,
    private readonly failed: (e: unknown) => void,
  ) {}

  /** Queues an entry; resolves at once, unless {@link QUEUE_MAX} wait (then once they are written). */
  push(item: T): Promise<void> | undefined {
    this.queue.push(item);
    this.running ??= this.drain();
    return this.queue.length >= QUEUE_MAX ? this.running : undefined;
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const items = this.queue;
      this.queue = [];
      try {
        await this.apply(items);
      } catch (e) {
        this.failed(e);
      }
      this.onWritten(items);
    }
    this.running = undefined;
  }

  /** Resolves once every queued entry is written. */
  idle(): Promise<void> {
    return this.running ?? Promise.resolve();
  }
}
