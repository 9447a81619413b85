import { type CliWriter, writeChunk } from "./io.js";

/** How often the progress line is redrawn on a terminal. */
const REDRAW_MS = 1000;

/** `7s`, `1m05s`, `2h03m09s`. */
export function elapsedText(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const two = (n: number) => String(n).padStart(2, "0");
  if (h > 0) return `${h}h${two(m)}m${two(s)}s`;
  if (m > 0) return `${m}m${two(s)}s`;
  return `${s}s`;
}

/**
 * What the client writes on stderr while it waits for long work: log lines,
 * notes (stream dropped, polling), and on a terminal one progress line
 * (`... Build bld_1 running 12s`) that is redrawn below the log and erased at
 * the end. Off a terminal there is no progress line and notes are written only
 * when `noteLines` is true (the user asked for the log).
 */
export class WaitProgress {
  private timer: ReturnType<typeof setInterval> | undefined;
  private status = "running";
  /** Current notes by topic (`poll`, `log`); the line shows the non-empty ones. */
  private readonly notes = new Map<string, string>();
  private drawn = false;
  private stopped = false;

  constructor(
    private readonly out: CliWriter,
    private readonly label: string,
    private readonly startedAt: number,
    /** Draw the progress line (stderr is a terminal). */
    private readonly tty: boolean,
    /** Write notes as lines when not on a terminal. */
    private readonly noteLines: boolean,
  ) {}

  /** Draws the line and starts redrawing it every second (terminal only). */
  start(): void {
    if (!this.tty) return;
    this.draw();
    this.timer = setInterval(() => this.draw(), REDRAW_MS);
    this.timer.unref?.();
  }

  /** The resource's status as last read. */
  setStatus(status: string): void {
    if (status === this.status) return;
    this.status = status;
    if (this.tty) this.draw();
  }

  /**
   * Sets the note of a topic (`log stream dropped, reconnecting`); an empty
   * string clears it. On a terminal notes are part of the progress line;
   * otherwise a new note is written as one line (when note lines are on).
   */
  setNote(topic: string, note: string): void {
    const before = this.notes.get(topic) ?? "";
    if (note === before) return;
    this.notes.set(topic, note);
    if (this.tty) this.draw();
    else if (this.noteLines && note !== "" && !this.stopped) this.out.write(`slipway: ${note}\n`);
  }

  /** Writes one log line (with its newline) above the progress line. */
  async log(line: string): Promise<void> {
    if (this.stopped) return;
    this.clear();
    await writeChunk(this.out, line);
    if (this.tty) this.draw();
  }

  /** Stops redrawing and erases the line. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.clear();
  }

  private text(): string {
    const parts = [`... ${this.label} ${this.status} ${elapsedText(Date.now() - this.startedAt)}`];
    for (const note of this.notes.values()) if (note !== "") parts.push(note);
    parts.push("Ctrl-C detaches");
    const line = parts.join(" - ");
    const width = this.out.columns;
    return width !== undefined && width > 1 && line.length >= width ? line.slice(0, width - 1) : line;
  }

  private draw(): void {
    if (this.stopped) return;
    this.out.write(`\r\x1b[2K${this.text()}`);
    this.drawn = true;
  }

  private clear(): void {
    if (!this.drawn) return;
    this.out.write("\r\x1b[2K");
    this.drawn = false;
  }
}
