// What /proc says about a process: CPU time (all threads) and resident memory.

import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism, cpus, totalmem } from 'node:os';

/** USER_HZ: the unit of utime/stime in /proc/<pid>/stat; 100 on every Linux ABI Node supports. */
const CLK_TCK = 100;

/** utime + stime of every thread of `pid`, in seconds (10 ms resolution). */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  // Field 2 (comm) may hold spaces and parentheses: split after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state); utime is field 14, stime field 15.
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) throw new Error(`cannot parse /proc/${pid}/stat`);
  return (utime + stime) / CLK_TCK;
}

/** utime and stime of every thread of `pid`, in seconds, apart: user space, and the kernel (loopback TCP is largely system time of the sender). */
export function cpuSplit(pid: number): { user: number; sys: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(fields[11]) / CLK_TCK, sys: Number(fields[12]) / CLK_TCK };
}

/** CPU seconds the whole machine spent busy (all cores, everything but idle and iowait) since boot. */
export function machineBusySeconds(): number {
  const line = readFileSync('/proc/stat', 'latin1').split('\n', 1)[0]!;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0); // user nice system idle iowait irq softirq steal
  return (total - (f[3] ?? 0) - (f[4] ?? 0)) / CLK_TCK;
}

/** Resident set size of `pid` in bytes (VmRSS). */
export function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'latin1');
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (m === null) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

export function openFileLimit(): { soft: number; hard: number } {
  const limits = readFileSync('/proc/self/limits', 'latin1');
  const m = /^Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/m.exec(limits);
  const n = (s: string | undefined): number => (s === undefined || s === 'unlimited' ? Infinity : Number(s));
  return { soft: n(m?.[1]), hard: n(m?.[2]) };
}

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memGiB: number;
  node: string;
  kernel: string;
}

export function machineInfo(): MachineInfo {
  let kernel: string;
  try { kernel = readFileSync('/proc/sys/kernel/osrelease', 'latin1').trim(); } catch { kernel = 'unknown'; }
  return {
    cpuModel: cpus()[0]?.model ?? 'unknown',
    cores: availableParallelism(),
    memGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    kernel,
  };
}

/** utime+stime (s) and command name of every process on the machine, by pid: who the `other load` was. */
export function processCpuTable(): Map<number, { comm: string; cpuS: number }> {
  const out = new Map<number, { comm: string; cpuS: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'latin1');
      const close = stat.lastIndexOf(')');
      const fields = stat.slice(close + 2).split(' ');
      out.set(Number(name), { comm: stat.slice(stat.indexOf('(') + 1, close), cpuS: (Number(fields[11]) + Number(fields[12])) / CLK_TCK });
    } catch { /* gone meanwhile */ }
  }
  return out;
}

/** The processes that used the most CPU between two tables (pids in `skip` left out), and the machine's irq+softirq seconds. */
export function topCpuBetween(a: ReadonlyMap<number, { comm: string; cpuS: number }>, b: ReadonlyMap<number, { comm: string; cpuS: number }>,
  skip: ReadonlySet<number>, n = 5): Array<{ pid: number; comm: string; cpuS: number }> {
  const out: Array<{ pid: number; comm: string; cpuS: number }> = [];
  for (const [pid, e] of b) {
    if (skip.has(pid)) continue;
    const d = e.cpuS - (a.get(pid)?.cpuS ?? 0);
    if (d > 0) out.push({ pid, comm: e.comm, cpuS: Math.round(d * 100) / 100 });
  }
  return out.sort((x, y) => y.cpuS - x.cpuS).slice(0, n);
}

/**
 * Machine-wide seconds since boot that no process is charged with: irq and
 * softirq (much of loopback TCP is processed there) and steal (a virtual
 * machine's CPU taken by the host: counted as busy by machineBusySeconds).
 */
export function unchargedSeconds(): { irq: number; softirq: number; steal: number } {
  const f = readFileSync('/proc/stat', 'latin1').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  return { irq: (f[5] ?? 0) / CLK_TCK, softirq: (f[6] ?? 0) / CLK_TCK, steal: (f[7] ?? 0) / CLK_TCK };
}
