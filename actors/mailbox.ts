/** One unit of work in a mailbox. */
export interface Queued {
  run: () => Promise<void>;
}

/** Per-app mailbox: runs one command at a time, in arrival order. */
export class Mailbox {
  private readonly queue: Queued[] = [];
  private running = false;
  /** Resolves when the mailbox has nothing left to run. */
  idle: Promise<void> = Promise.resolve();
  private resolveIdle: (() => void) | undefined;

  push(q: Queued): void {
    this.queue.push(q);
    if (!this.running) {
      this.running = true;
      this.idle = new Promise((r) => {
        this.resolveIdle = r;
      });
      void this.drain();
    }
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const q = this.queue.shift()!;
      await q.run();
    }
    this.running = false;
    this.resolveIdle?.();
  }
}
