// Tables for the terminal and results.md, and the SVG chart of the ratios.

import { TARGETS, type TargetName } from '../lib/server.ts';
import { fmtBytes, fmtInt, fmtUs, type Sample, type ScenarioId } from '../scenarios/common.ts';
import { SCENARIOS } from '../registry.ts';
import type { MachineInfo } from '../lib/proc.ts';
import { checkGoals, GOALS, type GateResult, type GoalResult } from './gates.ts';
import { HEADLINE, ratios, type Ratio, type Row, rows } from './summary.ts';

export interface SluiceBuild {
  commit: string;
  dirtyFiles: number;
  /** How the gateway ran: its build (`dist/main.js`) or its sources under tsx; runs before this field ran the sources. */
  runs?: 'build' | 'source';
  /** Set when the working tree changed between the start and the end of the run. */
  changedDuringRun?: string;
}

export interface RunRecord {
  command: string;
  startedAt: string;
  finishedAt: string;
  machine: MachineInfo;
  sluiceBuild: SluiceBuild;
  config: Record<string, unknown>;
  samples: Sample[];
  rows: Row[];
  ratios: Ratio[];
  goals: GoalResult[];
  gates?: GateResult[];
  /** Runs whose scenarios `report` merged into this one (each replaces the scenarios it measured). */
  merged?: MergedRun[];
}

export interface MergedRun {
  file: string;
  command: string;
  startedAt: string;
  finishedAt: string;
  sluiceBuild: SluiceBuild;
  scenarios: string[];
}

/**
 * One record from several runs: each later run's samples replace the samples of
 * the scenarios it measured; rows, ratios and goals are computed again.
 */
export function mergeRuns(first: RunRecord, later: ReadonlyArray<{ file: string; rec: RunRecord }>): RunRecord {
  if (later.length === 0) return first;
  let samples = [...first.samples];
  const scenarios = { ...((first.config['scenarios'] ?? {}) as Record<string, unknown>) };
  const merged = [...(first.merged ?? [])];
  for (const { file, rec } of later) {
    const ids = new Set(rec.samples.map((x) => x.scenario));
    samples = [...samples.filter((x) => !ids.has(x.scenario)), ...rec.samples];
    Object.assign(scenarios, (rec.config['scenarios'] ?? {}) as Record<string, unknown>);
    merged.push({ file, command: rec.command, startedAt: rec.startedAt, finishedAt: rec.finishedAt, sluiceBuild: rec.sluiceBuild, scenarios: [...ids].sort() });
  }
  const rowsList = rows(samples);
  const ratiosList = ratios(samples);
  return {
    ...first, config: { ...first.config, scenarios }, samples, rows: rowsList, ratios: ratiosList,
    goals: checkGoals(rowsList, ratiosList, samples), merged,
  };
}

const PEER_LABEL: Record<TargetName, string> = { sluice: 'Sluice (2 workers)', 'sluice-w1': 'Sluice (1 worker)',
  'sluice-traced': 'Sluice (2 workers, tracing on)', 'sluice-base': 'Sluice before the change (2 workers)', 'sluice-base-w1': 'Sluice before the change (1 worker)', uws: 'raw uWS', ws: 'ws', sio: 'Socket.IO' };

function fmtRatio(r: number): string {
  return Number.isFinite(r) ? `${r.toFixed(2)}x` : 'n/a';
}

function pct(cores: number): string {
  return Number.isFinite(cores) ? `${(cores * 100).toFixed(0)}%` : 'n/a';
}

function fmtMs(ms: number): string {
  return Number.isFinite(ms) ? `${ms.toFixed(0)} ms` : 'n/a';
}

function table(head: string[], body: string[][]): string {
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const r of body) lines.push(`| ${r.join(' | ')} |`);
  return lines.join('\n');
}

/** S1-S3: rates, CPU, bound and latency. */
export function rateTable(rs: readonly Row[], status: (r: Row) => string): string {
  const unit = rs[0]?.scenario === 'S3' ? 'deliveries' : 'msgs';
  return table(
    ['variant', 'target', `${unit}/server-CPU-s`, `${unit}/s`, 'server CPU', 'busiest generator', 'other load', 'bound', 'p50', 'p99', 'p99.9', 'ok runs'],
    rs.map((r) => [r.variant, PEER_LABEL[r.target], fmtInt(r.perServerCpuS), fmtInt(r.perSec), pct(r.serverUtil),
      pct(r.clientUtilMax), pct(r.otherUtil), r.bound, fmtUs(r.p50Us), fmtUs(r.p99Us), fmtUs(r.p999Us), status(r)]),
  );
}

export function s4Table(rs: readonly Row[], status: (r: Row) => string): string {
  return table(['variant', 'target', 'RSS per idle socket', 'ok runs'], rs.map((r) => [r.variant, PEER_LABEL[r.target], fmtBytes(r.rssPerSocketBytes), status(r)]));
}

export function s5Table(rs: readonly Row[], status: (r: Row) => string): string {
  return table(
    ['variant', 'target', 'server CPU per upgrade', 'upgrades/server-CPU-s', 'connect p99', 'longest stall (max of runs)', 'server CPU', 'busiest generator', 'other load', 'ok runs'],
    rs.map((r) => [r.variant, PEER_LABEL[r.target], fmtUs(r.cpuPerUpgradeUs), fmtInt(r.perServerCpuS), fmtUs(r.connectP99Us),
      fmtMs(r.stallMaxMs), pct(r.serverUtil), pct(r.clientUtilMax), pct(r.otherUtil), status(r)]),
  );
}

/** One table per scenario with every target's medians, in the registry's order; used by the terminal and results.md. */
export function rowsTables(rowsList: readonly Row[]): string {
  const parts: string[] = [];
  for (const view of SCENARIOS.flatMap((s) => s.views)) {
    const rs = rowsList.filter((r) => r.scenario === view.id);
    if (rs.length === 0) continue;
    const status = (r: Row): string => (r.ok === r.runs ? `${r.ok}/${r.runs}` : `${r.ok}/${r.runs} (${r.errors.join('; ').slice(0, 160)})`);
    parts.push(`### ${view.title}`, view.table(rs, status), '');
  }
  return parts.join('\n\n').replace(/\n{3,}/g, '\n\n').trimEnd();
}

export function s6Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const mib = (b: number): string => (Number.isFinite(b) ? `${(b / (1 << 20)).toFixed(0)} MiB` : 'n/a');
  const slope = (b: number): string => (Number.isFinite(b) ? `${(b / (1 << 20)).toFixed(2)} MiB/s` : 'n/a');
  const ran = (r: Row): string => `${x(r, 'ranSeconds').toFixed(0)} of ${x(r, 'plannedSeconds').toFixed(0)} s${r.notes['stoppedEarly'] !== undefined ? ` (${r.notes['stoppedEarly']})` : ''}`;
  return 'Healthy subscribers\' latency is publish-to-receive after the first seconds; RSS is the server\'s VmRSS sampled every second ' +
    '(idle: after every socket joined and the stalled ones stopped reading, before publishing); slope: least squares over the second half of the run; ' +
    '`closes seen`: what the stalled clients read when they read again at the end (close code, or how TCP ended), `closed by gateway`: its `sluice_clients_closed_total` by reason.\n\n' +
    table(
      ['variant', 'target', 'idle RSS', 'RSS at 10 s', 'max RSS', 'RSS at end', 'RSS slope, 2nd half', '(max - idle) / stalled', 'deliveries/s', 'server CPU',
        'healthy p50', 'healthy p99', 'p99 / no stalled', 'ran', 'closes seen by stalled', 'closed by gateway', 'ok runs'],
      rs.map((r) => [r.variant, PEER_LABEL[r.target], mib(x(r, 'idleRssBytes')), mib(x(r, 'rssAt10sBytes')), mib(x(r, 'maxRssBytes')), mib(x(r, 'rssEndBytes')),
        slope(x(r, 'rssSlopeSecondHalfBytesPerS')), fmtBytes(r.rssGrowthPerStalledBytes), fmtInt(r.perSec), pct(r.serverUtil),
        fmtUs(r.p50Us), fmtUs(r.p99Us), fmtRatio(r.p99VsBaseline), ran(r), r.notes['closesSeenByStalled'] ?? '-', r.notes['closedByGateway'] ?? '-', status(r)]),
    );
}

export function s7Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const n = (r: Row, k: string): string => r.notes[k] ?? '-';
  const f = (v: number, d = 0): string => (Number.isFinite(v) ? v.toFixed(d) : 'n/a');
  const sh = (v: number): string => (Number.isFinite(v) ? `${(v * 100).toFixed(0)}%` : 'n/a');
  return 'Times are client-side, from SIGTERM; buckets start at the drain delay and only whole buckets before the last close count; ' +
    '`within`: buckets whose closes are within +-20% of the target (rate per second, rate/10 per 100 ms); retryAfterMs: 10 bins over [1000, 6000], ' +
    'chi-square against uniform (9 df, 5% critical value 16.9).\n\n' +
    table(
      ['variant', 'closes (codes)', 'first / last close', 'drain time vs sockets/rate', 'closes/s min..max', 'seconds within', '100 ms buckets min..max', '100 ms within',
        'retryAfterMs min..max', 'retry bins', 'chi-square (p)', 'readiness polls (admin port)', 'exit', 'peak server CPU', 'findings', 'ok runs'],
      rs.map((r) => [r.variant, `${f(x(r, 'closes'))} ${n(r, 'closeCodes')}`, `${f(x(r, 'firstCloseMs'))} / ${f(x(r, 'lastCloseMs'))} ms`,
        `${f(x(r, 'drainS'), 2)} s vs ${f(x(r, 'expectedDrainS'), 2)} s (${f(x(r, 'drainVsExpected'), 2)}x)`,
        `${f(x(r, 'closesPerSecondMin'))}..${f(x(r, 'closesPerSecondMax'))}`, `${sh(r.drainSecondsWithin)} of ${f(x(r, 'seconds'))}`,
        `${f(x(r, 'buckets100Min'))}..${f(x(r, 'buckets100Max'))}`, `${sh(x(r, 'buckets100Within'))} of ${f(x(r, 'buckets100'))}`,
        `${f(x(r, 'retryMinMs'))}..${f(x(r, 'retryMaxMs'))}`, n(r, 'retryHist'), `${f(x(r, 'retryChi2'), 1)} (${f(x(r, 'retryChi2P'), 3)})`,
        `first ${n(r, 'readyFirst')}; ${n(r, 'readyStatuses')}; upgrade in the delay: ${n(r, 'upgradeDuringDelay')}`, `${f(x(r, 'exitCode'))} after ${f(x(r, 'exitAfterS'), 1)} s`, pct(x(r, 'peakServerCpu')),
        n(r, 'findings') === '' ? 'none' : n(r, 'findings'), status(r)]),
    );
}

export function s8Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const f = (v: number, d = 2): string => (Number.isFinite(v) ? v.toFixed(d) : '-');
  const vs = (v: number): string => (Number.isFinite(v) ? fmtRatio(v) : '-');
  const added = (us: number): string => (Number.isFinite(us) ? `${us >= 0 ? '+' : '-'}${fmtUs(Math.abs(us))}` : '-');
  const plus = (r: Row, master: string, replica: string, fmt: (v: number) => string): string =>
    (Number.isFinite(x(r, master)) ? `${fmt(x(r, master))}${Number.isFinite(x(r, replica)) ? ` + ${fmt(x(r, replica))}` : ''}` : '-');
  const pair = (a: number, b: number): string => (Number.isFinite(a) ? `${fmtUs(a)} / ${fmtUs(b)}` : '-');
  return 'S3\'s fan-out (one publisher, durable 64 B events, credit-bound) on one gateway without Redis, on one gateway with `REDIS_URL`, and on ' +
    'several gateway processes on one redis-server (publisher on node 0, subscriber processes spread over the nodes); with `--ack-replicas` R, those ' +
    'nodes again with `WS_REDIS_ACK_REPLICAS=R` and the redis-server followed by R replicas. `gateway CPU`: every gateway ' +
    'process, `Redis CPU`: redis-server (with replicas: `master + replicas`, summed; deliveries/(gateway+Redis)-CPU-s counts both), all from ' +
    '/proc/<pid>/stat, % of one core; `vs 1 node`: against the embedded single node of the same repeat; ' +
    '`cmds/event`: the gateways\' `sluice_redis_commands_total` over their durable `sluice_messages_published_total` (both summed over the nodes, deltas over ' +
    'the window); `Redis calls/event`: what redis-server executed (INFO commandstats, the script\'s inner calls included; by command in the JSON), ' +
    '`Redis CPU/event`: its CPU (10 ms ticks) over those events; `at rest`: the gateways\' CPU over 3 s with every socket joined before the ' +
    'publishing starts, and `above rest`: deliveries per gateway-CPU-s beyond it, against the embedded node\'s beyond its own; p99 per node: subscribers on ' +
    'the publisher\'s node / on the other nodes; `publish ack`: the publisher\'s send to its reply (with replicas: after the WAIT).\n\n' +
    table(
      ['variant', 'target', 'deliveries/s', 'gateway CPU', 'Redis CPU', 'deliveries/gateway-CPU-s', 'vs 1 node', 'gateway CPU at rest', 'above rest vs 1 node',
        'deliveries/(gateway+Redis)-CPU-s', 'vs 1 node',
        'cmds/event', 'Redis calls/event', 'Redis CPU/event', 'p50', 'p99', 'p99 publisher\'s node / others', 'p99 added vs 1 node', 'publish ack p50 / p99',
        'other load', 'ok runs'],
      rs.map((r) => [r.variant, PEER_LABEL[r.target], fmtInt(r.perSec), pct(r.serverUtil), plus(r, 'redisUtil', 'replicaUtil', pct),
        fmtInt(r.perServerCpuS), vs(x(r, 'perServerCpuVsOneNode')), Number.isFinite(x(r, 'restUtil')) ? pct(x(r, 'restUtil')) : '-',
        vs(x(r, 'aboveRestVsOneNode')), Number.isFinite(x(r, 'perTotalCpuS')) ? fmtInt(x(r, 'perTotalCpuS')) : '-',
        vs(x(r, 'perTotalCpuVsOneNode')), f(x(r, 'redisCommandsPerEvent'), 3), f(x(r, 'redisCallsPerEvent'), 1),
        plus(r, 'redisCpuUsPerEvent', 'replicaCpuUsPerEvent', fmtUs), fmtUs(r.p50Us), fmtUs(r.p99Us),
        pair(x(r, 'node0P99Us'), x(r, 'otherNodesP99Us')),
        added(x(r, 'p99AddedUs')), pair(x(r, 'ackP50Us'), x(r, 'ackP99Us')), pct(r.otherUtil), status(r)]),
    );
}

export function s9Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const n = (r: Row, k: string): string => r.notes[k] ?? '-';
  const f = (v: number, d = 0): string => (Number.isFinite(v) ? v.toFixed(d) : 'n/a');
  const ms = (v: number): string => (Number.isFinite(v) ? `${(v / 1000).toFixed(2)} s` : 'n/a');
  const cost = rs.find((r) => r.variant === 'refusal cost');
  rs = rs.filter((r) => r.variant !== 'refusal cost');
  const costLine = cost === undefined ? '' : `\n\nThe cost of a refusal (\`refusal cost\`, ${f(x(cost, 'requests'))} raw upgrade requests, ${f(x(cost, 'concurrency'))} in flight, ` +
    `each socket dropped at the answer's first bytes; the gateway's CPU per request): a 503 of the budget (WS_UPGRADE_RATE=1) ${f(x(cost, 'refusedUs'), 1)} us, ` +
    `an accepted upgrade (no budget) ${f(x(cost, 'acceptedUs'), 1)} us: ${f(x(cost, 'ratio'), 1)}x` +
    (Number.isFinite(x(cost, 'rawRefusedUs')) ? `; raw uWS, the same requests: ${f(x(cost, 'rawRefusedUs'), 1)} us for the same 503 written in its upgrade handler ` +
      `(the floor of this stack: the kernel's accept and close, uWS's HTTP parsing), ${f(x(cost, 'rawAcceptedUs'), 1)} us for an upgrade` : '') +
    `. ${status(cost)}`;
  return 'Every client connected to node A (url list [A, B] for the SDK), then A got SIGTERM (drain at the rate named, after its delay); ' +
    'times are from SIGTERM, client-side (welcome from B; clocks of one machine). `peak/s`: the busiest 100 ms x10; `in 1 s`: most arrivals in ' +
    'any 1 s window; `B counter`: B\'s `sluice_upgrades_total{outcome="accepted"}` polled every 100 ms, fastest growth over >= 100 ms / >= 1 s; ' +
    '`SDK wait`: the close\'s retryAfterMs and the wait the SDK chose (min / median / max); B CPU: % of one core, busiest 1 s; ' +
    '`refused for rate`: B\'s 503s for WS_UPGRADE_RATE (the SDK as in a browser cannot read them and backs off with full jitter).\n\n' +
    table(
      ['variant', 'back at B', 'closes by A (codes), first..last', 'first back', '50% back', '99% back', 'all back', '99% after first close',
        'peak/s (100 ms)', 'in 1 s', 'B counter peak/s (100 ms / 1 s)', 'attempts at B', 'retryAfterMs min..max', 'SDK wait min / median / max',
        'refused for rate', 'B CPU peak', 'B stall max', 'other load', 'findings', 'ok runs'],
      rs.map((r) => [r.variant, `${f(x(r, 'reconnected'))}/${f(x(r, 'onA'))}`,
        `${f(x(r, 'closes'))} ${n(r, 'closeCodes')}, ${ms(x(r, 'firstCloseMs'))}..${ms(x(r, 'lastCloseMs'))}`,
        ms(x(r, 'firstArrivalMs')), ms(x(r, 't50Ms')), ms(x(r, 't99Ms')), ms(x(r, 'tAllMs')), ms(x(r, 't99FromFirstCloseMs')),
        fmtInt(x(r, 'peakPerS')), fmtInt(x(r, 'peak1s')), `${fmtInt(x(r, 'serverPeakPerS'))} / ${fmtInt(x(r, 'serverPeak1s'))}`,
        f(x(r, 'attemptsB')),
        Number.isFinite(x(r, 'retryMinMs')) ? `${f(x(r, 'retryMinMs'))}..${f(x(r, 'retryMaxMs'))} ms` : '-',
        Number.isFinite(x(r, 'plannedMinMs')) ? `${f(x(r, 'plannedMinMs'))} / ${f(x(r, 'plannedMedianMs'))} / ${f(x(r, 'plannedMaxMs'))} ms` : '-',
        f(x(r, 'overBudget')), pct(x(r, 'peakServerCpu')), fmtMs(x(r, 'stallMaxMsB')), pct(r.otherUtil), n(r, 'findings') === '' ? 'none' : n(r, 'findings'), status(r)]),
    ) + costLine;
}

export function s10Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const ms = (v: number): string => (Number.isFinite(v) ? `${v.toFixed(v >= 10 ? 0 : 1)} ms` : 'n/a');
  const cpu = (v: number): string => (Number.isFinite(v) ? `${Math.max(0, v).toFixed(v >= 10 ? 0 : 1)}` : 'n/a');
  return 'One gateway per repeat (2 shard threads), measured with nothing connected, then with the sockets open and idle (each joined to ' +
    'a few topics), then with traffic (paced publishers and admin publishes fanning out to the sockets). Render: client-observed GET /metrics on the ' +
    'admin port over loopback, request to last byte, keep-alive; `sequential`: one at a time with a pause between; `burst`: that many at once. ' +
    '`CPU per scrape`: thread CPU (schedstat) over the sequential scrapes less the same thread\'s rate in a quiet window without scrapes, ' +
    'coordinator (main thread) / shard threads / other threads of the process, ms; `health`: GET /health/live after each scrape (the coordinator alone, ' +
    'no shard asked); `lag max`: the largest `sluice_eventloop_lag_max_seconds` (5 s windows) the phase\'s scrapes reported from 10 s after its quiet window began, ' +
    'coordinator / busiest shard; `waiting for a CPU`: the threads\' run-queue wait (schedstat run_delay) per second of the sequential scrapes, coordinator / both shards. ' +
    'Medians over repeats (max: the median of each repeat\'s max).\n\n' +
    table(
      ['variant', 'target', 'deliveries/s', 'sequential p50', 'p99', 'max', 'burst (size) p50 / p99 / max', 'burst done', 'bytes', 'series (families, histograms)',
        'CPU per scrape ms: coord / shards / other', 'health p50 / p99', 'lag max: coord / shards', 'waiting for a CPU ms/s: coord / shards', 'server CPU without scrapes', 'other load', 'within 50 ms', 'ok runs'],
      rs.map((r) => [r.variant, PEER_LABEL[r.target], Number.isFinite(x(r, 'deliveriesPerS')) && x(r, 'deliveriesPerS') > 0 ? fmtInt(x(r, 'deliveriesPerS')) : '-',
        ms(x(r, 'seqP50Ms')), ms(x(r, 'seqP99Ms')), ms(x(r, 'seqMaxMs')),
        `(${x(r, 'burstSize').toFixed(0)}) ${ms(x(r, 'burstP50Ms'))} / ${ms(x(r, 'burstP99Ms'))} / ${ms(x(r, 'burstMaxMs'))}`, ms(x(r, 'burstWallMaxMs')),
        fmtInt(x(r, 'bytes')), `${x(r, 'series').toFixed(0)} (${x(r, 'families').toFixed(0)}, ${x(r, 'histogramFamilies').toFixed(0)})`,
        `${cpu(x(r, 'coordinatorCpuPerScrapeMs'))} / ${cpu(x(r, 'shardsCpuPerScrapeMs'))} / ${cpu(x(r, 'otherThreadsCpuPerScrapeMs'))}`,
        `${ms(x(r, 'healthP50Ms'))} / ${ms(x(r, 'healthP99Ms'))}`, `${ms(x(r, 'lagMaxMsCoordinator'))} / ${ms(x(r, 'lagMaxMsShards'))}`,
        `${cpu(x(r, 'coordinatorWaitMsPerS'))} / ${cpu(x(r, 'shardsWaitMsPerS'))}`,
        pct(x(r, 'quietServerUtil')), pct(r.otherUtil), x(r, 'seqP99Ms') <= 50 ? 'yes' : '**no**', status(r)]),
    );
}

/** S11: server CPU per upgrade and per refresh, on the same gateway (WS_AUTH=jwt), and per upgrade without auth. */
export function s11Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const us = (v: number): string => (Number.isFinite(v) ? `${v.toFixed(v >= 100 ? 0 : 1)}us` : 'n/a');
  return 'Server CPU (utime+stime, every thread, /proc) over the storm / upgrades, or over the refresh rounds / accepted refreshes; every token is new to ' +
    'the gateway (its own jti), so each one is verified (HS256). `idle part`: the server\'s CPU rate in a quiet second with the sockets open times the ' +
    'rounds\' wall time, per refresh: what the figure holds that is not the refreshes\' own. Latency: connect-to-welcome (upgrades), send-to-reply (refreshes). ' +
    'Medians over repeats; ratios per repeat, then the median.\n\n' +
    table(
      ['variant', 'target', 'server CPU per op', 'ops/server-CPU-s', 'idle part', 'refresh / upgrade (jwt)', 'upgrade jwt / no auth', 'p50', 'p99',
        'server CPU', 'busiest generator', 'other load', 'ok runs'],
      rs.map((r) => [r.variant, PEER_LABEL[r.target], us(x(r, 'cpuPerOpUs')), fmtInt(r.perServerCpuS), us(x(r, 'idleCpuPerOpUs')),
        Number.isFinite(x(r, 'vsUpgrade')) ? fmtRatio(x(r, 'vsUpgrade')) : '-', Number.isFinite(x(r, 'vsNoAuth')) ? fmtRatio(x(r, 'vsNoAuth')) : '-',
        fmtUs(r.p50Us), fmtUs(r.p99Us), pct(r.serverUtil), pct(r.clientUtilMax), pct(r.otherUtil), status(r)]),
    );
}

/** S15: the connect hook beside jwt, the subscribe hook cold and warm beside a plain join, all on the gateway's CPU, the backend's apart. */
export function s15Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const us = (v: number): string => (Number.isFinite(v) ? `${v.toFixed(v >= 100 ? 0 : 1)}us` : 'n/a');
  const n = (v: number): string => (Number.isFinite(v) ? String(Math.round(v)) : 'n/a');
  return 'Gateway CPU (utime+stime, every thread, /proc) over the storm / upgrades, or over the joins / accepted joins; the backend (node:http in its own ' +
    'process on loopback, keep-alive) apart: its CPU over the same window / ops, and the calls it answered, by its own counter. `vs base`: (b) and (c) ' +
    'against (a) jwt, (d) and (e) against (f) the plain join, per repeat. `gateway hook calls`: what sluice_hook_connect_calls_total / ' +
    'sluice_hook_subscribe_calls_total moved by, by outcome. `other load`: the rest of the machine, the backend left out. Latency: connect-to-welcome (upgrades), send-to-reply (joins). Medians over repeats.\n\n' +
    table(
      ['variant', 'gateway CPU per op', 'ops/gateway-CPU-s', 'vs base', 'ops/s', 'p50', 'p99', 'backend CPU per op', 'backend calls', 'backend conns opened', 'gateway hook calls (connect; subscribe)',
        'gateway CPU', 'busiest generator', 'other load', 'ok runs'],
      rs.map((r) => [r.variant, us(x(r, 'cpuPerOpUs')), fmtInt(r.perServerCpuS), Number.isFinite(x(r, 'vsBase')) ? fmtRatio(x(r, 'vsBase')) : '-',
        fmtInt(r.perSec), fmtUs(r.p50Us), fmtUs(r.p99Us), us(x(r, 'backendCpuPerOpUs')), n(x(r, 'backendCalls')), n(x(r, 'backendConnections')),
        `${r.notes['gatewayHookConnect'] ?? '-'}; ${r.notes['gatewayHookSubscribe'] ?? '-'}`, pct(r.serverUtil), pct(r.clientUtilMax), pct(r.otherUtil), status(r)]),
    );
}

/** S17: WS_COMPRESSION off, shared and dedicated, per delivery: the gateway's CPU and the bytes on the wire. */
export function s17Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const off = (r: Row): Row | undefined => rs.find((o) => o.variant === `${r.notes['kind'] ?? r.variant.split(',')[0]}, off`);
  const rel = (v: number, base: number | undefined): string => (base !== undefined && Number.isFinite(v) && Number.isFinite(base) && base > 0 ? fmtRatio(v / base) : '-');
  return 'One publisher, `ws` subscribers offering permessage-deflate (declined with `off`), one topic; the gateway (WS_WORKERS=2) fresh per ' +
    'variant. `on the wire`: bytes the subscribers\' TCP sockets read (frame headers included) / deliveries; `event JSON`: the frame before ' +
    'compression; `vs off`: the same kind with compression off; `RSS over off per socket`: the gateway\'s RSS after the run minus that of the same kind with `off`, per subscriber (what a compressor costs a socket). Medians over repeats.\n\n' +
    table(['variant', 'server CPU per delivery', 'vs off', 'on the wire per delivery', 'vs off', 'event JSON', 'deliveries/server-CPU-s', 'RSS over off per socket', 'negotiated', 'other load', 'ok runs'],
      rs.map((r) => [r.variant, `${x(r, 'cpuPerDeliveryUs').toFixed(2)}us`, rel(x(r, 'cpuPerDeliveryUs'), off(r)?.extras['cpuPerDeliveryUs']),
        `${x(r, 'bytesPerDelivery').toFixed(1)} B`, rel(x(r, 'bytesPerDelivery'), off(r)?.extras['bytesPerDelivery']), `${Math.round(x(r, 'eventJsonBytes'))} B`,
        fmtInt(r.perServerCpuS), off(r) === undefined || off(r) === r ? '-' : fmtBytes((x(r, 'rssBytes') - x(off(r)!, 'rssBytes')) / x(r, 'subscribers')), String(Math.round(x(r, 'negotiated'))), pct(r.otherUtil), status(r)]));
}

/** S12: one revocation to node A, every socket of the user closed on both nodes. */
export function s12Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const ms = (v: number): string => (Number.isFinite(v) ? `${v.toFixed(v >= 100 ? 0 : 1)} ms` : 'n/a');
  return 'Times from the `POST /v1/revoke` to node A, as the clients saw each close (CLOCK_MONOTONIC, shared by the generator processes); ' +
    '`server done`: when each node\'s coordinator logged that every shard had carried it out (wall clock, ms); `client lag`: that node\'s last close ' +
    'at its client minus that line. Server CPU: both gateways over the request to the last close. Medians over repeats.\n\n' +
    table(
      ['variant', 'target', 'last close', 'p50 / p99', 'node A: p50 / last', 'node B: p50 / last', 'server done A / B', 'client lag A / B', 'admin answer',
        'close codes', 'server CPU per close', 'generator CPU per close', 'busiest generator', 'other load', 'under 1 s', 'ok runs'],
      rs.map((r) => [r.variant, PEER_LABEL[r.target], ms(x(r, 'lastCloseMs')), `${ms(x(r, 'p50Ms'))} / ${ms(x(r, 'p99Ms'))}`,
        `${ms(x(r, 'nodeAP50Ms'))} / ${ms(x(r, 'nodeALastMs'))}`, `${ms(x(r, 'nodeBP50Ms'))} / ${ms(x(r, 'nodeBLastMs'))}`,
        `${ms(x(r, 'nodeADoneMs'))} / ${ms(x(r, 'nodeBDoneMs'))}`, `${ms(x(r, 'nodeAClientLagMs'))} / ${ms(x(r, 'nodeBClientLagMs'))}`, ms(x(r, 'answerMs')),
        r.notes['closeCodes'] ?? '-', fmtUs(x(r, 'serverCpuUsPerClose')), fmtUs(x(r, 'genCpuUsPerClose')), pct(r.clientUtilMax), pct(r.otherUtil),
        x(r, 'lastCloseMs') < 1000 ? 'yes' : '**no**', status(r)]),
    );
}

/** S13: S1 on two arms of the gateway with WS_AUTH=jwt, without and with the limits and revocations. */
export function s13Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  return 'S1\'s load (100 sockets, each its own user and topic, 16 publishes in flight) against two arms, each a fresh gateway per repeat, ' +
    'in an order alternating by repeat; `limits / plain`: the limits arm\'s msgs per server-CPU-s over the plain arm\'s of the same repeat, median ' +
    '(every repeat\'s in the next column).\n\n' +
    table(
      ['variant', 'target', 'msgs/server-CPU-s', 'msgs/s', 'limits / plain', 'per repeat', 'server CPU', 'busiest generator', 'other load', 'bound', 'p50', 'p99', 'ok runs'],
      rs.map((r) => [r.variant, PEER_LABEL[r.target], fmtInt(r.perServerCpuS), fmtInt(r.perSec),
        Number.isFinite(x(r, 'vsPlain')) ? fmtRatio(x(r, 'vsPlain')) : '-', r.notes['ratiosAll'] ?? '-',
        pct(r.serverUtil), pct(r.clientUtilMax), pct(r.otherUtil), r.bound, fmtUs(r.p50Us), fmtUs(r.p99Us), status(r)]),
    );
}

/** S9: arrivals at node B per second (per 100 ms x10) after SIGTERM, one line per kind of client, A's closes as grey bars. */
export function renderStormSvg(samples: readonly Sample[]): string {
  const ss = samples.filter((s) => s.scenario === 'S9' && s.ok && (s.timeline?.length ?? 0) > 0);
  type B = { t: number; arrivals: number; server: number; closes: number };
  const tls = ss.map((s) => s.timeline as B[]);
  const width = 880;
  const top = 78 + ss.length * 16;
  const height = top + 330;
  const left = 70;
  const plotW = width - left - 30;
  const plotH = height - top - 50;
  const maxT = Math.max(1, ...tls.map((tl) => Math.ceil(((tl[tl.length - 1]?.t ?? 0) + 100) / 1000)));
  const peak = Math.max(1, ...tls.flatMap((tl) => tl.map((b) => Math.max(b.arrivals, b.closes) * 10)));
  const stepY = [500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000].find((st) => peak / st <= 8) ?? 200_000;
  const maxY = Math.ceil((peak * 1.05) / stepY) * stepY;
  const x = (sec: number): number => left + (sec / maxT) * plotW;
  const y = (v: number): number => top + plotH - (v / maxY) * plotH;
  const esc = (t: string): string => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const colors = ['#2c3e80', '#c0392b', '#3a7d44', '#8e44ad'];
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  const clients = ss[0]?.extra['clients'];
  out.push(`<text x="10" y="20" font-size="14" font-weight="bold">${esc(`S9 reconnect storm: ${String(clients ?? '?')} clients dropped by node A's drain, arrivals at node B`)}</text>`);
  out.push(`<text x="10" y="38" fill="#555">${esc('per 100 ms x10 = per second. solid: clients back at B (welcome, client-side); dotted: B\'s accepted-upgrades counter (polled);')}</text>`);
  out.push(`<text x="10" y="54" fill="#555">${esc('shaded: closes by A; dashed vertical: 99% back')}</text>`);
  ss.forEach((s, i) => {
    const e = s.extra;
    const line = `${s.variant}: 99% back ${(Number(e['t99Ms']) / 1000).toFixed(2)} s after SIGTERM, peak ${fmtInt(Number(e['peakPerS']))}/s, ${fmtInt(Number(e['peak1s']))} in 1 s`;
    out.push(`<text x="10" y="${74 + i * 16}" fill="${colors[i % colors.length]!}">${esc(line)}</text>`);
  });
  for (let v = 0; v <= maxY; v += stepY) {
    out.push(`<line x1="${left}" y1="${y(v)}" x2="${left + plotW}" y2="${y(v)}" stroke="#e4e4e4"/>`);
    out.push(`<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end" fill="#555">${fmtInt(v)}/s</text>`);
  }
  const pts = (tl: readonly B[], v: (b: B) => number): string => tl.map((b) => `${x((b.t + 50) / 1000).toFixed(1)},${y(v(b) * 10).toFixed(1)}`).join(' ');
  tls.forEach((tl, i) => {
    // A's closes of this run: a light area under a step of 100 ms.
    const c = colors[i % colors.length]!;
    const area = tl.flatMap((b) => [`${x(b.t / 1000).toFixed(1)},${y(b.closes * 10).toFixed(1)}`, `${x((b.t + 100) / 1000).toFixed(1)},${y(b.closes * 10).toFixed(1)}`]);
    const end = tl.length === 0 ? 0 : (tl[tl.length - 1]!.t + 100) / 1000;
    out.push(`<polygon fill="${c}" fill-opacity="0.12" stroke="none" points="${x(0)},${y(0)} ${area.join(' ')} ${x(end)},${y(0)}"/>`);
  });
  tls.forEach((tl, i) => {
    const c = colors[i % colors.length]!;
    out.push(`<polyline fill="none" stroke="${c}" stroke-width="1" stroke-dasharray="2 2" points="${pts(tl, (b) => b.server)}"/>`);
    out.push(`<polyline fill="none" stroke="${c}" stroke-width="1.5" points="${pts(tl, (b) => b.arrivals)}"/>`);
    const t99 = Number(ss[i]!.extra['t99Ms']);
    if (Number.isFinite(t99)) out.push(`<line x1="${x(t99 / 1000)}" y1="${top}" x2="${x(t99 / 1000)}" y2="${top + plotH}" stroke="${c}" stroke-dasharray="6 4"/>`);
  });
  const step = maxT > 40 ? 5 : maxT > 15 ? 2 : 1;
  for (let t = 0; t <= maxT; t += step) out.push(`<text x="${x(t)}" y="${top + plotH + 16}" text-anchor="middle" fill="#555">${t}s</text>`);
  out.push(`<text x="${left + plotW / 2}" y="${height - 10}" text-anchor="middle" fill="#555">seconds after SIGTERM to node A</text>`);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** Closes per second (bars, from 100 ms buckets summed per second) and per 100 ms x10 (line) against the target rate. */
export function renderDrainSvg(s: Sample): string {
  const tl = (s.timeline ?? []) as Array<{ t: number; closes: number }>;
  const rate = Number(s.extra['rate']);
  const delay = Number(s.extra['delayMs']);
  // Seconds counted from the end of the delay, as in the table; the last one is partial when the drain ended inside it.
  const perSec: number[] = [];
  let lastT = 0;
  for (const b of tl) {
    if (b.closes > 0) lastT = b.t + 100;
    if (b.t < delay) continue;
    const k = Math.floor((b.t - delay) / 1000);
    perSec[k] = (perSec[k] ?? 0) + b.closes;
  }
  for (let i = 0; i < perSec.length; i++) perSec[i] ??= 0;
  const width = 880;
  const height = 360;
  const left = 60;
  const top = 50;
  const plotW = width - left - 30;
  const plotH = height - top - 50;
  const maxT = Math.max(1, Math.ceil(delay / 1000 + perSec.length));
  const maxY = Math.max(rate * 1.5, ...perSec, ...tl.map((b) => b.closes * 10)) * 1.05;
  const x = (sec: number): number => left + (sec / maxT) * plotW;
  const y = (v: number): number => top + plotH - (v / maxY) * plotH;
  const esc = (t: string): string => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  out.push(`<text x="10" y="20" font-size="14" font-weight="bold">${esc(`S7 drain pacing: closes per second after SIGTERM (${s.variant})`)}</text>`);
  out.push(`<text x="10" y="38" fill="#555">${esc('bars: closes/s after the delay (green: within +-20%, red: outside, grey: last partial s); line: closes per 100 ms x10; dashed: target +-20%')}</text>`);
  out.push(`<rect x="${x(0)}" y="${top}" width="${x(delay / 1000) - x(0)}" height="${plotH}" fill="#eee"/>`);
  for (let v = 0; v <= maxY; v += maxY > 2000 ? 500 : maxY > 800 ? 200 : 100) {
    out.push(`<line x1="${left}" y1="${y(v)}" x2="${left + plotW}" y2="${y(v)}" stroke="#e4e4e4"/>`);
    out.push(`<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end" fill="#555">${v}</text>`);
  }
  perSec.forEach((c, i) => {
    const s0 = delay / 1000 + i;
    const partial = delay + (i + 1) * 1000 > lastT;
    const ok = c >= rate * 0.8 && c <= rate * 1.2;
    out.push(`<rect x="${x(s0) + 1}" y="${y(c)}" width="${Math.max(1, x(s0 + 1) - x(s0) - 2)}" height="${y(0) - y(c)}" fill="${partial ? '#bbb' : ok ? '#7fb685' : '#e08a7e'}"/>`);
  });
  out.push(`<polyline fill="none" stroke="#2c3e80" stroke-width="1" points="${tl.map((b) => `${x((b.t + 50) / 1000).toFixed(1)},${y(b.closes * 10).toFixed(1)}`).join(' ')}"/>`);
  for (const [v, w] of [[rate, 2], [rate * 0.8, 1], [rate * 1.2, 1]] as const) {
    out.push(`<line x1="${left}" y1="${y(v)}" x2="${left + plotW}" y2="${y(v)}" stroke="black" stroke-width="${w}" stroke-dasharray="6 4"/>`);
  }
  const step = maxT > 40 ? 5 : maxT > 15 ? 2 : 1;
  for (let t = 0; t <= maxT; t += step) out.push(`<text x="${x(t)}" y="${top + plotH + 16}" text-anchor="middle" fill="#555">${t}s</text>`);
  out.push(`<text x="${left + plotW / 2}" y="${height - 10}" text-anchor="middle" fill="#555">seconds after SIGTERM</text>`);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** Sluice/peer ratios, one row per (scenario, variant, Sluice build). */
export function ratiosTable(ratiosList: readonly Ratio[]): string {
  const peers: TargetName[] = ['uws', 'ws', 'sio'];
  const keys = [...new Set(ratiosList.map((r) => `${r.scenario}|${r.variant}|${r.sluice}`))];
  const body = keys.map((k) => {
    const [scenario, variant, sluice] = k.split('|') as [ScenarioId, string, TargetName];
    const head = HEADLINE[scenario];
    const cells = peers.map((p) => {
      const r = ratiosList.find((x) => x.scenario === scenario && x.variant === variant && x.sluice === sluice && x.peer === p);
      return r === undefined ? '-' : fmtRatio(r.value);
    });
    const goals = GOALS.filter((g) => g.scenario === scenario && g.peer !== null && (g.sluice === undefined || g.sluice === sluice))
      .map((g) => `${g.kind === 'min' ? '>=' : '<='} ${g.value}x ${PEER_LABEL[g.peer!]}`);
    return [`${scenario} ${variant}`, PEER_LABEL[sluice], head.label, head.higherIsBetter ? 'higher' : 'lower', ...cells, goals.join(', ') || '-'];
  });
  return table(['scenario', 'Sluice build', 'metric', 'better', 'Sluice/raw uWS', 'Sluice/ws', 'Sluice/Socket.IO', 'goal'], body);
}

export function goalsTable(goals: readonly GoalResult[]): string {
  return 'A goal with several variants (S1: 32 B and 1 KB) is held against the worse of them.\n\n' + table(['goal', 'Sluice build', 'measured', 'met'], goals.map((g) => {
    const f = g.goal.field;
    const v = f === 'rssPerSocketBytes' || f === 'rssGrowthPerStalledBytes' ? fmtBytes(g.measured)
      : f === 'rssSlopeBytesPerS' ? `${fmtBytes(g.measured)}/s` : f === 'stallMaxMs' ? fmtMs(g.measured)
      : f === 'renderP99Ms' || f === 'revokeLastCloseMs' ? (Number.isFinite(g.measured) ? `${g.measured.toFixed(1)} ms` : 'n/a')
      : f === 'drainSecondsWithin' ? pct(g.measured) : fmtRatio(g.measured);
    return [g.goal.text, PEER_LABEL[g.sluice], v, g.met === null ? 'not measured' : g.met ? 'yes' : '**no**'];
  }));
}

export function gatesTable(gates: readonly GateResult[]): string {
  return table(['gate (Sluice 2 workers vs the peer, same run)', 'measured', 'gate', 'calibration', 'goal', 'result'], gates.map((g) => [
    `${g.gate.scenario} ${g.gate.variant}: ${HEADLINE[g.gate.scenario].label} vs ${PEER_LABEL[g.gate.peer]}`, `${fmtRatio(g.measured)} (${g.pairs} pairs)`,
    `${g.gate.kind === 'min' ? '>=' : '<='} ${g.gate.value}x`, g.gate.why, g.gate.goal, g.pass ? 'pass' : 'FAIL',
  ]));
}

export function methodSection(rec: RunRecord): string {
  const m = rec.machine;
  const cfg = rec.config;
  const lines = [
    `Run \`${rec.command}\` from ${rec.startedAt} to ${rec.finishedAt}; raw samples in \`benchmarks/runs/\` (not committed).`,
    ...(rec.merged ?? []).map((r) => `${r.scenarios.join(', ')} from run \`${r.command}\` (\`${r.file}\`) from ${r.startedAt} to ${r.finishedAt}, Sluice build \`${r.sluiceBuild.commit}\`${r.sluiceBuild.dirtyFiles > 0 ? ` plus ${r.sluiceBuild.dirtyFiles} uncommitted files under apps/ and packages/` : ''}${r.sluiceBuild.changedDuringRun !== undefined ? ` (**changed during the run**: ${r.sluiceBuild.changedDuringRun})` : ''}; the rest of this section describes the first run.`),
    '',
    `- Machine: ${m.cpuModel}, ${m.cores} cores, ${m.memGiB} GiB, Linux ${m.kernel}, Node ${m.node}. Server and load generator share the ${m.cores} cores; all traffic is loopback.`,
    `- Sluice build: commit \`${rec.sluiceBuild.commit}\`${rec.sluiceBuild.dirtyFiles > 0 ? ` plus ${rec.sluiceBuild.dirtyFiles} uncommitted files under apps/ and packages/` : ''}${rec.sluiceBuild.changedDuringRun !== undefined ? ` at the start of the run (**changed during the run**: ${rec.sluiceBuild.changedDuringRun})` : ''}, ${rec.sluiceBuild.runs === 'build' ? "its build run by the test kit's `startGateway` (`node dist/main.js` in apps/gateway, made by `pnpm build` from that tree)" : "run from source by the test kit's `startGateway` (`node --import tsx src/main.ts` in apps/gateway)"}, embedded mode (no Redis${rec.samples.some((s) => s.scenario === 'S8') ? '; S8 also in cluster mode, below' : ''}), \`LOG_LEVEL=info\`, per-socket, per-tenant and per-IP limits lifted (see src/lib/server.ts); every other setting at its default.`,
    `- Targets (each its own process, fresh for every measurement; the peers from the repo root under tsx${rec.sluiceBuild.runs === 'build' ? ', Sluice from its build as above' : ''}):`,
    ...Object.values(TARGETS).filter((t) => rec.samples.some((s) => s.target === t.name)).map((t) => `  - ${PEER_LABEL[t.name]}: ${t.describe}`),
    '- Every peer speaks the Sluice protocol subset the scenarios use (Socket.IO: the same job in its own protocol): on `join` it subscribes the socket and replies; on `publish` it parses the JSON frame, replies with the `ref` and an id, and sends the event `{"type":"event","topic","id","data"}` to every subscriber of the topic, the sender included. raw uWS: `ws.send(reply)`, `ws.publish(topic, event)` for the others and `ws.send(event)` for the sender. ws: `Map<topic, Set<socket>>`, the event serialized once into a Buffer and sent in a loop. Socket.IO: `socket.join(topic)`, the ack callback, `io.to(topic).emit("event", ...)`.',
    '- Load generator: node:net sockets, pre-built masked frames with fixed-width digit fields patched in place, one write per socket per received chunk, frames split by header only (a reply is told from an event by its first bytes). Timestamps (CLOCK_MONOTONIC, us) travel in the publish `ref`/ack id and in `data.t`; latency is receive time minus that stamp, in HDR histograms merged across processes.',
    '- CPU: utime+stime of the server process (all its threads) from /proc/<pid>/stat, over the measurement window only (after warm-up). Headline metric: messages per server-CPU-second, which holds up on a shared 2-core machine far better than messages per wall second.',
    '- `other load`: CPU the rest of the machine used during the window (other processes, interrupts), in % of one core, worst repeat; high values mean wall rates and latencies of that row were disturbed from outside (per-CPU-second figures much less so).',
    '- `bound`: `client` when the busiest generator process used >= 90% of a core while the server used < 90% of the cores it can use (min(threads, cores)); `server` when the server did; `machine` when neither did but server + generators used >= 90% of all cores; `none` otherwise.',
    `- Repeats: ${String(cfg['repeats'])}, targets interleaved (order rotated each repeat). Tables show medians over the successful repeats; ratios are the median of per-repeat ratios.`,
    '- Scenario settings (see README for what each field does):',
    ...Object.entries((cfg['scenarios'] ?? {}) as Record<string, Record<string, unknown>>).map(([k, v]) =>
      `  - ${k}: ${Object.entries(v).filter(([f]) => f !== 'scenario').map(([f, x]) => `${f} ${JSON.stringify(x)}`).join(', ')}`),
    ...(rec.samples.some((s) => s.scenario === 'S9') ? ['- S9 (reconnect storm): per kind of client, two fresh gateway processes of the same command and settings (embedded mode, no Redis): node A with `WS_DRAIN_DELAY_MS`, `WS_DRAIN_RATE` (as configured) and `WS_DRAIN_MAX_MS` (clients / rate + delay + 10 s), node B with `WS_DRAIN_RATE=1000000` (used only when it is stopped, after the clients left); the clients in child processes of ~2500 each (`@sluice/client` on `ws`, or plain `ws`), from 8 loopback source addresses. Not part of `ci`.'] : []),
    ...(rec.samples.some((s) => ['S11', 'S12', 'S13'].includes(s.scenario)) ? ['- S11-S13 (issue 17): the gateway with `WS_AUTH=jwt` (HS256; tokens signed by the generators, one per socket and refresh, each new to the gateway\'s cache) and the kit\'s `ADMIN_TOKEN`; S12 on two nodes in cluster mode on one private redis-server per repeat; S13 with a second arm adding `WS_USER_MSG_LIMIT`, `WS_TENANT_CONNECT_LIMIT`, `WS_MAX_USER_SOCKETS` (never reached) and revocations of other users. Each waits up to 20 s for a quiet machine before its timed parts. Not part of `ci`.'] : []),
    ...(rec.samples.some((s) => s.scenario === 'S15') ? ['- S15 (issue 19): one backend process for the run (`src/lib/hook-backend.ts`: node:http on 127.0.0.1, keep-alive; admits `?token=u<N>` as user `u<N>`, allows every subscribe with `cacheMs` 600000); per repeat a gateway with `WS_AUTH=jwt` (S11\'s tokens), then one with `WS_AUTH=hook`, `WS_CONNECT_HOOK_URL`, `WS_SUBSCRIBE_HOOK_URL`, `WS_SUBSCRIBE_HOOK_TOPICS=room:*` and the kit\'s `ADMIN_TOKEN`, other hook settings default. Each timed part waits up to 20 s for a quiet machine. Not part of `ci`.'] : []),
    ...(rec.samples.some((s) => s.scenario === 'S8') ? ['- S8 (cluster mode): the same gateway command and settings plus `REDIS_URL` of one private redis-server (`startRedis()` of `@sluice/redis/testing`: loopback, persistence off, flushed before each measurement), started fresh every repeat; gateway processes fresh for every measurement. The embedded single node of each repeat is measured first, then one node on Redis, then the nodes on Redis' +
      `${rec.samples.some((s) => s.scenario === 'S8' && s.variant.includes('WS_REDIS_ACK_REPLICAS')) ? ', then (`--ack-replicas` R) R private redis-servers made its replicas (`REPLICAOF`, link up, caught up with the master\'s offset after each flush) and the nodes again with `WS_REDIS_ACK_REPLICAS=R` (`WS_REDIS_ACK_TIMEOUT_MS` default)' : ''}.`] : []),
    '- S5 stall: the longest event-loop delay since the server started (its start-up and the 300 warm-up upgrades included), sampled every 10 ms, so a reading includes up to 10 ms of sampling interval; the JSON keeps the reading taken just before the storm as `stallMaxMsBefore`.',
  ];
  return lines.join('\n');
}

/** Bars of "Sluice advantage" per ratio: ratio, or 1/ratio where lower is better; log scale; goal ticks. */
export function renderSvg(rec: RunRecord, sluice: TargetName = 'sluice'): string {
  const rs = rec.ratios.filter((r) => r.sluice === sluice && Number.isFinite(r.value));
  const rowH = 22;
  const left = 250;
  const width = 880;
  const plotW = width - left - 70;
  const top = 56;
  const height = top + rs.length * rowH + 50;
  const minX = 0.05;
  const maxX = 20;
  const x = (v: number): number => left + (Math.log10(Math.min(maxX, Math.max(minX, v))) - Math.log10(minX)) / (Math.log10(maxX) - Math.log10(minX)) * plotW;
  const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  out.push(`<text x="10" y="20" font-size="14" font-weight="bold">${esc(`${PEER_LABEL[sluice]} vs peers, same run: Sluice's advantage (log scale; > 1 = Sluice better)`)}</text>`);
  out.push(`<text x="10" y="38" fill="#555">${esc(`rates: Sluice/peer; costs (memory, CPU per upgrade, p99): peer/Sluice; black tick = goal; ${rec.machine.cores} cores, Node ${rec.machine.node}, ${rec.finishedAt.slice(0, 10)}`)}</text>`);
  for (const t of [0.1, 0.2, 0.5, 1, 2, 5, 10]) {
    out.push(`<line x1="${x(t)}" y1="${top - 4}" x2="${x(t)}" y2="${top + rs.length * rowH}" stroke="${t === 1 ? '#333' : '#ddd'}"/>`);
    out.push(`<text x="${x(t)}" y="${top + rs.length * rowH + 16}" text-anchor="middle" fill="#555">${t}x</text>`);
  }
  rs.forEach((r, i) => {
    const y = top + i * rowH;
    const adv = r.higherIsBetter ? r.value : 1 / r.value;
    const goal = GOALS.find((g) => g.scenario === r.scenario && g.peer === r.peer && (g.sluice === undefined || g.sluice === sluice));
    const goalAdv = goal === undefined ? undefined : r.higherIsBetter ? goal.value : 1 / goal.value;
    const met = goalAdv === undefined ? adv >= 1 : adv >= goalAdv;
    out.push(`<text x="${left - 8}" y="${y + 15}" text-anchor="end">${esc(`${r.scenario} ${r.variant} vs ${PEER_LABEL[r.peer]}`)}</text>`);
    const x0 = x(1);
    const x1 = x(adv);
    out.push(`<rect x="${Math.min(x0, x1)}" y="${y + 4}" width="${Math.max(1, Math.abs(x1 - x0))}" height="${rowH - 8}" fill="${met ? '#3a7d44' : '#c0392b'}"/>`);
    out.push(`<text x="${Math.max(x0, x1) + 4}" y="${y + 15}" fill="#333">${adv.toFixed(2)}x</text>`);
    if (goalAdv !== undefined) out.push(`<line x1="${x(goalAdv)}" y1="${y + 1}" x2="${x(goalAdv)}" y2="${y + rowH - 1}" stroke="black" stroke-width="2"/>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** S14: the load phases (joins, churn, Socket.IO's room join), who is here (presence_state, the presence frame, the admin read, fetchSockets), the SIGKILL. */
export function s14Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const n = (v: number, d = 0): string => (Number.isFinite(v) ? v.toFixed(d) : '-');
  const ms = (v: number): string => (Number.isFinite(v) ? `${v.toFixed(v >= 100 ? 0 : 1)} ms` : '-');
  const us = (v: number): string => (Number.isFinite(v) ? `${v.toFixed(v >= 100 ? 0 : 1)}us` : '-');
  const b = (v: number): string => (Number.isFinite(v) ? fmtBytes(v) : '-');
  const isProbe = (r: Row): boolean => r.variant.startsWith('who is here');
  const isKill = (r: Row): boolean => r.variant.startsWith('SIGKILL');
  const isFetch = (r: Row): boolean => r.variant.includes('fetchSockets');
  const load = rs.filter((r) => !isProbe(r) && !isKill(r) && !isFetch(r));
  const parts: string[] = [];
  parts.push('Joins and leaves paced by the generators; `server CPU per op`: both nodes\' CPU over the phase / joins and leaves answered (`idle part`: the nodes\' ' +
    'idle rate just before, times the phase\'s wall time, per op); `Redis calls/op`: the gateways\' `sluice_presence_redis_calls_total` (every op label), ' +
    '`redis-server cmds/op`: INFO commandstats over the phase (every command, a script\'s inner calls, the leases and the bus too); per socket per second: ' +
    'presence_diff frames and payload bytes the generators received over the sockets joined, mean over the phase (max: the busiest second); ' +
    '`diff gap`: between two diffs on one socket, min / p50; `wrong`: joined sockets whose count (state, then + joins - leaves) was not the admin API\'s ' +
    'once the phase settled (checked); memory: RSS of both nodes (lowest over 1 s) after the phase less before it, per member or socket, and redis-server\'s used_memory.\n\n' +
    table(
      ['phase', 'target', 'ops', 'ops/s', 'server CPU per op', 'idle part', 'Redis calls/op', 'redis-server cmds/op', 'diff frames/socket/s (max)',
        'diff bytes/socket/s (max)', 'presence_state size, p50 / p99', 'diff gap min / p50', 'wrong (checked), settled in', 'memory per member: nodes / Redis',
        'other load', 'ok runs'],
      load.map((r) => [r.variant, PEER_LABEL[r.target], n(x(r, 'ops')), fmtInt(r.perSec), us(x(r, 'cpuPerOpUs')), us(x(r, 'idleCpuPerOpUs')),
        n(x(r, 'gatewayRedisCallsPerOp'), 4), n(x(r, 'redisCommandsPerOp'), 3),
        Number.isFinite(x(r, 'framesPerSocketS')) && x(r, 'diffFrames') > 0 ? `${n(x(r, 'framesPerSocketS'), 2)} (${n(x(r, 'framesPerSocketSMax'), 2)})` : '-',
        Number.isFinite(x(r, 'bytesPerSocketS')) && x(r, 'diffFrames') > 0 ? `${b(x(r, 'bytesPerSocketS'))} (${b(x(r, 'bytesPerSocketSMax'))})` : '-',
        x(r, 'states') > 0 ? `${b(x(r, 'stateBytesAvg'))}, ${ms(x(r, 'stateP50Ms'))} / ${ms(x(r, 'stateP99Ms'))}` : '-',
        x(r, 'gaps') > 0 ? `${ms(x(r, 'gapMinMs'))} / ${ms(x(r, 'gapP50Ms'))}` : '-',
        Number.isFinite(x(r, 'checked')) && x(r, 'checked') > 0 ? `${n(x(r, 'wrongCounts'))} (${n(x(r, 'checked'))}), ${ms(x(r, 'settleMs'))}` : '-',
        Number.isFinite(x(r, 'rssPerMemberBytes')) ? `${b(x(r, 'rssPerMemberBytes'))} / ${b(x(r, 'redisBytesPerMember'))}`
          : Number.isFinite(x(r, 'rssPerSocketBytes')) ? `per socket: ${b(x(r, 'rssPerSocketBytes'))} / ${b(x(r, 'redisBytesPerSocket'))}` : '-',
        pct(r.otherUtil), status(r)]),
    ));
  const probe = rs.filter(isProbe);
  const fetchRows = rs.filter(isFetch);
  if (probe.length > 0 || fetchRows.length > 0) {
    const body: string[][] = [];
    for (const r of probe) {
      const m = x(r, 'members');
      for (const [node, what] of [['A', 'node A (its replica)'], ['B', 'node B (its replica)'], ['C', 'a node just started (reads the others from Redis)']] as const) {
        if (!Number.isFinite(x(r, `stateMs${node}`))) continue;
        body.push([`Sluice: a new socket's presence_state, ${what}`, `${ms(x(r, `stateMs${node}`))} (${ms(x(r, `stateMaxMs${node}`))})`, b(x(r, `stateBytes${node}`)),
          `${n(x(r, `listed${node}`))} of ${n(x(r, `count${node}`))}`, `of ${n(m)}; reply to the join ${ms(x(r, `replyMs${node}`))}`, status(r)]);
      }
      body.push(['Sluice: `presence` frame on that socket (A)', ms(x(r, 'queryMsA')), b(x(r, 'queryBytesA')), `- of ${n(x(r, 'queryCountA'))}`, 'from the shard\'s replica', status(r)]);
      body.push(['Sluice: `GET /v1/presence` (admin port, A / B)', `${ms(x(r, 'adminMsA'))} / ${ms(x(r, 'adminMsB'))}`, b(x(r, 'adminBytes')),
        `${n(x(r, 'adminListed'))} of ${n(x(r, 'adminCount'))}`, 'from the topic\'s owner shard', status(r)]);
    }
    for (const r of fetchRows) {
      body.push([`Socket.IO: \`io.in(room).fetchSockets()\` on server A (${n(x(r, 'fetches'))} calls)`, `${ms(x(r, 'fetchP50Ms'))} (${ms(x(r, 'fetchMaxMs'))})`,
        b(x(r, 'fetchBytes')), `${n(x(r, 'fetchCount'))} of ${n(x(r, 'fetchCount'))}`,
        `${n(x(r, 'fetchLocal'))} local; both servers' CPU ${ms(x(r, 'cpuPerFetchMs'))} per call, redis-server ${ms(x(r, 'redisCpuPerFetchMs'))}; from B ${ms(x(r, 'fetchFromBMs'))}`, status(r)]);
    }
    parts.push('Who is in the room once every user joined: Sluice\'s answers list at most `WS_PRESENCE_MAX_USERS` users and always the full `count`; ' +
      'Socket.IO\'s fetchSockets() returns every socket (id, handshake, rooms, data; `bytes`: that as JSON). Times: client-side (probe: join sent to the state; ' +
      'fetchSockets: inside server A, call to promise), median (max).\n\n' +
      table(['who is here', 'time', 'bytes', 'users listed of counted', 'notes', 'ok runs'], body));
  }
  const kill = rs.filter(isKill);
  if (kill.length > 0) {
    parts.push('Node B SIGKILLed with every user joined: `admin`: node A\'s `GET /v1/presence` (polled every 100 ms) first counts only A\'s users; ' +
      '`every socket on A`: the last time a socket on A saw its count move, from the kill (median socket beside it); `nodes`: A\'s `sluice_cluster_nodes` drops to 1; ' +
      '`bound`: B\'s lease (TTL/2) + A\'s renewal period (TTL/4) + one diff interval.\n\n' +
      table(['variant', 'admin count at A\'s users', 'every socket on A (median socket)', 'A\'s observers', 'cluster_nodes 1', 'bound', 'within TTL', 'wrong (checked)', 'ok runs'],
        kill.map((r) => [r.variant, ms(x(r, 'goneAdminMs')), `${ms(x(r, 'goneAllSocketsMs'))} (${ms(x(r, 'goneP50SocketsMs'))})`, r.notes['goneObserversMs'] ?? '-',
          ms(x(r, 'nodesDropMs')), ms(x(r, 'boundMs')), x(r, 'goneAdminMs') <= x(r, 'ttlMs') ? 'yes' : '**no**', `${n(x(r, 'wrongCounts'))} (${n(x(r, 'checked'))})`, status(r)])));
  }
  return parts.join('\n\n');
}

/** S14: per second over the run, from the presence join on: joins and leaves sent, diff frames and bytes per joined socket, the nodes' CPU; phases shaded. */
export function renderPresenceSvg(samples: readonly Sample[]): string {
  const s = samples.find((x) => x.scenario === 'S14' && (x.timeline?.length ?? 0) > 0);
  type P = { t: number; phase: string; joined: number; diffFrames: number; diffBytes: number; stateFrames: number; stateBytes: number; ops: number; cpu: number };
  const all = (s?.timeline ?? []) as P[];
  // From the second before the presence join (the sampler starts during the quiet wait before it).
  const first = all.findIndex((p) => p.phase === 'join');
  const tl = all.slice(Math.max(0, first - 1));
  const kill = samples.find((x) => x.scenario === 'S14' && x.variant.startsWith('SIGKILL') && x.repeat === (s?.repeat ?? 0));
  const width = 900;
  const left = 80;
  const plotW = width - left - 30;
  const panelH = 110;
  const gap = 28;
  const top = 96;
  const panels = 4;
  const height = top + panels * (panelH + gap) + 30;
  const t0 = tl.length > 0 ? tl[0]!.t : 0;
  const maxT = Math.max(1, Math.ceil((tl[tl.length - 1]?.t ?? 1) - t0));
  const x = (sec: number): number => left + ((sec - t0) / maxT) * plotW;
  const esc = (t: string): string => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  const e = s?.extra ?? {};
  out.push(`<text x="10" y="20" font-size="14" font-weight="bold">${esc(`S14 presence at scale: ${String(e['members'] ?? '?')} users on one topic over two nodes, per second`)}</text>`);
  out.push(`<text x="10" y="38" fill="#555">${esc(`WS_PRESENCE_DIFF_MS ${String(e['diffMs'] ?? '?')}; frames and bytes are what the generators received, over the sockets joined at the time`)}</text>`);
  out.push(`<text x="10" y="54" fill="#555">${esc(kill === undefined ? '' : `dashed: node B SIGKILLed; dotted: node A's admin count without B's users (${String(kill.extra['goneAdminMs'] ?? '?')} ms later)`)}</text>`);
  // Phases: contiguous runs of one label, "settle" folded into its phase.
  const segs: Array<{ name: string; from: number; to: number }> = [];
  for (const p of tl) {
    const name = p.phase.replace(/ settle$/, '');
    const last = segs[segs.length - 1];
    if (last !== undefined && last.name === name) last.to = p.t;
    else segs.push({ name, from: (last?.to ?? t0), to: p.t });
  }
  const panel = (i: number, title: string, series: Array<{ v: (p: P) => number; color: string; dash?: string }>, fmt: (v: number) => string, ref?: number): void => {
    const py = top + i * (panelH + gap);
    const vals = tl.flatMap((p) => series.map((sr) => sr.v(p))).filter(Number.isFinite);
    const maxV = Math.max(ref !== undefined ? ref * 1.5 : 0, ...vals, 1e-9) * 1.08;
    const y = (v: number): number => py + panelH - (Math.min(v, maxV) / maxV) * panelH;
    segs.forEach((sg, k) => {
      if (k % 2 === 1) out.push(`<rect x="${x(sg.from).toFixed(1)}" y="${py}" width="${Math.max(0, x(sg.to) - x(sg.from)).toFixed(1)}" height="${panelH}" fill="#f1f3f7"/>`);
      if (i === 0) out.push(`<text x="${((x(sg.from) + x(sg.to)) / 2).toFixed(1)}" y="${py - 4}" text-anchor="middle" fill="#333" font-size="10">${esc(sg.name)}</text>`);
    });
    out.push(`<text x="${left}" y="${py - (i === 0 ? 16 : 4)}" fill="#222" font-weight="bold">${esc(title)}</text>`);
    for (const f of [0, 0.5, 1]) {
      const v = maxV * f / 1.08;
      out.push(`<line x1="${left}" y1="${y(v).toFixed(1)}" x2="${left + plotW}" y2="${y(v).toFixed(1)}" stroke="#e2e2e2"/>`);
      out.push(`<text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end" fill="#555" font-size="10">${esc(fmt(v))}</text>`);
    }
    if (ref !== undefined) out.push(`<line x1="${left}" y1="${y(ref).toFixed(1)}" x2="${left + plotW}" y2="${y(ref).toFixed(1)}" stroke="black" stroke-dasharray="6 4"/>`);
    for (const sr of series) {
      const pts = tl.filter((p) => Number.isFinite(sr.v(p))).map((p) => `${x(p.t - 0.5).toFixed(1)},${y(sr.v(p)).toFixed(1)}`).join(' ');
      out.push(`<polyline fill="none" stroke="${sr.color}" stroke-width="1.5"${sr.dash === undefined ? '' : ` stroke-dasharray="${sr.dash}"`} points="${pts}"/>`);
    }
    const killAt = tl.find((p) => p.phase === 'kill')?.t;
    if (killAt !== undefined) {
      out.push(`<line x1="${x(killAt - 1).toFixed(1)}" y1="${py}" x2="${x(killAt - 1).toFixed(1)}" y2="${py + panelH}" stroke="#c0392b" stroke-dasharray="6 3"/>`);
      const gone = Number(kill?.extra['goneAdminMs']);
      if (Number.isFinite(gone)) out.push(`<line x1="${x(killAt - 1 + gone / 1000).toFixed(1)}" y1="${py}" x2="${x(killAt - 1 + gone / 1000).toFixed(1)}" y2="${py + panelH}" stroke="#c0392b" stroke-dasharray="2 2"/>`);
    }
  };
  const per = (a: number, j: number): number => (j > 0 ? a / j : NaN);
  panel(0, 'joins + leaves sent per second (blue); sockets joined / 100 (grey)', [{ v: (p) => p.ops, color: '#2c3e80' }, { v: (p) => p.joined / 100, color: '#999', dash: '3 3' }],
    (v) => fmtInt(v));
  panel(1, 'presence_diff frames per joined socket per second (dashed: 1 per WS_PRESENCE_DIFF_MS)', [{ v: (p) => per(p.diffFrames, p.joined), color: '#3a7d44' }],
    (v) => v.toFixed(2), 1000 / Number(e['diffMs'] ?? 1000));
  panel(2, 'presence bytes per joined socket per second: presence_diff (green), presence_state (dotted)',
    [{ v: (p) => per(p.diffBytes, p.joined), color: '#3a7d44' }, { v: (p) => per(p.stateBytes, p.joined), color: '#8e44ad', dash: '2 2' }], (v) => fmtBytes(v));
  panel(3, 'both nodes\' CPU, cores', [{ v: (p) => p.cpu, color: '#c0392b' }], (v) => v.toFixed(2));
  const step = maxT > 200 ? 20 : maxT > 80 ? 10 : maxT > 30 ? 5 : 2;
  const yAxis = top + panels * (panelH + gap) - gap + 16;
  for (let t = 0; t <= maxT; t += step) out.push(`<text x="${x(t0 + t).toFixed(1)}" y="${yAxis}" text-anchor="middle" fill="#555">${t}s</text>`);
  out.push(`<text x="${left + plotW / 2}" y="${height - 6}" text-anchor="middle" fill="#555">seconds from the start of the presence join</text>`);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
