// From samples to the numbers people read: medians per (scenario, variant,
// target) and Sluice/peer ratios taken per repeat (both measured minutes
// apart at most) and then the median over repeats.

import { median } from '../lib/series.ts';
import type { Bound, Sample, ScenarioId } from '../scenarios/common.ts';
import type { TargetName } from '../lib/server.ts';

/** What one row of a table shows; see README "Columns". */
export interface Row {
  scenario: ScenarioId;
  variant: string;
  target: TargetName;
  ok: number;
  runs: number;
  perServerCpuS: number;
  perSec: number;
  serverUtil: number;
  clientUtilMax: number;
  otherUtil: number;
  bound: Bound | 'mixed';
  p50Us: number;
  p99Us: number;
  p999Us: number;
  rssPerSocketBytes: number;
  cpuPerUpgradeUs: number;
  connectP99Us: number;
  stallMaxMs: number;
  /** S6 goals: (max RSS - idle RSS) / stalled sockets, RSS slope over the run's second half, healthy p99 / p99 without stalled sockets. */
  rssGrowthPerStalledBytes: number;
  rssSlopeBytesPerS: number;
  p99VsBaseline: number;
  /** S7 goal: share of whole seconds after the drain delay with closes within +-20% of the target rate. */
  drainSecondsWithin: number;
  /** S10 goal: p99 of sequential /metrics renders, ms, in the run with 10k sockets (and traffic, when it ran). */
  renderP99Ms: number;
  /** S12 goal: from the revocation request to the last close its clients saw, ms. */
  revokeLastCloseMs: number;
  /** S13 goal: the limits arm's msgs per server-CPU-s over the plain arm's, per repeat, median (the limits arm's row only). */
  limitsVsPlain: number;
  /** S14 goal: from the SIGKILL of node B to node A counting only its own users, over WS_PRESENCE_TTL_MS (the SIGKILL row only). */
  presenceGoneOfTtl: number;
  /** Median of every numeric `extra` field over the successful repeats. */
  extras: Record<string, number>;
  /** Every string `extra` field, distinct values over the successful repeats joined with " / ". */
  notes: Record<string, string>;
  errors: string[];
}

/** The metric a scenario is judged by, and which direction is better. */
export type HeadlineKey = 'perServerCpuS' | 'p99Us' | 'rssPerSocketBytes' | 'cpuPerUpgradeUs';

export const HEADLINE: Record<ScenarioId, { key: HeadlineKey; higherIsBetter: boolean; label: string }> = {
  S1: { key: 'perServerCpuS', higherIsBetter: true, label: 'msgs per server-CPU-s' },
  S2: { key: 'p99Us', higherIsBetter: false, label: 'p99 latency' },
  S3: { key: 'perServerCpuS', higherIsBetter: true, label: 'deliveries per server-CPU-s' },
  S4: { key: 'rssPerSocketBytes', higherIsBetter: false, label: 'RSS per idle socket' },
  S5: { key: 'cpuPerUpgradeUs', higherIsBetter: false, label: 'server CPU per upgrade' },
  S6: { key: 'p99Us', higherIsBetter: false, label: 'healthy subscribers p99' },
  S7: { key: 'perServerCpuS', higherIsBetter: true, label: 'closes per server-CPU-s' },
  S8: { key: 'perServerCpuS', higherIsBetter: true, label: 'deliveries per gateway-CPU-s' },
  S9: { key: 'perServerCpuS', higherIsBetter: true, label: 'reconnects per node-B-CPU-s' },
  S10: { key: 'p99Us', higherIsBetter: false, label: '/metrics render p99' },
  S11: { key: 'perServerCpuS', higherIsBetter: true, label: 'upgrades or refreshes per server-CPU-s' },
  S12: { key: 'perServerCpuS', higherIsBetter: true, label: 'revoked closes per server-CPU-s' },
  S13: { key: 'perServerCpuS', higherIsBetter: true, label: 'msgs per server-CPU-s' },
  S14: { key: 'perServerCpuS', higherIsBetter: true, label: 'presence joins and leaves per server-CPU-s' },
  S15: { key: 'perServerCpuS', higherIsBetter: true, label: 'upgrades or joins per server-CPU-s' },
  S16: { key: 'perServerCpuS', higherIsBetter: true, label: 'deliveries per gateway-CPU-s' },
  S17: { key: 'perServerCpuS', higherIsBetter: true, label: 'deliveries per server-CPU-s' },
};

/**
 * Scenarios without a Sluice/peer ratio: S6 is judged against its own run without stalled sockets; S7, S8 and S9 run Sluice only
 * (S8: against its own single node; S9: SDK clients against naive ones; S10: against its own run with 0 sockets; S11: refresh against
 * upgrade on one gateway; S12: against its 1 s target; S13: against its own plain arm, per repeat; S14: its phases against each other,
 * and Socket.IO in rows of its own: a room join and fetchSockets() are not the same job as a presence join and presence_state; S15: its
 * variants against each other: hook against jwt, hooked joins against plain ones; S17: compression modes against off).
 */
const NO_RATIO: ReadonlySet<ScenarioId> = new Set(['S6', 'S7', 'S8', 'S9', 'S10', 'S11', 'S12', 'S13', 'S14', 'S15', 'S16', 'S17']);

function extraNum(s: Sample, k: string): number {
  const v = s.extra[k];
  return typeof v === 'number' ? v : NaN;
}

export function metricOf(s: Sample, key: HeadlineKey): number {
  switch (key) {
    case 'perServerCpuS': return s.perServerCpuS;
    case 'p99Us': return s.latency?.p99Us ?? NaN;
    case 'rssPerSocketBytes': return extraNum(s, 'rssPerSocketBytes');
    case 'cpuPerUpgradeUs': return extraNum(s, 'cpuPerUpgradeUs');
  }
}

export function groupKey(s: { scenario: string; variant: string }): string {
  return `${s.scenario}|${s.variant}`;
}

export function rows(samples: readonly Sample[]): Row[] {
  const groups = new Map<string, Sample[]>();
  for (const s of samples) {
    const k = `${groupKey(s)}|${s.target}`;
    const g = groups.get(k);
    if (g === undefined) groups.set(k, [s]); else g.push(s);
  }
  const out: Row[] = [];
  for (const g of groups.values()) {
    const first = g[0]!;
    const ok = g.filter((s) => s.ok);
    const bounds = new Set(ok.map((s) => s.bound));
    const stalls = ok.map((s) => extraNum(s, 'stallMaxMs')).filter(Number.isFinite);
    out.push({
      scenario: first.scenario,
      variant: first.variant,
      target: first.target,
      ok: ok.length,
      runs: g.length,
      perServerCpuS: median(ok.map((s) => s.perServerCpuS)),
      perSec: median(ok.map((s) => s.perSec)),
      serverUtil: median(ok.map((s) => s.serverUtil)),
      clientUtilMax: median(ok.map((s) => s.clientUtilMax)),
      // The worst repeat: one noisy repeat is worth knowing about.
      // (Records written before the column existed have no value: NaN, shown as n/a.)
      otherUtil: ok.length === 0 ? NaN : Math.max(...ok.map((s) => (typeof s.otherUtil === 'number' ? s.otherUtil : NaN))),
      bound: bounds.size === 1 ? [...bounds][0]! : 'mixed',
      p50Us: median(ok.map((s) => s.latency?.p50Us ?? NaN)),
      p99Us: median(ok.map((s) => s.latency?.p99Us ?? NaN)),
      p999Us: median(ok.map((s) => s.latency?.p999Us ?? NaN)),
      rssPerSocketBytes: median(ok.map((s) => extraNum(s, 'rssPerSocketBytes'))),
      cpuPerUpgradeUs: median(ok.map((s) => extraNum(s, 'cpuPerUpgradeUs'))),
      connectP99Us: median(ok.map((s) => extraNum(s, 'connectP99Us'))),
      // The worst stall of any repeat: a goal about "no stall over 50 ms" is about the worst case.
      stallMaxMs: stalls.length === 0 ? NaN : Math.max(...stalls),
      rssGrowthPerStalledBytes: median(ok.map((s) => extraNum(s, 'rssGrowthPerStalledBytes'))),
      rssSlopeBytesPerS: median(ok.map((s) => extraNum(s, 'goalRssSlopeBytesPerS'))),
      p99VsBaseline: median(ok.map((s) => extraNum(s, 'p99VsBaseline'))),
      drainSecondsWithin: median(ok.map((s) => extraNum(s, 'secondsWithin'))),
      renderP99Ms: median(ok.map((s) => extraNum(s, 'goalRenderP99Ms'))),
      revokeLastCloseMs: first.scenario === 'S12' ? median(ok.map((s) => extraNum(s, 'lastCloseMs'))) : NaN,
      limitsVsPlain: first.scenario === 'S13' ? median(ok.map((s) => extraNum(s, 'vsPlain'))) : NaN,
      presenceGoneOfTtl: first.scenario === 'S14' ? median(ok.map((s) => extraNum(s, 'goneAdminMs') / extraNum(s, 'ttlMs'))) : NaN,
      extras: extrasMedians(ok),
      notes: extrasNotes(ok),
      errors: [...new Set(g.filter((s) => !s.ok).map((s) => s.error ?? 'failed'))],
    });
  }
  return out;
}

function extrasMedians(ok: readonly Sample[]): Record<string, number> {
  const keys = new Set(ok.flatMap((s) => Object.keys(s.extra).filter((k) => typeof s.extra[k] === 'number')));
  const out: Record<string, number> = {};
  for (const k of keys) out[k] = median(ok.map((s) => extraNum(s, k)));
  return out;
}

function extrasNotes(ok: readonly Sample[]): Record<string, string> {
  const out: Record<string, string> = {};
  const keys = new Set(ok.flatMap((s) => Object.keys(s.extra).filter((k) => typeof s.extra[k] === 'string')));
  for (const k of keys) out[k] = [...new Set(ok.map((s) => s.extra[k]).filter((v): v is string => typeof v === 'string'))].join(' / ');
  return out;
}

export interface Ratio {
  scenario: ScenarioId;
  variant: string;
  sluice: TargetName;
  peer: TargetName;
  /** Median over repeats of sluice_metric / peer_metric (same repeat). */
  value: number;
  pairs: number;
  higherIsBetter: boolean;
  metric: string;
}

export function ratios(samples: readonly Sample[], sluiceTargets: readonly TargetName[] = ['sluice', 'sluice-w1']): Ratio[] {
  const out: Ratio[] = [];
  const keys = [...new Set(samples.map(groupKey))];
  for (const k of keys) {
    const inGroup = samples.filter((s) => groupKey(s) === k);
    const scenario = inGroup[0]!.scenario;
    if (NO_RATIO.has(scenario)) continue;
    const variant = inGroup[0]!.variant;
    const head = HEADLINE[scenario];
    const peers = [...new Set(inGroup.map((s) => s.target))].filter((t) => !sluiceTargets.includes(t));
    for (const sl of sluiceTargets) {
      for (const peer of peers) {
        const per: number[] = [];
        for (const a of inGroup.filter((s) => s.target === sl && s.ok)) {
          const b = inGroup.find((s) => s.target === peer && s.ok && s.repeat === a.repeat);
          if (b === undefined) continue;
          const x = metricOf(a, head.key);
          const y = metricOf(b, head.key);
          if (Number.isFinite(x) && Number.isFinite(y) && y !== 0) per.push(x / y);
        }
        if (inGroup.some((s) => s.target === sl)) {
          out.push({ scenario, variant, sluice: sl, peer, value: median(per), pairs: per.length, higherIsBetter: head.higherIsBetter, metric: head.label });
        }
      }
    }
  }
  return out;
}
