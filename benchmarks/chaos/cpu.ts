// Who had the machine's CPU while the clients came back (issue 22): every
// second, the CPU seconds of every process, summed by role (the gateway
// nodes, the client processes, HAProxy, Redis, this orchestrator, the rest)
// plus the kernel's irq and softirq time (loopback TCP is processed there
// and charged to no process). A step's reconnection window then reads as
// "the gateways had X of the 2 x T core-seconds, the clients Y".

import { processCpuTable, unchargedSeconds } from '../src/lib/proc.ts';

export const KERNEL = 'kernel (irq, softirq)';

/** Cumulative CPU seconds per role since the sampler started, at `t` (the orchestrator's ms). */
export interface CpuSample {
  readonly t: number;
  readonly by: Readonly<Record<string, number>>;
}

/** What each role used between the samples around [from, to], and the wall time between those samples (s). */
export function cpuBetween(samples: readonly CpuSample[], from: number, to: number): { wallS: number; by: Record<string, number> } | undefined {
  if (!(to > from)) return undefined;
  let a: CpuSample | undefined;
  let b: CpuSample | undefined;
  for (const s of samples) {
    if (s.t <= from) a = s;
    if (s.t >= to && b === undefined) b = s;
  }
  a ??= samples[0];
  b ??= samples.at(-1);
  if (a === undefined || b === undefined || b.t <= a.t) return undefined;
  const by: Record<string, number> = {};
  for (const k of new Set([...Object.keys(a.by), ...Object.keys(b.by)])) {
    const d = (b.by[k] ?? 0) - (a.by[k] ?? 0);
    if (d > 0) by[k] = Math.round(d * 100) / 100;
  }
  return { wallS: (b.t - a.t) / 1000, by };
}

/** One line: each role's seconds and share of the machine's core-seconds, the largest first. */
export function describeCpu(c: { wallS: number; by: Record<string, number> }, cores: number): string {
  const total = c.wallS * cores;
  const parts = Object.entries(c.by).sort((x, y) => y[1] - x[1]).map(([k, v]) => `${k} ${v.toFixed(1)} s (${Math.round((v / total) * 100)}%)`);
  const idle = Math.max(0, total - Object.values(c.by).reduce((x, y) => x + y, 0));
  return `${parts.join(', ')}, idle ${idle.toFixed(1)} s (${Math.round((idle / total) * 100)}%) of ${total.toFixed(1)} core-seconds`;
}

/**
 * Samples every `everyMs`. `roleOf` names the role of a process (by pid and
 * command name; undefined: counted as "other"); asked at every sample, so
 * a node started again under a new pid is counted from its start. CPU a
 * process used before the sampler first saw it is not counted, unless it
 * appeared after the first sample (then all of it is: it started since).
 */
export class CpuSampler {
  readonly samples: CpuSample[] = [];
  private readonly last = new Map<number, number>();
  private readonly acc: Record<string, number> = {};
  private kernel0: number | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly roleOf: (pid: number, comm: string) => string | undefined, private readonly now: () => number, everyMs = 1000) {
    this.sample(true);
    this.timer = setInterval(() => this.sample(false), everyMs);
    this.timer.unref();
  }

  private sample(first: boolean): void {
    const table = processCpuTable();
    for (const [pid, { comm, cpuS }] of table) {
      const prev = this.last.get(pid);
      this.last.set(pid, cpuS);
      if (first) continue;
      const d = cpuS - (prev ?? 0);
      if (d <= 0) continue;
      const role = this.roleOf(pid, comm) ?? 'other';
      this.acc[role] = (this.acc[role] ?? 0) + d;
    }
    for (const pid of this.last.keys()) if (!table.has(pid)) this.last.delete(pid);
    const u = unchargedSeconds();
    const k = u.irq + u.softirq;
    this.kernel0 ??= k;
    this.samples.push({ t: this.now(), by: { ...this.acc, [KERNEL]: k - this.kernel0 } });
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.sample(false);
  }
}
