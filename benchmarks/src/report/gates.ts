// Goals (what Sluice is held to) and CI gates (what fails the build today).
// Every gate compares Sluice (WS_WORKERS=2, the shipped default on this
// 2-core machine) with raw uWebSockets.js (the limit of this stack; `ws`
// until issue 20) measured in the same run, so a slower or busier CI machine
// moves both sides alike. A gate starts below today's measured
// ratio by a margin for noise and moves up towards its goal as Sluice gets
// faster; the goal stands beside each gate.

import type { TargetName } from '../lib/server.ts';
import type { ScenarioId } from '../scenarios/common.ts';
import { median } from '../lib/series.ts';
import type { Ratio, Row } from './summary.ts';
import type { Sample } from '../scenarios/common.ts';

export interface Goal {
  scenario: ScenarioId;
  /** Only the variants it matches (S4: idle, and joined to two topics); every variant when absent. */
  variant?: RegExp;
  /** Only this Sluice target (issue 20's S1: one goal with 2 workers, another with 1); both when absent. */
  sluice?: 'sluice' | 'sluice-w1';
  /** For absolute goals: a median `extras` field of the row instead of `field` (S8: per gateway-CPU-s against 1 node). */
  extra?: string;
  /** Against which peer; null for an absolute goal. */
  peer: TargetName | null;
  /** 'min': ratio (or value) must be at least `value`; 'max': at most. */
  kind: 'min' | 'max';
  value: number;
  text: string;
  /** For absolute goals: which number of a row it reads. */
  field?: 'rssPerSocketBytes' | 'stallMaxMs' | 'rssGrowthPerStalledBytes' | 'rssSlopeBytesPerS' | 'p99VsBaseline' | 'drainSecondsWithin' | 'renderP99Ms'
    | 'revokeLastCloseMs' | 'limitsVsPlain' | 'presenceGoneOfTtl';
}

/**
 * The goals, per server-CPU-second and measured in the same run: issue 3's
 * (S3, S6, S7) and issue 20's, which replaced issue 3's S1 and S5 goals
 * (0.6x raw uWS; 3x ws and 5x Socket.IO, which asked for more than raw uWS
 * itself does against them at 1 KB: results.md "S1: what remains").
 */
export const GOALS: readonly Goal[] = [
  { scenario: 'S1', sluice: 'sluice-w1', peer: 'uws', kind: 'min', value: 0.8, text: 'S1 msgs/server-CPU-s >= 0.8x raw uWS (1 worker)' },
  { scenario: 'S1', sluice: 'sluice', peer: 'uws', kind: 'min', value: 0.75, text: 'S1 msgs/server-CPU-s >= 0.75x raw uWS (2 workers)' },
  { scenario: 'S3', peer: 'uws', kind: 'min', value: 0.7, text: 'S3 deliveries/server-CPU-s >= 0.7x raw uWS' },
  { scenario: 'S3', peer: 'ws', kind: 'min', value: 5, text: 'S3 deliveries/server-CPU-s >= 5x ws' },
  // Issue 20: an idle socket in at most 1 KiB, one joined to two topics in at most 1.5 KiB (RSS, WS_WORKERS=2).
  { scenario: 'S4', variant: /idle$/, peer: null, kind: 'max', value: 1024, field: 'rssPerSocketBytes', text: 'S4 RSS per idle socket <= 1 KiB' },
  { scenario: 'S4', variant: /topics$/, peer: null, kind: 'max', value: 1536, field: 'rssPerSocketBytes', text: 'S4 RSS per socket joined to two topics <= 1.5 KiB' },
  { scenario: 'S5', peer: 'uws', kind: 'max', value: 2, text: 'S5 server CPU per upgrade <= 2x raw uWS' },
  { scenario: 'S5', peer: null, kind: 'max', value: 50, field: 'stallMaxMs', text: 'S5 longest event-loop stall <= 50 ms' },
  // Issue 4 (S6, slow consumers), absolute: RSS under idle RSS + 1.5 MiB per stalled socket for the whole run, flat
  // after the first seconds (read here as: least-squares slope over the run's second half <= 1 MiB/s), and the
  // healthy subscribers' p99 within 1.5x of the same run without stalled sockets.
  { scenario: 'S6', peer: null, kind: 'max', value: 1.5 * 1024 * 1024, field: 'rssGrowthPerStalledBytes', text: 'S6 (max RSS - idle RSS) / stalled socket <= 1.5 MiB' },
  { scenario: 'S6', peer: null, kind: 'max', value: 1024 * 1024, field: 'rssSlopeBytesPerS', text: 'S6 RSS flat: slope over the second half <= 1 MiB/s' },
  { scenario: 'S6', peer: null, kind: 'max', value: 1.5, field: 'p99VsBaseline', text: 'S6 healthy p99 <= 1.5x the run without stalled sockets' },
  // The drain issue (docs/operations.md "Deploys and the drain") asks for WS_DRAIN_RATE closes per second for the
  // whole node; read here as: closes per whole second within +-20% of the rate in >= 90% of the seconds after the delay.
  { scenario: 'S7', peer: null, kind: 'min', value: 0.9, field: 'drainSecondsWithin', text: 'S7 closes/s within +-20% of WS_DRAIN_RATE in >= 90% of the seconds after the delay' },
  // Issue 20: cross-node fan-out delivers at least 0.9x of the embedded single node's deliveries per gateway CPU-second
  // (not `--ack-replicas`'s variant, which adds replicas and WAITs). Held twice: the nodes with one shard each (as many
  // shard threads as the one node has, on the same 2 cores: the cross-node path alone), and with the default two each
  // (four shard threads in two processes on 2 cores; results.md "S8: what the second node costs").
  { scenario: 'S8', variant: /^2 nodes on Redis, WS_WORKERS=1 each$/, peer: null, kind: 'min', value: 0.9, extra: 'perServerCpuVsOneNode',
    text: 'S8 2 nodes on Redis, 1 shard each: deliveries/gateway-CPU-s >= 0.9x one node of 2' },
  { scenario: 'S8', variant: /^2 nodes on Redis$/, peer: null, kind: 'min', value: 0.9, extra: 'perServerCpuVsOneNode',
    text: 'S8 2 nodes on Redis, 2 shards each (4 shard threads on 2 cores): deliveries/gateway-CPU-s >= 0.9x one node' },
  // Issue 9: /metrics renders in under 50 ms with 10k sockets connected (a figure, not a CI gate); read here as the p99 of the
  // sequential scrapes of S10's run with 10k sockets and traffic (the only S10 variant that sets the field).
  { scenario: 'S10', peer: null, kind: 'max', value: 50, field: 'renderP99Ms', text: 'S10 /metrics render p99 with 10k sockets (and traffic) <= 50 ms' },
  // Issue 17 (figures, not CI gates: see results.md "Issue 17"): a revocation of a user with 10k sockets over two nodes closes
  // them all within 1 s (median over repeats, clients on the same 2 cores), and S1 moves by at most 5% with the new limits
  // configured and revocations in force (median of the per-repeat ratios to the same gateway without them).
  { scenario: 'S12', peer: null, kind: 'max', value: 1000, field: 'revokeLastCloseMs', text: 'S12 revocation: request to last 4003 close of 10k sockets on 2 nodes <= 1 s' },
  { scenario: 'S13', peer: null, kind: 'min', value: 0.95, field: 'limitsVsPlain', text: 'S13 S1 with limits and revocations >= 0.95x without' },
  // Issue 18 (PROTOCOL.md "Presence"): a node that dies takes its users out within WS_PRESENCE_TTL_MS; read here as node A's admin
  // count holding only its own users, from the SIGKILL of node B, over the TTL (a figure, not a CI gate).
  { scenario: 'S14', peer: null, kind: 'max', value: 1, field: 'presenceGoneOfTtl', text: 'S14 a SIGKILLed node\'s users gone (node A\'s admin count) within WS_PRESENCE_TTL_MS, as a share of it' },
];

export interface Gate {
  scenario: ScenarioId;
  variant: string;
  /** The peer measured in the same run: raw uWS, the limit of this stack. */
  peer: TargetName;
  kind: 'min' | 'max';
  /** Sluice (2 workers) / peer, same run, median of the per-repeat ratios. */
  value: number;
  goal: string;
  why: string;
}

/**
 * Calibrated on this machine (2 cores, Node 20.20) with the gateway at
 * 86fe58f to 5149bbc: per-repeat ratios Sluice/ws over three `all` runs and
 * one `ci` run (12 repeats) were S1 32 B 2.27 to 3.28, S3 9.4 to 11.9, S4
 * 0.18 to 0.31. Each gate sits about 25% beyond the worst repeat, so noise
 * alone does not fail it and a regression of that size does. Raise a gate
 * when Sluice gets faster; the goals are in GOALS above.
 *
 * S1 recalibrated at 57b1257: two fresh-clone CI runs on this machine on
 * 2026-12-01 measured S1 32 B at 2.24x and 1.20x ws (pairs from 1.17 to 2.4),
 * with Sluice's own figure falling from 89k to 68k msgs per server-CPU-s
 * between them while ws rose. Sluice here is bound by the whole machine (two
 * shard threads and the generator on 2 cores), ws by one thread, so a
 * slower machine hits Sluice harder and the ratio is not steady. The build
 * of the session's start (551e762), alternated with this one on the same
 * machine, measured the same (72.8k against 77k msgs per server-CPU-s, six
 * runs each: benchmarks/results.md), so the drop is the machine's, not the
 * code's. The gate stays a guard against Sluice falling to ws's level.
 *
 * S4 recalibrated at d055c48: the CI run on a fresh clone measured 1.76 KiB
 * per idle socket on Node 20 (0.33x ws) and 2.45 KiB on Node 24 (0.41x ws,
 * over the old 0.4 gate). Why Node 24 holds a socket in more is not
 * measured yet. 0.5 keeps about 20% beyond the worst; the absolute goal
 * (3 KiB) is still met on both. Issue 20 brings it down (at most 1 KiB).
 *
 * Issue 20 moved every gate from ws to raw uWS and added S5 (S1, S3, S4 and
 * S5 gated). Calibrated at e5900a9 on one quiet `ci` run (other load 0-6%,
 * 3 repeats, Node 20): per-repeat Sluice/raw uWS S1 32 B 0.43, 0.62, 0.44;
 * S3 0.87, 0.80, 0.83; S4 4.6 to 4.8 (2.32 KiB against 0.49 KiB per idle
 * socket); S5 3.05, 2.12, 3.16. S1 moves most: Sluice's two shard threads
 * and the generator share 2 cores, raw uWS runs one thread. Each gate sits
 * about 30% beyond the worst repeat (S4 further: Node 24 held a socket in
 * 1.4x Node 20's memory at d055c48), so a slow CI machine keeps it and a
 * regression of that size fails it. They are guards, far from the issue's
 * goals (beside each gate); raise them as the gateway gets there.
 *
 * S4 and S5 recalibrated at 06f33d0 (the socket state in one user-data
 * property; the upgrade windows in shared memory), over the issue's `all`
 * run on Node 20 and an S1-S5 run on Node 24, 3 repeats each: per-repeat
 * Sluice/raw uWS S4 idle 1.98 to 2.42 (Node 20), 1.66 to 1.90 (Node 24); S5
 * 1.73 to 2.08 and 1.61 to 2.16. Each gate about 40% beyond the worst.
 */
export const GATES: readonly Gate[] = [
  { scenario: 'S1', variant: '32B', peer: 'uws', kind: 'min', value: 0.3, goal: '>= 0.75x raw uWS (issue 20, 2 workers)', why: '0.43 to 0.62 (e5900a9)' },
  { scenario: 'S3', variant: '64B', peer: 'uws', kind: 'min', value: 0.6, goal: '>= 0.7x raw uWS (S3 goal, met)', why: '0.80 to 0.87 (e5900a9)' },
  { scenario: 'S4', variant: '15000 idle', peer: 'uws', kind: 'max', value: 3.5, goal: '<= 1 KiB per socket, absolute (issue 20)', why: '1.66 to 2.42 (06f33d0, Node 20 and 24)' },
  { scenario: 'S5', variant: '15000 upgrades', peer: 'uws', kind: 'max', value: 3, goal: '<= 2x raw uWS (issue 20)', why: '1.61 to 2.16 (06f33d0, Node 20 and 24)' },
];

export interface GateResult {
  gate: Gate;
  measured: number;
  pairs: number;
  pass: boolean;
}

export function checkGates(ratiosList: readonly Ratio[], gates: readonly Gate[] = GATES): GateResult[] {
  return gates.map((gate) => {
    const r = ratiosList.find((x) => x.scenario === gate.scenario && x.variant === gate.variant && x.sluice === 'sluice' && x.peer === gate.peer);
    const measured = r?.value ?? NaN;
    const pass = Number.isFinite(measured) && (gate.kind === 'min' ? measured >= gate.value : measured <= gate.value);
    return { gate, measured, pairs: r?.pairs ?? 0, pass };
  });
}

export interface GoalResult {
  goal: Goal;
  sluice: TargetName;
  measured: number;
  met: boolean | null;
}

export function checkGoals(rowsList: readonly Row[], ratiosList: readonly Ratio[], samples: readonly Sample[]): GoalResult[] {
  const out: GoalResult[] = [];
  for (const sluice of ['sluice', 'sluice-w1'] as const) {
    if (!samples.some((s) => s.target === sluice)) continue;
    for (const goal of GOALS) {
      if (goal.sluice !== undefined && goal.sluice !== sluice) continue;
      let measured: number;
      if (goal.peer !== null) {
        const rs = ratiosList.filter((r) => r.scenario === goal.scenario && r.sluice === sluice && r.peer === goal.peer && (goal.variant?.test(r.variant) ?? true));
        if (rs.length === 0) continue;
        // Several variants (S1: 32 B and 1 KB): the goal holds only if it holds for the worst.
        const vals = rs.map((r) => r.value);
        measured = goal.kind === 'min' ? Math.min(...vals) : Math.max(...vals);
      } else {
        const rw = rowsList.filter((r) => r.scenario === goal.scenario && r.target === sluice && (goal.variant?.test(r.variant) ?? true));
        if (rw.length === 0) continue;
        measured = median(rw.map((r) => (goal.extra !== undefined ? r.extras[goal.extra] ?? NaN : r[goal.field!])));
      }
      const met = Number.isFinite(measured) ? (goal.kind === 'min' ? measured >= goal.value : measured <= goal.value) : null;
      out.push({ goal, sluice, measured, met });
    }
  }
  return out;
}
