/**
 * The counters, gauges and histograms of effects/metrics.ts, and their Prometheus text (format
 * 0.0.4). Small and fast on purpose: a scrape with 1,000 apps' worth of series (the proxy's
 * per-route histograms: about 24,000 lines) took 140 to 400 ms with prom-client's own metric
 * classes, over the 20 ms target; here each series keeps its label text, made once, and its
 * values in a flat array (docs/metrics.md, "Cost"). prom-client still gives the process's own
 * figures (CPU, memory, handles, GC).
 */

/** A metric's series as another thread sends them ({@link MetricFamily.toJSON}), summed on merge. */
export interface FamilyJson {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram";
  buckets?: number[];
  series: { labels: string; values: number[] }[];
}

/** Escapes a label value (backslash, double quote, newline). */
function escapeLabel(v: string): string {
  return /["\\\n]/.test(v) ? v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n") : v;
}

/** A number as Prometheus writes it. */
function num(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Number.POSITIVE_INFINITY) return "+Inf";
  if (v === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(v);
}

let enabled = true;
/** Turns every instrument's recording off (`SLIPWAY_METRICS=off`, for the benchmark's comparison). */
export function disableRecording(): void {
  enabled = false;
}

interface Series {
  /** `a="x",b="y"` (empty without labels). */
  text: string;
  labels: Record<string, string>;
  /** Counter and gauge: [value]; histogram: per-bucket counts (not cumulative), then +Inf, sum. */
  values: number[];
  /** Its lines as last written, and whether a value changed since (then they are written again). */
  lines: string;
  dirty: boolean;
}

export abstract class MetricFamily<L extends string = string> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly L[];
  abstract readonly type: FamilyJson["type"];
  protected readonly series = new Map<string, Series>();
  /** Called before the family is read (a gauge sets its value from its sources). */
  collect: (() => void) | undefined;

  constructor(o: { name: string; help: string; labelNames?: readonly L[]; collect?: () => void }) {
    this.name = o.name;
    this.help = o.help;
    this.labelNames = o.labelNames ?? [];
    this.collect = o.collect;
  }

  protected abstract width(): number;

  protected get(labels: Partial<Record<L, string>> | undefined): Series {
    const names = this.labelNames;
    let key = "";
    for (let i = 0; i < names.length; i++) key += `${labels?.[names[i]!] ?? ""}\u0001`;
    let s = this.series.get(key);
    if (!s) {
      const own: Record<string, string> = {};
      let text = "";
      for (const n of names) {
        const v = labels?.[n] ?? "";
        own[n] = v;
        text += `${text ? "," : ""}${n}="${escapeLabel(v)}"`;
      }
      s = { text, labels: own, values: new Array<number>(this.width()).fill(0), lines: "", dirty: true };
      this.series.set(key, s);
    }
    return s;
  }

  /** Drops the series whose labels `drop` says so. */
  removeWhere(drop: (labels: Readonly<Record<string, string>>) => boolean): void {
    for (const [k, s] of this.series) if (drop(s.labels)) this.series.delete(k);
  }

  /** Whether the family has any series (a family without is left out of a merge). */
  get empty(): boolean {
    return this.series.size === 0;
  }

  /** The family's Prometheus text: only the series that changed since the last one are written again. */
  render(): string {
    this.collect?.();
    let out = header(this.name, this.help, this.type);
    for (const s of this.series.values()) {
      if (s.dirty) {
        s.lines = this.lines(s.text, s.values);
        s.dirty = false;
      }
      out += s.lines;
    }
    return out;
  }

  protected lines(labels: string, values: readonly number[]): string {
    return `${this.name}${labels ? `{${labels}}` : ""} ${num(values[0] ?? 0)}\n`;
  }

  toJSON(): FamilyJson {
    this.collect?.();
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      ...(this instanceof Histogram ? { buckets: [...this.buckets] } : {}),
      series: [...this.series.values()].map((s) => ({ labels: s.text, values: [...s.values] })),
    };
  }
}

export class Counter<L extends string = string> extends MetricFamily<L> {
  readonly type = "counter" as const;
  protected width(): number {
    return 1;
  }
  inc(labels?: Partial<Record<L, string>>, by = 1): void {
    if (!enabled) return;
    const s = this.get(labels);
    s.values[0]! += by;
    s.dirty = true;
  }
}

export class Gauge<L extends string = string> extends MetricFamily<L> {
  readonly type = "gauge" as const;
  protected width(): number {
    return 1;
  }
  set(labels: Partial<Record<L, string>> | undefined, value: number): void {
    const s = this.get(labels);
    if (s.values[0] !== value) {
      s.values[0] = value;
      s.dirty = true;
    }
  }
}

export class Histogram<L extends string = string> extends MetricFamily<L> {
  readonly type = "histogram" as const;
  readonly buckets: readonly number[];
  constructor(o: { name: string; help: string; labelNames?: readonly L[]; buckets: readonly number[] }) {
    super(o);
    this.buckets = [...o.buckets].sort((a, b) => a - b);
  }
  protected width(): number {
    // one count per bucket, +Inf, then the sum
    return this.buckets.length + 2;
  }
  private les: string[] | undefined;
  protected override lines(labels: string, values: readonly number[]): string {
    this.les ??= [...this.buckets.map(num), "+Inf"];
    return histogramLines(this.name, labels, this.les, values);
  }
  /** `observe(value)` for a histogram without labels, else `observe(labels, value)`. */
  observe(labels: Partial<Record<L, string>> | number | undefined, value?: number): void {
    if (!enabled) return;
    if (typeof labels === "number") {
      value = labels;
      labels = undefined;
    }
    if (value === undefined) return;
    const s = this.get(labels);
    const v = s.values;
    const b = this.buckets;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    v[i]!++;
    v[b.length + 1]! += value;
    s.dirty = true;
  }
}

/** Sums the families of several threads (same name, same labels), in the first one's order. */
export function mergeFamilies(all: FamilyJson[][]): FamilyJson[] {
  const byName = new Map<string, { f: FamilyJson; series: Map<string, number[]> }>();
  for (const list of all)
    for (const f of list) {
      let m = byName.get(f.name);
      if (!m) {
        m = { f, series: new Map() };
        byName.set(f.name, m);
      }
      if (m.f.type !== f.type) continue;
      for (const s of f.series) {
        const have = m.series.get(s.labels);
        if (!have) m.series.set(s.labels, [...s.values]);
        else for (let i = 0; i < have.length; i++) have[i]! += s.values[i] ?? 0;
      }
    }
  return [...byName.values()].map(({ f, series }) => ({
    ...f,
    series: [...series].map(([labels, values]) => ({ labels, values })),
  }));
}

const header = (name: string, help: string, type: string) =>
  `# HELP ${name} ${help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}\n# TYPE ${name} ${type}\n`;

/** A histogram series' lines: its cumulative buckets, sum and count. */
function histogramLines(name: string, labels: string, les: readonly string[], v: readonly number[]): string {
  const sep = labels ? `${labels},` : "";
  const braces = labels ? `{${labels}}` : "";
  const n = les.length;
  let cum = 0;
  let text = "";
  for (let i = 0; i < n; i++) {
    cum += v[i] ?? 0;
    text += `${name}_bucket{${sep}le="${les[i]}"} ${cum}\n`;
  }
  return `${text}${name}_sum${braces} ${num(v[n] ?? 0)}\n${name}_count${braces} ${cum}\n`;
}

/** The Prometheus text of families as threads send them (the merged ones). */
export function renderFamilies(families: FamilyJson[]): string {
  let out = "";
  for (const f of families) {
    out += header(f.name, f.help, f.type);
    if (f.type !== "histogram") {
      for (const s of f.series)
        out += `${f.name}${s.labels ? `{${s.labels}}` : ""} ${num(s.values[0] ?? 0)}\n`;
      continue;
    }
    const les = [...(f.buckets ?? []).map(num), "+Inf"];
    for (const s of f.series) out += histogramLines(f.name, s.labels, les, s.values);
  }
  return out;
}
