/**
 * The core benchmark's instruments (bench/core.ts): the load generator worker
 * (loadgen.ts), where the CPU goes during a phase, and how long actor turns
 * take.
 */
import { cpus } from "node:os";
import { type EventLoopUtilization, performance } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import { tsxWorkerSource } from "../bin/node-thread-api.js";
import { machineTicks, procCpuS, summary } from "./common.js";
import type { LoadResult, LoadTask } from "./loadgen.js";

/** The load generator worker (loadgen.ts, loaded through tsx inside the worker). */
export class LoadGen {
  readonly worker: Worker;
  private nextId = 0;
  private readonly waiting = new Map<
    number,
    { resolve: (r: LoadResult) => void; reject: (e: Error) => void }
  >();

  constructor() {
    this.worker = new Worker(tsxWorkerSource(new URL("./loadgen.ts", import.meta.url).href), { eval: true });
    this.worker.on("message", (m: { id: number; result?: LoadResult; error?: string }) => {
      const w = this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id);
      if (m.result) w.resolve(m.result);
      else w.reject(new Error(`load generator: ${m.error}`));
    });
    this.worker.on("error", (e) => {
      for (const w of this.waiting.values()) w.reject(e);
      this.waiting.clear();
    });
  }

  run(task: LoadTask): Promise<LoadResult> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ id, task });
    });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }
}

/** CPU use in percent of one core (so up to 100 × cores), and event-loop busy shares (0-1). */
export interface CpuShare {
  wallS: number;
  /** Everything on the machine. */
  machine: number;
  /** This process: platform + load generator (+ libuv and GC threads). */
  process: number;
  natsServer: number;
  /** Other processes on the machine (e.g. concurrent test runs): noise. */
  other: number;
  /** Busy share of this process's main event loop: gateways, actors, read index, NATS client. */
  platformLoop: number;
  /** Busy share of the load generator's event loop. */
  loadgenLoop: number;
  /** Busy share of the runtime node's event loop when it runs in a worker thread (`slipwayd up`), else 0. */
  nodeLoop: number;
}

export interface CpuMark {
  wall: number;
  machineBusy: number;
  machineTotal: number;
  self: NodeJS.CpuUsage;
  nats: number;
  elu: EventLoopUtilization;
  loadgenElu: EventLoopUtilization | undefined;
  nodeElu: EventLoopUtilization | undefined;
}

export class CpuMeter {
  private readonly natsPid: number;
  private readonly gen: LoadGen | undefined;
  private readonly cores = cpus().length;
  /** The node's worker thread, when the platform runs it in one. */
  nodeWorker: (() => Worker) | undefined;

  constructor(natsPid: number, gen?: LoadGen) {
    this.natsPid = natsPid;
    this.gen = gen;
  }

  mark(): CpuMark {
    const m = machineTicks();
    return {
      wall: performance.now(),
      machineBusy: m.busy,
      machineTotal: m.total,
      self: process.cpuUsage(),
      nats: procCpuS(this.natsPid),
      elu: performance.eventLoopUtilization(),
      loadgenElu: this.gen?.worker.performance.eventLoopUtilization(),
      nodeElu: this.nodeWorker?.().performance.eventLoopUtilization(),
    };
  }

  since(a: CpuMark): CpuShare {
    const b = this.mark();
    const wallS = (b.wall - a.wall) / 1000;
    const dt = b.machineTotal - a.machineTotal;
    const machine = dt > 0 ? ((b.machineBusy - a.machineBusy) / dt) * 100 * this.cores : 0;
    const self = process.cpuUsage(a.self);
    const proc = ((self.user + self.system) / 1e6 / wallS) * 100;
    const nats = ((b.nats - a.nats) / wallS) * 100;
    const loadgen =
      this.gen && a.loadgenElu
        ? this.gen.worker.performance.eventLoopUtilization(a.loadgenElu).utilization
        : 0;
    return {
      wallS,
      machine,
      process: proc,
      natsServer: nats,
      other: Math.max(0, machine - proc - nats),
      platformLoop: performance.eventLoopUtilization(a.elu).utilization,
      loadgenLoop: loadgen,
      nodeLoop:
        this.nodeWorker && a.nodeElu
          ? this.nodeWorker().performance.eventLoopUtilization(a.nodeElu).utilization
          : 0,
    };
  }
}

export type Measured = LoadResult & { cpu: CpuShare };

export async function measure(meter: CpuMeter, gen: LoadGen, task: LoadTask): Promise<Measured> {
  const mark = meter.mark();
  const r = await gen.run(task);
  return { ...r, cpu: meter.since(mark) };
}

/**
 * Microseconds of the platform's event loops per operation (the main one, plus the node thread's
 * when it has one): what one request costs the server side.
 */
export function loopUsPerOp(c: CpuShare, ops: number): number {
  return ops > 0 ? ((c.platformLoop + c.nodeLoop) * c.wallS * 1e6) / ops : 0;
}

/**
 * Times each command's actor turn (from taking the command to just before the reply: reads, commit-record
 * CAS, outbox writes) through the node's apply trace, to split end-to-end latency into actor and the rest.
 */
export class TurnTimer {
  private readonly open = new Map<string, number>();
  private ms: number[] = [];
  on = false;

  readonly hook = (e: { command_id: string; phase: "enter" | "exit"; t: number }) => {
    if (!this.on) return;
    if (e.phase === "enter") this.open.set(e.command_id, e.t);
    else {
      const start = this.open.get(e.command_id);
      if (start !== undefined) {
        this.open.delete(e.command_id);
        this.ms.push(e.t - start);
      }
    }
  };

  /** Starts timing; returns a function that stops and gives the turn percentiles. */
  start(): () => ActorTurns {
    this.ms = [];
    this.open.clear();
    this.on = true;
    return () => {
      this.on = false;
      return summary(this.ms.slice().sort((a, b) => a - b));
    };
  }
}

export interface ActorTurns {
  n: number;
  p50: number;
  p99: number;
  mean: number;
}
