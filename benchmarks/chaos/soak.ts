// pnpm chaos soak (issue 21): the chaos cluster (Redis, nodes A and B, two
// HAProxy processes) under 10,000 clients for 30 minutes with churn, and
// whether the processes' memory and descriptors stay flat once warm.
//
//   node --import tsx chaos/main.ts soak [--minutes 30] [--clients 10000] ...   (--help: every option)
//
// The load, for the whole run:
//
// - the chaos fleet (fleet.ts): SDK clients through both load balancers,
//   joining durable topics and keyed feeds, 2% publishing durable events with
//   idempotency keys (the roles of `pnpm chaos`);
// - churn: every 5 s, sessions of fleet clients picked at random are cut at
//   the load balancer (`shutdown session` on HAProxy's admin socket), `churn
//   pct` of the clients a minute: the client's connection drops as on a
//   mobile network, and the SDK connects again (a new socket through a load
//   balancer, joins with `since`);
// - slow readers (this file run with --soak-child): raw `ws` sockets from
//   127.0.0.11 through the load balancers, each joined to `slow topics`
//   durable topics, stopping reading (the TCP socket paused) for `stall
//   seconds` and reading again, over and over, each on its own phase; they
//   ping every 20 s so the heartbeat does not close them, and a closed one
//   connects again and joins with `since`;
// - every `drain every` minutes (the first half a period in) node B is
//   drained (SIGTERM), waited for, its clients waited back on A, started
//   again and waited UP in both load balancers. A is never restarted, so
//   that its series covers the run.
//
// Every `sample seconds`: per node, RSS (every process of its tree, VmRSS),
// V8 heap in use (sluice_heap_used_bytes, summed over its threads), open
// descriptors (/proc/<pid>/fd of its tree) and sockets
// (sluice_connected_sockets); Redis used_memory and used_memory_rss (INFO
// memory) and its keys; the clients open. After the warm-up, a least-squares
// line per series of A (its time coefficient with A's socket count as a
// second regressor: memory that follows the sockets A holds, which rise at
// each drain of B and fall as churn moves clients back, is no leak) and of
// Redis (from its own warm-up, by default one minute past WS_HISTORY_TTL_MS:
// until then Redis fills with history by design), reported per hour and as a
// share of the mean, "flat" under `threshold pct` per hour. At the end, the
// chaos scenarios' check: publishing stops, outboxes empty, a fence on every
// topic, every acknowledged publish delivered to every subscriber once and,
// when it is still inside WS_HISTORY_TTL_MS, in history once.
//
// Writes the report (markdown), the chart (SVG) and every sample (JSON).

import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { basename, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import WebSocket from 'ws';
import { decodeServerFrame } from '@sluice/protocol';
import { metricByLabel, metricSum, parseMetrics } from '@sluice/gateway/testing';
import { ackedByTopic, checkHistory, mergeDeliveryChecks, type Acked, type DeliveryCheck, type HistoryCheck, type HistoryEvent } from './analysis.ts';
import { Cluster, type GatewayNode } from './cluster.ts';
import { durableTopic, Fleet, keyedTopic, topicsOf, type Roles } from './fleet.ts';
import { connectPatiently, defaultConfig, fenceAndWait, until } from './scenarios.ts';
import { RpcChild, serveRequests } from '../src/lib/child-rpc.ts';
import { BENCH_ROOT } from '../src/lib/spawn.ts';
import { commit, version } from './stamp.ts';
import { machineInfo, openFileLimit, rssBytes } from '../src/lib/proc.ts';

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const MIB = 2 ** 20;
/** The slow readers' source address: the fleet's are 127.0.0.2 to .9, the history reads' .10. Churn leaves these sessions alone. */
export const SLOW_SOURCE = '127.0.0.11';
/** Fewer samples in a fit window than this: no verdict. */
export const MIN_FIT_SAMPLES = 6;
const CHURN_TICK_MS = 5000;

// ---- options -------------------------------------------------------------------------

export interface SoakConfig {
  readonly minutes: number;
  /** Every client: the fleet's and the slow readers. */
  readonly clients: number;
  readonly procs: number;
  readonly shards: number;
  readonly drainRate: number;
  readonly warmupMinutes: number;
  readonly redisWarmupMinutes: number;
  readonly drainEveryMinutes: number;
  /** Fleet clients whose session is cut, per minute, percent of the fleet. */
  readonly churnPct: number;
  /** Slow readers, percent of `clients`. */
  readonly slowPct: number;
  readonly stallSeconds: number;
  readonly slowTopics: number;
  readonly sampleSeconds: number;
  /** A slope under this share of the mean per hour (percent) is flat. */
  readonly thresholdPct: number;
  /** The nodes' WS_HISTORY_TTL_MS: acks older than it (less a minute) at the history read are checked against deliveries only. */
  readonly historyTtlMs: number;
  readonly out: string;
  readonly nodeLogs?: string;
}

export const SOAK_HELP = `pnpm chaos soak [options]     (from benchmarks/: node --import tsx chaos/main.ts soak [options]); not in CI
  --minutes N              load time (default 30)
  --clients N              every client: the SDK fleet and the slow readers (default 10000)
  --procs N                fleet client processes (default: fleet / 2500, at least 2)
  --shards N               WS_WORKERS of each node (default 2)
  --drain-rate N           WS_DRAIN_RATE of each node (default 500)
  --warmup-minutes N       left out of the fits of the nodes' series (default 5)
  --redis-warmup-minutes N left out of the fits of Redis (default: the larger of the warm-up and WS_HISTORY_TTL_MS + 1 min, 11)
  --drain-every-minutes N  node B drained (SIGTERM), started again, every N minutes (default 5)
  --churn-pct N            fleet clients whose session the load balancer cuts, percent a minute (default 5; 0: none)
  --slow-pct N             slow readers, percent of the clients (default 1; 0: none)
  --stall-seconds N        how long a slow reader stops reading each time (default 30)
  --slow-topics N          durable topics each slow reader joins (default 10)
  --sample-seconds N       sampling period (default 10)
  --threshold-pct N        flat: |slope| under N% of the mean per hour (default 5)
  --out FILE               markdown (default chaos/results-soak.md); the SVG and the JSON beside it
  --node-logs DIR          keep every node's log records in DIR/<run>/A.log and B.log
  --help`;

const KNOWN = ['minutes', 'clients', 'procs', 'shards', 'drain-rate', 'warmup-minutes', 'redis-warmup-minutes', 'drain-every-minutes', 'churn-pct',
  'slow-pct', 'stall-seconds', 'slow-topics', 'sample-seconds', 'threshold-pct', 'out', 'node-logs'];
/** Options that may be 0. */
const ZERO_OK = ['churn-pct', 'slow-pct'];

/** The soak's options; 'help' for --help. Throws on an unknown option or a bad number. */
export function parseSoakArgs(argv: readonly string[], historyTtlMs = 600_000): SoakConfig | 'help' {
  const opts = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--help' || a === '-h') return 'help';
    if (!a.startsWith('--') || argv[i + 1] === undefined) throw new Error(`unknown argument ${a}\n${SOAK_HELP}`);
    const k = a.slice(2);
    if (!KNOWN.includes(k)) throw new Error(`unknown option --${k}\n${SOAK_HELP}`);
    opts.set(k, argv[++i]!);
  }
  const num = (k: string, dflt: number): number => {
    const v = opts.get(k);
    if (v === undefined) return dflt;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0 || (n === 0 && !ZERO_OK.includes(k))) throw new Error(`--${k} takes a ${ZERO_OK.includes(k) ? 'non-negative' : 'positive'} number, not ${v}`);
    return n;
  };
  const clients = Math.round(num('clients', 10_000));
  const slowPct = num('slow-pct', 1);
  const fleet = clients - Math.round((clients * slowPct) / 100);
  const warmupMinutes = num('warmup-minutes', 5);
  const minutes = num('minutes', 30);
  if (warmupMinutes >= minutes) throw new Error(`--warmup-minutes ${warmupMinutes} leaves nothing of --minutes ${minutes} to fit`);
  if (slowPct > 50) throw new Error('--slow-pct: at most 50');
  return {
    minutes, clients, procs: Math.round(num('procs', Math.max(2, Math.ceil(fleet / 2500)))), shards: Math.round(num('shards', 2)),
    drainRate: num('drain-rate', 500), warmupMinutes,
    redisWarmupMinutes: num('redis-warmup-minutes', Math.max(warmupMinutes, historyTtlMs / MINUTE_MS + 1)),
    drainEveryMinutes: num('drain-every-minutes', 5), churnPct: num('churn-pct', 5), slowPct,
    stallSeconds: num('stall-seconds', 30), slowTopics: Math.round(num('slow-topics', 10)), sampleSeconds: num('sample-seconds', 10),
    thresholdPct: num('threshold-pct', 5), historyTtlMs,
    out: resolve(opts.get('out') ?? join(BENCH_ROOT, 'chaos', 'results-soak.md')),
    ...(opts.has('node-logs') ? { nodeLogs: resolve(opts.get('node-logs')!) } : {}),
  };
}

// ---- the fits (pure) -----------------------------------------------------------------

export interface Trend {
  readonly n: number;
  readonly mean: number;
  /** The least-squares slope over time, in the series' unit per hour; with a covariate, the time coefficient of y = a + b t + c s. */
  readonly perHour: number;
  /** Its standard error (residuals taken as independent: a lower bound for a series that is not). */
  readonly sePerHour: number;
  /** perHour as a share of the mean, percent. */
  readonly pctPerHour: number;
  /** Set when the covariate was used (it varied, and not in step with time). */
  readonly adjustedFor?: string;
  /** The covariate's coefficient (series unit per covariate unit), when used. */
  readonly perCovariate?: number;
  /** Mean time of the window (ms): the line drawn is mean + perHour (t - tMean). */
  readonly tMean: number;
  readonly from: number;
  readonly to: number;
}

const EMPTY_TREND = (n: number, mean: number, from: number, to: number): Trend => ({ n, mean, perHour: NaN, sePerHour: NaN, pctPerHour: NaN, tMean: NaN, from, to });

/**
 * The least-squares line of `ys` over `ts` (ms), or with `cov` the plane
 * y = a + b t + c s, whose b is the trend at a constant s. Points where a
 * value is not finite are left out. With fewer than 3 points, NaN slopes;
 * a covariate that does not vary, or varies in step with time, is not used.
 */
export function fitTrend(ts: readonly number[], ys: readonly number[], cov?: readonly number[], covName = 'covariate'): Trend {
  const idx: number[] = [];
  for (let i = 0; i < Math.min(ts.length, ys.length); i++) {
    if (Number.isFinite(ts[i]) && Number.isFinite(ys[i]) && (cov === undefined || Number.isFinite(cov[i]))) idx.push(i);
  }
  const n = idx.length;
  const t = idx.map((i) => ts[i]!);
  const y = idx.map((i) => ys[i]!);
  const s = cov === undefined ? undefined : idx.map((i) => cov[i]!);
  const mean = (v: readonly number[]): number => v.reduce((a, b) => a + b, 0) / v.length;
  const from = n > 0 ? Math.min(...t) : NaN;
  const to = n > 0 ? Math.max(...t) : NaN;
  if (n < 3) return EMPTY_TREND(n, n > 0 ? mean(y) : NaN, from, to);
  const mt = mean(t);
  const my = mean(y);
  const ms = s === undefined ? 0 : mean(s);
  let stt = 0;
  let sty = 0;
  let sss = 0;
  let sts = 0;
  let ssy = 0;
  for (let k = 0; k < n; k++) {
    const dt = t[k]! - mt;
    const dy = y[k]! - my;
    const ds = s === undefined ? 0 : s[k]! - ms;
    stt += dt * dt;
    sty += dt * dy;
    sss += ds * ds;
    sts += dt * ds;
    ssy += ds * dy;
  }
  if (stt === 0) return EMPTY_TREND(n, my, from, to);
  const det = stt * sss - sts * sts;
  const pct = (b: number): number => (my === 0 ? NaN : (b * HOUR_MS * 100) / my);
  if (s !== undefined && sss > 0 && det > 1e-9 * stt * sss && n > 3) {
    const b = (sty * sss - ssy * sts) / det;
    const c = (ssy * stt - sty * sts) / det;
    let rss = 0;
    for (let k = 0; k < n; k++) rss += (y[k]! - my - b * (t[k]! - mt) - c * (s[k]! - ms)) ** 2;
    const se = Math.sqrt(((rss / (n - 3)) * sss) / det);
    return { n, mean: my, perHour: b * HOUR_MS, sePerHour: se * HOUR_MS, pctPerHour: pct(b), adjustedFor: covName, perCovariate: c, tMean: mt, from, to };
  }
  const b = sty / stt;
  let rss = 0;
  for (let k = 0; k < n; k++) rss += (y[k]! - my - b * (t[k]! - mt)) ** 2;
  const se = Math.sqrt(rss / (n - 2) / stt);
  return { n, mean: my, perHour: b * HOUR_MS, sePerHour: se * HOUR_MS, pctPerHour: pct(b), tMean: mt, from, to };
}

export type Verdict = 'flat' | 'growing' | 'falling' | 'too few samples';

/** flat: |slope| under `thresholdPct` of the mean per hour; growing or falling beyond it. */
export function verdictOf(tr: Trend, thresholdPct: number): Verdict {
  if (tr.n < MIN_FIT_SAMPLES || !Number.isFinite(tr.pctPerHour)) return 'too few samples';
  if (Math.abs(tr.pctPerHour) < thresholdPct) return 'flat';
  return tr.pctPerHour > 0 ? 'growing' : 'falling';
}

// ---- samples and series (pure) -------------------------------------------------------

export interface NodeSample {
  readonly alive: boolean;
  /** Which start of the node (GatewayNode.starts). */
  readonly gen: number;
  readonly rss?: number;
  readonly heap?: number;
  readonly fds?: number;
  readonly sockets?: number;
  readonly slowLane?: number;
  readonly restarts?: number;
}

export interface SoakSample {
  /** ms since the load started (negative: before). */
  readonly t: number;
  readonly a: NodeSample;
  readonly b: NodeSample;
  readonly redisUsed?: number;
  readonly redisRss?: number;
  readonly redisKeys?: number;
  readonly fleetOpen?: number;
  readonly pending?: number;
  readonly slowOpen?: number;
  readonly stalled?: number;
  /** RSS of the client processes (the fleet's, which keep every event they got for the final check, and the slow readers'). */
  readonly clientsRss?: number;
}

export type SeriesKey = 'rss' | 'heap' | 'fds' | 'sockets' | 'redisUsed' | 'redisRss';

export interface SeriesSpec {
  readonly key: SeriesKey;
  readonly label: string;
  readonly unit: 'bytes' | 'count';
  /** Has a verdict (the others are shown). */
  readonly judged: boolean;
  /** Fitted with A's sockets as a second regressor. */
  readonly adjust: boolean;
  readonly redis: boolean;
}

export const SERIES: readonly SeriesSpec[] = [
  { key: 'rss', label: "A's RSS", unit: 'bytes', judged: true, adjust: true, redis: false },
  { key: 'heap', label: "A's V8 heap in use (every thread)", unit: 'bytes', judged: true, adjust: true, redis: false },
  { key: 'fds', label: "A's open files", unit: 'count', judged: true, adjust: true, redis: false },
  { key: 'sockets', label: "A's sockets", unit: 'count', judged: false, adjust: false, redis: false },
  { key: 'redisUsed', label: 'Redis used_memory', unit: 'bytes', judged: true, adjust: false, redis: true },
  { key: 'redisRss', label: 'Redis RSS', unit: 'bytes', judged: false, adjust: false, redis: true },
];

/** One series' value in a sample; undefined when not measured (node down, a poll that failed). */
export function valueOf(s: SoakSample, key: SeriesKey, node: 'a' | 'b' = 'a'): number | undefined {
  const n = s[node];
  switch (key) {
    case 'rss': return n.alive ? n.rss : undefined;
    case 'heap': return n.alive ? n.heap : undefined;
    case 'fds': return n.alive ? n.fds : undefined;
    case 'sockets': return n.alive ? n.sockets : undefined;
    case 'redisUsed': return s.redisUsed;
    case 'redisRss': return s.redisRss;
  }
}

export interface SlopeRow {
  readonly key: SeriesKey;
  readonly label: string;
  readonly unit: 'bytes' | 'count';
  readonly judged: boolean;
  /** Without the covariate. */
  readonly raw: Trend;
  /** With A's sockets as a second regressor (node series), when it could be used. */
  readonly adjusted?: Trend;
  /** On `adjusted` when there is one, else on `raw`; '-' for the series that are only shown. */
  readonly verdict: Verdict | '-';
}

/** The fits after the warm-ups (ms since the load started) up to `endMs`: A's series from `warmupMs`, Redis's from `redisWarmupMs`. */
export function slopes(samples: readonly SoakSample[], o: {
  warmupMs: number; redisWarmupMs: number; endMs: number; thresholdPct: number;
  /** Windows (ms since the load started) left out of A's fits: A absorbing a drained B's clients. */
  transients?: readonly { readonly from: number; readonly to: number }[];
}): SlopeRow[] {
  // A's series: only its first life (A is never restarted: a second start would be a finding, and its series would restart).
  const aGen = samples.find((s) => s.a.alive)?.a.gen;
  const settled = (t: number): boolean => !(o.transients ?? []).some((w) => t >= w.from && t <= w.to);
  return SERIES.map((sp) => {
    const from = sp.redis ? o.redisWarmupMs : o.warmupMs;
    const win = samples.filter((s) => s.t >= from && s.t <= o.endMs && (sp.redis || (s.a.gen === aGen && settled(s.t))));
    const ts = win.map((s) => s.t);
    const ys = win.map((s) => valueOf(s, sp.key) ?? NaN);
    const raw = fitTrend(ts, ys);
    const adjusted = sp.adjust ? fitTrend(ts, ys, win.map((s) => valueOf(s, 'sockets') ?? NaN), "A's sockets") : undefined;
    const use = adjusted?.adjustedFor !== undefined ? adjusted : raw;
    return {
      key: sp.key, label: sp.label, unit: sp.unit, judged: sp.judged, raw,
      ...(adjusted?.adjustedFor !== undefined ? { adjusted } : {}),
      verdict: sp.judged ? verdictOf(use, o.thresholdPct) : '-',
    };
  });
}

/** How long after B is back (and 99% of the fleet) A's memory is still the surge's: the reconnects' garbage, collected within a minute. */
export const SETTLE_MS = 60_000;

/** A's transients: each drain of B from its SIGTERM until B is up again and 99% of the fleet is back, plus SETTLE_MS. */
export function transientsOf(drains: readonly DrainRecord[]): { from: number; to: number }[] {
  return drains.map((d) => ({ from: d.at, to: d.at + Math.max(Number.isFinite(d.backMs) ? d.backMs : 0, d.upMs) + SETTLE_MS }));
}

export interface Life {
  readonly gen: number;
  /** First and last sample of the life, ms since the load started. */
  readonly from: number;
  readonly to: number;
  readonly samples: number;
  readonly rssMax: number;
  readonly heapMax: number;
  readonly fdsMax: number;
  readonly socketsMax: number;
}

/** A node's lives: its samples while up, by start. */
export function livesOf(samples: readonly SoakSample[], node: 'a' | 'b'): Life[] {
  const by = new Map<number, SoakSample[]>();
  for (const s of samples) {
    if (!s[node].alive) continue;
    const g = s[node].gen;
    const l = by.get(g);
    if (l === undefined) by.set(g, [s]); else l.push(s);
  }
  const max = (xs: readonly SoakSample[], k: SeriesKey): number => Math.max(0, ...xs.map((s) => valueOf(s, k, node) ?? 0));
  return [...by].sort((x, y) => x[0] - y[0]).map(([gen, xs]) => ({
    gen, from: xs[0]!.t, to: xs[xs.length - 1]!.t, samples: xs.length,
    rssMax: max(xs, 'rss'), heapMax: max(xs, 'heap'), fdsMax: max(xs, 'fds'), socketsMax: max(xs, 'sockets'),
  }));
}

// ---- churn at the load balancers (pure parts) ------------------------------------------

export interface LbSession {
  /** HAProxy's session pointer, for `shutdown session`. */
  readonly id: string;
  /** The client's address (no port). */
  readonly src: string;
  /** The backend server (node-a, node-b). */
  readonly srv: string;
}

/** The proxied client sessions in HAProxy's `show sess` (backend sluice, a server assigned). */
export function parseShowSess(text: string): LbSession[] {
  const out: LbSession[] = [];
  for (const line of text.split('\n')) {
    const m = /^(0x[0-9a-f]+): /.exec(line);
    if (m === null) continue;
    const src = /\bsrc=(\S+)/.exec(line)?.[1];
    const be = /\bbe=(\S+)/.exec(line)?.[1];
    const srv = /\bsrv=(\S+)/.exec(line)?.[1];
    if (src === undefined || be !== 'sluice' || srv === undefined || !srv.startsWith('node-')) continue;
    const colon = src.lastIndexOf(':');
    out.push({ id: m[1]!, src: colon > 0 ? src.slice(0, colon) : src, srv });
  }
  return out;
}

/** How many sessions to cut in a tick of `tickMs`: `pct` of `clients` a minute, the fraction carried to the next tick. */
export function churnQuota(pct: number, clients: number, tickMs: number, carry: number): { k: number; carry: number } {
  const want = (pct / 100) * clients * (tickMs / MINUTE_MS) + carry;
  const k = Math.floor(want + 1e-9);
  return { k, carry: want - k };
}

/** `k` distinct items of `xs` at random (all of them when there are fewer). */
export function pickRandom<T>(xs: readonly T[], k: number, random: () => number = Math.random): T[] {
  const a = [...xs];
  const n = Math.min(k, a.length);
  for (let i = 0; i < n; i++) {
    const j = i + Math.floor(random() * (a.length - i));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a.slice(0, n);
}

// ---- the report (pure) -------------------------------------------------------------------

export interface DrainRecord {
  /** ms since the load started: the SIGTERM. */
  readonly at: number;
  /** B's sockets at its last sample before. */
  readonly socketsBefore?: number;
  readonly exitMs: number;
  readonly exitCode: number | null;
  /** From the SIGTERM until 99% of the fleet was open again (on A), NaN when not within 60 s. */
  readonly backMs: number;
  /** From the SIGTERM until B was UP in both load balancers again. */
  readonly upMs: number;
  readonly error?: string;
}

export interface SlowStatus {
  readers: number;
  open: number;
  stalled: number;
  stalls: number;
  connects: number;
  events: number;
  bytes: number;
  /** Rejoins with since answered recovered: false. */
  recoveredFalse: number;
  joinErrors: Record<string, number>;
  closes: Record<string, number>;
}

export interface SoakResult {
  readonly startedAt: string;
  readonly commit: string;
  readonly machine: string;
  readonly cfg: SoakConfig;
  readonly fleetClients: number;
  readonly slowReaders: number;
  readonly connected: number;
  /** When the load started and ended, ms since the run started (the fleet's clock). */
  readonly loadAt: number;
  readonly loadMs: number;
  readonly wallS: number;
  readonly samples: readonly SoakSample[];
  readonly slopes: readonly SlopeRow[];
  readonly drains: readonly DrainRecord[];
  readonly churn: { cuts: number; byNode: Record<string, number>; failed: number; errors: number };
  readonly slow?: SlowStatus;
  readonly acked: number;
  /** Acks recent enough (inside WS_HISTORY_TTL_MS less a minute, at the history read) to be checked against history. */
  readonly ackedInHistory: number;
  readonly history: HistoryCheck;
  readonly delivery: DeliveryCheck;
  readonly unacked: number;
  readonly rejected: Readonly<Record<string, number>>;
  readonly recoveredFalse: number;
  readonly keyedStale: number;
  readonly keyedSubscribers: number;
  readonly notConnected: number;
  readonly shardRestarts: Readonly<Record<string, number>>;
  readonly errorLines: Readonly<Record<string, number>>;
  readonly errorExamples: readonly string[];
  readonly closesByReasonA?: Readonly<Record<string, number>>;
  readonly clientCloses: Readonly<Record<string, number>>;
  readonly unavailable: number;
  readonly findings: readonly string[];
  /** The nodes' first log lines above info, whole (for the JSON). */
  readonly notable?: readonly string[];
  readonly error?: string;
}

const fmtMin = (ms: number): string => (Number.isFinite(ms) ? `${(ms / MINUTE_MS).toFixed(1)}` : '-');
const fmtS = (ms: number): string => (Number.isFinite(ms) ? `${(ms / 1000).toFixed(1)} s` : 'not reached');

/** A value of a series in its unit: MiB for bytes. */
export function fmtValue(v: number, unit: 'bytes' | 'count', signed = false): string {
  if (!Number.isFinite(v)) return '-';
  const sign = signed && v > 0 ? '+' : '';
  if (unit === 'bytes') return `${sign}${(v / MIB).toFixed(Math.abs(v) < 10 * MIB ? 2 : 1)} MiB`;
  return `${sign}${Math.abs(v) < 100 ? v.toFixed(1) : Math.round(v)}`;
}

const fmtPct = (p: number): string => (Number.isFinite(p) ? `${p > 0 ? '+' : ''}${p.toFixed(2)}%` : '-');

/** The table of slopes, in markdown. */
export function slopeTable(rows: readonly SlopeRow[], thresholdPct: number): string {
  const head = ['series', 'fit window (min)', 'samples', 'mean', 'slope per hour (± 2 SE)', 'share of the mean per hour',
    "at constant sockets: slope per hour (± 2 SE)", 'share of the mean per hour', `verdict (flat: under ${thresholdPct}%/h)`];
  const line = (cells: readonly string[]): string => `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
  const body = rows.map((r) => {
    const a = r.adjusted;
    return line([
      r.label, `${fmtMin(r.raw.from)} to ${fmtMin(r.raw.to)}`, String(r.raw.n), fmtValue(r.raw.mean, r.unit),
      `${fmtValue(r.raw.perHour, r.unit, true)} (± ${fmtValue(2 * r.raw.sePerHour, r.unit)})`, fmtPct(r.raw.pctPerHour),
      a === undefined ? '-' : `${fmtValue(a.perHour, r.unit, true)} (± ${fmtValue(2 * a.sePerHour, r.unit)})`, a === undefined ? '-' : fmtPct(a.pctPerHour),
      r.verdict,
    ]);
  });
  return [line(head), line(head.map(() => '---')), ...body].join('\n');
}

/** Every invariant the run broke (and every judged series not flat but falling is shown, not failed), as sentences. */
export function soakViolations(r: SoakResult): string[] {
  const out: string[] = [];
  if (r.error !== undefined) out.push(`run failed: ${r.error}`);
  if (r.connected < r.fleetClients) out.push(`only ${r.connected}/${r.fleetClients} fleet clients connected at the start`);
  if (r.acked === 0) out.push('no publish was acknowledged');
  if (r.history.lost > 0) out.push(`${r.history.lost} acknowledged publishes (of ${r.ackedInHistory} inside the history window) missing from history`);
  if (r.history.storedTwice > 0) out.push(`${r.history.storedTwice} publishes stored twice`);
  if (r.history.sharedIds > 0) out.push(`${r.history.sharedIds} publishes acked with another publish's id`);
  const missing = r.delivery.missing + r.delivery.missingLost;
  if (missing > 0) out.push(`${missing} acknowledged events not delivered to a subscriber`);
  const dups = r.delivery.duplicateIds + r.delivery.duplicateKeys + r.delivery.wireDuplicates;
  if (dups > 0) out.push(`${dups} duplicate deliveries (${r.delivery.duplicateIds} by id, ${r.delivery.duplicateKeys} by publish, ${r.delivery.wireDuplicates} on the wire)`);
  if (r.unacked > 0) out.push(`${r.unacked} publishes never acknowledged`);
  if (r.recoveredFalse > 0) out.push(`${r.recoveredFalse} SDK resumes answered recovered: false`);
  if ((r.slow?.recoveredFalse ?? 0) > 0) out.push(`${r.slow!.recoveredFalse} slow-reader rejoins answered recovered: false`);
  if (r.keyedStale > 0) out.push(`${r.keyedStale}/${r.keyedSubscribers} keyed subscribers without the last keyed value`);
  if (r.notConnected > 0) out.push(`${r.notConnected} fleet clients not connected at the end`);
  const restarts = Object.values(r.shardRestarts).reduce((a, b) => a + b, 0);
  if (restarts > 0) out.push(`${restarts} shard threads restarted after a crash (${JSON.stringify(r.shardRestarts)})`);
  const errors = Object.values(r.errorLines).reduce((a, b) => a + b, 0);
  if (errors > 0) out.push(`${errors} error lines logged (${JSON.stringify(r.errorLines)})`);
  for (const [i, d] of r.drains.entries()) {
    if (d.error !== undefined) out.push(`drain ${i + 1} of B: ${d.error}`);
    else if (d.exitCode !== 0) out.push(`drain ${i + 1} of B: exit code ${String(d.exitCode)}`);
  }
  for (const s of r.slopes) if (s.verdict === 'growing') out.push(`${s.label} grows ${fmtPct((s.adjusted ?? s.raw).pctPerHour)} of its mean per hour (threshold ${r.cfg.thresholdPct}%)`);
  return out;
}

const table = (head: readonly string[], rows: ReadonlyArray<readonly string[]>): string => {
  const line = (cells: readonly string[]): string => `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
  return [line(head), line(head.map(() => '---')), ...rows.map(line)].join('\n');
};

/** The whole report, in markdown; `svgName` is the chart beside it. */
export function renderSoakReport(r: SoakResult, svgName: string): string {
  const c = r.cfg;
  const lives = livesOf(r.samples, 'b');
  const v = soakViolations(r);
  const endS = r.samples[r.samples.length - 1];
  const missing = r.delivery.missing + r.delivery.missingLost;
  const dups = r.delivery.duplicateIds + r.delivery.duplicateKeys + r.delivery.wireDuplicates + r.history.storedTwice;
  const restarts = Object.values(r.shardRestarts).reduce((a, b) => a + b, 0);
  const errors = Object.values(r.errorLines).reduce((a, b) => a + b, 0);
  // The threshold in bytes of A's RSS per session on A cut, at this run's churn.
  const rssMean = r.slopes.find((x) => x.key === 'rss')?.raw.mean ?? NaN;
  const cutsPerHour = ((r.churn.byNode['node-a'] ?? 0) / Math.max(1, r.loadMs)) * HOUR_MS;
  const perCut = cutsPerHour > 0 && Number.isFinite(rssMean) ? { cutsPerHour, bytes: ((c.thresholdPct / 100) * rssMean) / cutsPerHour } : undefined;
  const lines = [
    '# Soak results', '',
    `Run ${r.startedAt} at commit ${r.commit}; ${r.machine}.`, '',
    `${r.fleetClients} @sluice/client SDK clients in ${c.procs} processes and ${r.slowReaders} slow readers (raw \`ws\` sockets), all through two HAProxy processes, ` +
    `on two gateway nodes with ${c.shards} shards each and one redis-server (append-only file); WS_DRAIN_RATE ${c.drainRate}, everything else the gateway's defaults ` +
    `(but WS_TRUST_PROXY=1 and WS_IP_CONNECT_LIMIT=1000000), as in \`pnpm chaos\`. The fleet's roles are the chaos scenarios': 2 of 50 durable topics per client, ` +
    `2% publishing a durable event with an idempotency key every 5 s each, 10% following keyed feeds. Load for ${(r.loadMs / MINUTE_MS).toFixed(1)} min ` +
    `(asked: ${c.minutes}), wall ${r.wallS.toFixed(0)} s in all.`, '',
    `![A's RSS, heap and open files, and Redis memory over the run, drains of B marked](${svgName})`, '',
    '## Slopes', '',
    slopeTable(r.slopes, c.thresholdPct), '',
    `Verdict: ${r.slopes.filter((s) => s.judged).map((s) => `${s.label} ${s.verdict}`).join('; ')}.`, '',
    '## Method', '',
    `Every ${c.sampleSeconds} s: each node's RSS (VmRSS of every process of its tree), V8 heap in use (\`sluice_heap_used_bytes\`, summed over its threads: ` +
    'the coordinator and each shard have their own isolate), open files (the entries of /proc/<pid>/fd of its tree) and sockets (`sluice_connected_sockets`); ' +
    'Redis `used_memory` and `used_memory_rss` (INFO memory) and its keys (DBSIZE); the clients open. ' +
    `Node A is never restarted, so its series cover the whole run; node B is drained (SIGTERM) every ${c.drainEveryMinutes} min, the first time half a period ` +
    'after the load started (inside the warm-up by default, so that A has held nearly every client once before its series are fitted), and started again, ' +
    'so each of its lives is no longer than the warm-up: B is left out of the fits and shown per life below. ' +
    `A's series are fitted from ${c.warmupMinutes} min after the load started (the warm-up: V8 and the allocator growing to their working size), ` +
    `Redis's from ${c.redisWarmupMinutes} min: Redis holds every event of the last WS_HISTORY_TTL_MS (${c.historyTtlMs / MINUTE_MS} min) and every idempotency key ` +
    `of the last WS_IDEMPOTENCY_TTL_MS (5 min) by design, so it fills until then${c.redisWarmupMinutes < c.historyTtlMs / MINUTE_MS
      ? ` (this run's Redis warm-up is shorter: its Redis was still filling, and its slope says so)` : ''}. ` +
    "Each fit is a least-squares line over time; for A's series also with A's socket count as a second regressor (y = a + b t + c sockets), " +
    "whose time coefficient b is the verdict's: A's sockets rise at each drain of B (B's clients move to A) and fall as churn moves clients back " +
    '(the load balancers send new connections to the node with fewer), and memory that follows the sockets held is no leak; over a few drain periods the plain ' +
    'line depends on where in that sawtooth the window starts and ends. ' +
    `A's samples from each SIGTERM of B until B is up again and 99% of the fleet is back, plus ${SETTLE_MS / 1000} s, are left out of its fits (the chart shows them): ` +
    "there A takes thousands of reconnects in seconds and its heap holds their garbage until the next collections (the first soak's A peaked at 329 MiB RSS " +
    'and 120 MiB of heap 10 s into its last drain, against 250-275 and 70-90 between drains), and a window that happens to end in one reads as growth. ' +
    `Flat: |slope| under ${c.thresholdPct}% of the mean per hour. Why that bound: it is what a ${c.minutes}-minute run can tell apart from the noise of a ` +
    'garbage-collected heap and of the sawtooth (the ± 2 SE column, which takes the residuals as independent and so is a lower bound); ' +
    `${perCut === undefined ? '' : `at this run's churn (${Math.round(perCut.cutsPerHour)} sessions on A cut an hour) it is a leak of ${(perCut.bytes / 1024).toFixed(2)} KiB of RSS per connection cut; `}` +
    'slower growth needs a longer run. ' +
    "Redis's RSS and A's sockets are shown, not judged (the allocator gives pages back late; the sockets follow the drains).", '',
    '## Load, drains and churn', '',
    `- churn: ${r.churn.cuts} fleet sessions cut at the load balancers (${Object.entries(r.churn.byNode).map(([k, n]) => `${n} on ${k}`).join(', ') || 'none'}; ` +
    `${c.churnPct}% of the fleet a minute, every ${CHURN_TICK_MS / 1000} s)${r.churn.failed > 0 ? `, ${r.churn.failed} already gone when cut` : ''}` +
    `${r.churn.errors > 0 ? `; ${r.churn.errors} admin-socket calls failed` : ''}`,
    `- client disconnects seen by the fleet, by close code: ${JSON.stringify(r.clientCloses)}; \`unavailable\` answers: ${r.unavailable}`,
    r.slow === undefined ? '- slow readers: none' :
      `- slow readers: ${r.slow.readers} (each joined to ${c.slowTopics} durable topics), ${r.slow.stalls} stalls of ${c.stallSeconds} s, ${r.slow.connects} connections ` +
      `(${r.slow.connects - r.slow.readers} again after a close), ${r.slow.events} events (${(r.slow.bytes / MIB).toFixed(1)} MiB) read; closes by code: ` +
      `${JSON.stringify(r.slow.closes)}; join errors ${JSON.stringify(r.slow.joinErrors)}`,
    `- node A's closes by reason (sluice_clients_closed_total, those above 0): ${JSON.stringify(Object.fromEntries(Object.entries(r.closesByReasonA ?? {}).filter(([, n]) => n > 0)))}; ` +
    `sockets in A's slow lane (sluice_slow_lane_sockets) at most ${Math.max(0, ...r.samples.map((x) => x.a.slowLane ?? 0))}`,
    `- at the end: ${endS?.fleetOpen ?? '?'}/${r.fleetClients} fleet clients open, ${endS?.slowOpen ?? '?'}/${r.slowReaders} slow readers; ` +
    `A ${endS?.a.sockets ?? '?'} sockets, B ${endS?.b.sockets ?? '?'}; the client processes' RSS ${fmtValue(endS?.clientsRss ?? NaN, 'bytes')} ` +
    '(it grows by design: the fleet keeps every event it got, for the final check)', '',
    r.drains.length === 0 ? 'No drain of B.' : table(['drain of B', 'at (min)', "B's sockets before", 'B exited after', 'exit code', '99% of the fleet open after', 'B UP again after'],
      r.drains.map((d, i) => [String(i + 1), fmtMin(d.at), d.socketsBefore === undefined ? '-' : String(d.socketsBefore), fmtS(d.exitMs), String(d.exitCode),
        fmtS(d.backMs), d.error === undefined ? fmtS(d.upMs) : `error: ${d.error}`])), '',
    '### Node B per life', '',
    lives.length === 0 ? 'No sample of B.' : table(['life', 'from (min)', 'to (min)', 'samples', 'RSS max', 'V8 heap max', 'open files max', 'sockets max'],
      lives.map((l) => [String(l.gen), fmtMin(l.from), fmtMin(l.to), String(l.samples), fmtValue(l.rssMax, 'bytes'), fmtValue(l.heapMax, 'bytes'),
        String(l.fdsMax), String(l.socketsMax)])), '',
    '## Invariants', '',
    table(['invariant', 'value', 'held'], [
      ['fleet clients connected at the start', `${r.connected}/${r.fleetClients}`, r.connected >= r.fleetClients ? 'yes' : 'NO'],
      ['acknowledged publishes lost (history, deliveries)', `history ${r.history.lost} of ${r.ackedInHistory} checked (of ${r.acked} acked; the older ones ` +
        `had left the ${c.historyTtlMs / MINUTE_MS}-min history by design), deliveries ${missing} of ${r.delivery.expected}`, r.history.lost + missing === 0 ? 'yes' : 'NO'],
      ['duplicates (by id, by publish key, on the wire, stored twice)', String(dups), dups === 0 ? 'yes' : 'NO'],
      ['publishes never acknowledged; rejected', `${r.unacked}; ${JSON.stringify(r.rejected)}`, r.unacked === 0 ? 'yes' : 'NO'],
      ['resumes answered recovered: false (SDK; slow readers)', `${r.recoveredFalse}; ${r.slow?.recoveredFalse ?? '-'}`,
        r.recoveredFalse + (r.slow?.recoveredFalse ?? 0) === 0 ? 'yes' : 'NO'],
      ['keyed subscribers without the last keyed value', `${r.keyedStale}/${r.keyedSubscribers}`, r.keyedStale === 0 ? 'yes' : 'NO'],
      ['fleet clients not connected at the end', String(r.notConnected), r.notConnected === 0 ? 'yes' : 'NO'],
      ['shard restarts (sluice_shard_restarts_total)', JSON.stringify(r.shardRestarts), restarts === 0 ? 'yes' : 'NO'],
      ['error lines per node', JSON.stringify(r.errorLines), errors === 0 ? 'yes' : 'NO'],
      ['drains of B: exit 0, UP again', `${r.drains.filter((d) => d.exitCode === 0 && d.error === undefined).length} of ${r.drains.length}`,
        r.drains.every((d) => d.exitCode === 0 && d.error === undefined) ? 'yes' : 'NO'],
    ]), '',
    `Verdict: ${v.length === 0 ? 'pass' : `FAIL: ${v.join('; ')}`}.`, '',
  ];
  if (r.findings.length > 0 || r.errorExamples.length > 0) {
    lines.push('## Findings', '');
    for (const e of r.errorExamples) lines.push(`- error line: \`${e.replace(/`/g, "'")}\``);
    for (const f of r.findings) lines.push(`- ${f}`);
    lines.push('');
  }
  return lines.join('\n');
}

// ---- the chart (pure) --------------------------------------------------------------------

export interface ChartInput {
  readonly samples: readonly SoakSample[];
  readonly slopes: readonly SlopeRow[];
  /** SIGTERMs of B, ms since the load started. */
  readonly drains: readonly number[];
  readonly warmupMs: number;
  readonly redisWarmupMs: number;
  readonly title: string;
  readonly thresholdPct: number;
}

const esc = (t: string): string => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * Four panels over minutes since the load started: A's RSS, A's V8 heap (B's
 * lives dotted in both), A's open files (A's sockets dashed), Redis
 * used_memory (its RSS dotted); each with its fit line over its window, the
 * warm-up shaded, the drains of B as red dashed lines. Axes start at 0.
 */
export function renderSoakSvg(c: ChartInput): string {
  const width = 900;
  const left = 80;
  const plotW = width - left - 30;
  const panelH = 130;
  const gap = 44;
  const top = 70;
  const panels = 4;
  const height = top + panels * (panelH + gap) + 10;
  const ss = c.samples;
  const t0 = Math.min(0, ...ss.map((s) => s.t));
  const t1 = Math.max(t0 + MINUTE_MS, ...ss.map((s) => s.t));
  const x = (t: number): number => left + ((t - t0) / (t1 - t0)) * plotW;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  out.push(`<text x="10" y="20" font-size="14" font-weight="bold">${esc(c.title)}</text>`);
  out.push(`<text x="10" y="38" fill="#555">${esc('solid: node A (never restarted); dotted: node B, each life apart; black dashed: the least-squares line over the fit window (at constant sockets for A);')}</text>`);
  out.push(`<text x="10" y="54" fill="#555">${esc(`grey: warm-up, left out of the fit; red dashed: a drain of B (SIGTERM). Flat: |slope| under ${c.thresholdPct}% of the mean per hour.`)}</text>`);
  type Line = { v: (s: SoakSample) => number | undefined; color: string; dash?: string; split?: (s: SoakSample) => number | undefined };
  const row = (k: SeriesKey): SlopeRow | undefined => c.slopes.find((r) => r.key === k);
  const panel = (i: number, key: SeriesKey, title: string, lines: readonly Line[], unit: 'bytes' | 'count', warmupMs: number): void => {
    const py = top + i * (panelH + gap);
    const vals = ss.flatMap((s) => lines.map((l) => l.v(s))).filter((v): v is number => v !== undefined && Number.isFinite(v));
    const maxV = Math.max(1, ...vals) * 1.1;
    const y = (v: number): number => py + panelH - (Math.max(0, Math.min(v, maxV)) / maxV) * panelH;
    const r = row(key);
    const tr = r === undefined ? undefined : (r.adjusted ?? r.raw);
    const verdict = r === undefined ? '' : `: ${fmtPct(tr!.pctPerHour)} of the mean per hour${r.adjusted === undefined ? '' : ' at constant sockets'}, ${r.verdict}`;
    out.push(`<text x="${left}" y="${py - 8}" fill="#222" font-weight="bold">${esc(`${title}${verdict}`)}</text>`);
    out.push(`<rect x="${x(t0).toFixed(1)}" y="${py}" width="${Math.max(0, x(Math.min(warmupMs, t1)) - x(t0)).toFixed(1)}" height="${panelH}" fill="#eeeeee"/>`);
    for (const f of [0, 0.25, 0.5, 0.75, 1]) {
      const v = (maxV / 1.1) * f;
      out.push(`<line x1="${left}" y1="${y(v).toFixed(1)}" x2="${left + plotW}" y2="${y(v).toFixed(1)}" stroke="#e2e2e2"/>`);
      out.push(`<text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end" fill="#555" font-size="10">${esc(unit === 'bytes' ? `${Math.round(v / MIB)} MiB` : String(Math.round(v)))}</text>`);
    }
    for (const l of lines) {
      // One polyline per stretch of samples that have a value (and per life, when split).
      const runs: string[][] = [];
      let cur: string[] = [];
      let prevKey: number | undefined;
      for (const s of ss) {
        const v = l.v(s);
        const k = l.split?.(s);
        if (v === undefined || !Number.isFinite(v) || (prevKey !== undefined && k !== prevKey)) {
          if (cur.length > 0) runs.push(cur);
          cur = [];
        }
        if (v !== undefined && Number.isFinite(v)) cur.push(`${x(s.t).toFixed(1)},${y(v).toFixed(1)}`);
        prevKey = k;
      }
      if (cur.length > 0) runs.push(cur);
      for (const pts of runs) {
        out.push(`<polyline fill="none" stroke="${l.color}" stroke-width="1.5"${l.dash === undefined ? '' : ` stroke-dasharray="${l.dash}"`} points="${pts.join(' ')}"/>`);
      }
    }
    if (tr !== undefined && Number.isFinite(tr.perHour) && Number.isFinite(tr.from)) {
      const at = (t: number): number => tr.mean + (tr.perHour * (t - tr.tMean)) / HOUR_MS;
      out.push(`<line x1="${x(tr.from).toFixed(1)}" y1="${y(at(tr.from)).toFixed(1)}" x2="${x(tr.to).toFixed(1)}" y2="${y(at(tr.to)).toFixed(1)}" stroke="black" stroke-width="2" stroke-dasharray="8 4"/>`);
    }
    for (const d of c.drains) {
      out.push(`<line x1="${x(d).toFixed(1)}" y1="${py}" x2="${x(d).toFixed(1)}" y2="${py + panelH}" stroke="#c0392b" stroke-dasharray="5 3"/>`);
      if (i === 0) out.push(`<text x="${(x(d) + 3).toFixed(1)}" y="${py + 11}" fill="#c0392b" font-size="10">drain B</text>`);
    }
    const stepMin = (t1 - t0) / MINUTE_MS > 40 ? 10 : (t1 - t0) / MINUTE_MS > 12 ? 5 : 1;
    for (let m = Math.ceil(t0 / MINUTE_MS); m <= t1 / MINUTE_MS; m += stepMin) {
      out.push(`<text x="${x(m * MINUTE_MS).toFixed(1)}" y="${py + panelH + 14}" text-anchor="middle" fill="#555" font-size="10">${m} min</text>`);
    }
  };
  const gen = (node: 'a' | 'b') => (s: SoakSample): number | undefined => (s[node].alive ? s[node].gen : undefined);
  panel(0, 'rss', "A's RSS (B dotted)", [
    { v: (s) => valueOf(s, 'rss', 'b'), color: '#999999', dash: '2 2', split: gen('b') },
    { v: (s) => valueOf(s, 'rss'), color: '#2c3e80', split: gen('a') },
  ], 'bytes', c.warmupMs);
  panel(1, 'heap', "A's V8 heap in use, every thread (B dotted)", [
    { v: (s) => valueOf(s, 'heap', 'b'), color: '#999999', dash: '2 2', split: gen('b') },
    { v: (s) => valueOf(s, 'heap'), color: '#3a7d44', split: gen('a') },
  ], 'bytes', c.warmupMs);
  panel(2, 'fds', "A's open files (its sockets dashed)", [
    { v: (s) => valueOf(s, 'sockets'), color: '#999999', dash: '5 3', split: gen('a') },
    { v: (s) => valueOf(s, 'fds'), color: '#8e44ad', split: gen('a') },
  ], 'count', c.warmupMs);
  panel(3, 'redisUsed', 'Redis used_memory (its RSS dotted)', [
    { v: (s) => s.redisRss, color: '#999999', dash: '2 2' },
    { v: (s) => s.redisUsed, color: '#c0392b' },
  ], 'bytes', c.redisWarmupMs);
  out.push(`<text x="${left + plotW / 2}" y="${height - 4}" text-anchor="middle" fill="#555">minutes since the load started</text>`);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

// ---- the slow readers: this file run with --soak-child ---------------------------------------

type SlowRequest =
  | { op: 'start'; urls: string[]; topics: string[][]; source: string; stallMs: number; pingMs: number }
  | { op: 'status' }
  | { op: 'calm' }
  | { op: 'stop' }
  | { op: 'exit' };

interface Reader {
  readonly index: number;
  readonly topics: readonly string[];
  ws: WebSocket | undefined;
  readonly lastId: Map<string, string>;
  stalled: boolean;
  refs: number;
}

class SlowReaders {
  readonly st: SlowStatus = { readers: 0, open: 0, stalled: 0, stalls: 0, connects: 0, events: 0, bytes: 0, recoveredFalse: 0, joinErrors: {}, closes: {} };
  private readers: Reader[] = [];
  private urls: string[] = [];
  private source = '';
  private calm = false;
  private stopped = false;
  private readonly timers = new Set<NodeJS.Timeout>();

  private later(ms: number, f: () => void): void {
    const t = setTimeout(() => { this.timers.delete(t); f(); }, ms);
    this.timers.add(t);
  }

  private count(m: Record<string, number>, k: string): void {
    m[k] = (m[k] ?? 0) + 1;
  }

  start(r: Extract<SlowRequest, { op: 'start' }>): number {
    this.urls = r.urls;
    this.source = r.source;
    this.readers = r.topics.map((topics, index) => ({ index, topics, ws: undefined, lastId: new Map(), stalled: false, refs: 0 }));
    this.st.readers = this.readers.length;
    for (const rd of this.readers) {
      // Spread over the first seconds; each stalls first at a random point of its first cycle.
      this.later(Math.random() * 5000, () => this.connect(rd));
      this.later(r.stallMs * (1 + Math.random() * 2), () => this.cycle(rd, r.stallMs));
    }
    const ping = setInterval(() => {
      // Writing works while reading is paused: the heartbeat (a socket that sends nothing for two heartbeats is closed) is kept.
      for (const rd of this.readers) if (rd.ws?.readyState === WebSocket.OPEN) rd.ws.send(`{"type":"ping","ref":"p${rd.refs++}"}`);
    }, r.pingMs);
    this.timers.add(ping);
    return this.readers.length;
  }

  /** Stops reading for stallMs, reads again, and stalls again stallMs to 2 stallMs later. */
  private cycle(rd: Reader, stallMs: number): void {
    if (this.calm || this.stopped) return;
    if (rd.ws?.readyState === WebSocket.OPEN) {
      rd.ws.pause();
      rd.stalled = true;
      this.st.stalls++;
    }
    this.later(stallMs, () => {
      if (rd.stalled) { rd.ws?.resume(); rd.stalled = false; }
      this.later(stallMs * (1 + Math.random()), () => this.cycle(rd, stallMs));
    });
  }

  private connect(rd: Reader): void {
    if (this.stopped) return;
    const ws = new WebSocket(this.urls[Math.floor(Math.random() * this.urls.length)]!, { localAddress: this.source });
    rd.ws = ws;
    this.st.connects++;
    const sinceSent = new Map<string, boolean>();
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      this.st.bytes += data.length;
      if (isBinary) return;
      const d = decodeServerFrame(data.toString());
      if (!d.ok) return;
      const f = d.frame;
      if (f.type === 'welcome') {
        for (const topic of rd.topics) {
          const since = rd.lastId.get(topic);
          sinceSent.set(`j${topic}`, since !== undefined);
          ws.send(`{"type":"join","ref":${JSON.stringify(`j${topic}`)},"topic":${JSON.stringify(topic)}${since === undefined ? '' : `,"since":${JSON.stringify(since)}`}}`);
        }
      } else if (f.type === 'reply' && f.ref?.startsWith('j') === true) {
        if (f.status === 'error') this.count(this.st.joinErrors, f.reason);
        else if (sinceSent.get(f.ref) === true && (f.data as { recovered?: unknown } | undefined)?.recovered === false) this.st.recoveredFalse++;
      } else if (f.type === 'event') {
        this.st.events++;
        if (f.id !== undefined) rd.lastId.set(f.topic, f.id);
      }
    });
    ws.on('error', () => undefined);
    ws.on('close', (code: number) => {
      this.count(this.st.closes, String(code));
      if (rd.ws === ws) { rd.ws = undefined; rd.stalled = false; }
      if (!this.stopped) this.later(1000 + Math.random() * 2000, () => this.connect(rd));
    });
  }

  status(): SlowStatus {
    this.st.open = this.readers.filter((r) => r.ws?.readyState === WebSocket.OPEN).length;
    this.st.stalled = this.readers.filter((r) => r.stalled).length;
    return this.st;
  }

  /** No more stalls; every socket reads again. */
  calmDown(): void {
    this.calm = true;
    for (const rd of this.readers) if (rd.stalled) { rd.ws?.resume(); rd.stalled = false; }
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.timers) { clearTimeout(t); clearInterval(t); }
    for (const rd of this.readers) rd.ws?.terminate();
  }
}

function childMain(): void {
  const r = new SlowReaders();
  serveRequests<SlowRequest>('soak slow readers', Number(process.env['CHAOS_CHILD_LIFETIME_MS'] ?? 60 * MINUTE_MS), (q) => {
    switch (q.op) {
      case 'start': return r.start(q);
      case 'status': return r.status();
      case 'calm': r.calmDown(); return null;
      case 'stop': r.stop(); return null;
      case 'exit': return null;
    }
  });
}

// ---- the orchestrator ------------------------------------------------------------------------

const SELF = fileURLToPath(import.meta.url);

/** A command on HAProxy's admin socket; its whole answer (the socket closes after it). */
export function haproxyCli(socket: string, command: string, timeoutMs = 10_000): Promise<string> {
  return new Promise((resolveCli, reject) => {
    const s = connect(socket);
    const chunks: Buffer[] = [];
    const t = setTimeout(() => { s.destroy(); reject(new Error(`${socket}: no answer to ${command.slice(0, 40)} in ${timeoutMs} ms`)); }, timeoutMs);
    s.on('connect', () => s.write(`${command}\n`));
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', (e) => { clearTimeout(t); reject(e); });
    s.on('close', () => { clearTimeout(t); resolveCli(Buffer.concat(chunks).toString('latin1')); });
  });
}

/** `pid` and its descendants (from /proc/<pid>/stat's ppid). */
export function processTree(root: number): number[] {
  const kids = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const st = readFileSync(`/proc/${name}/stat`, 'latin1');
      const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
      const l = kids.get(ppid);
      if (l === undefined) kids.set(ppid, [Number(name)]); else l.push(Number(name));
    } catch { /* gone meanwhile */ }
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) out.push(...(kids.get(out[i]!) ?? []));
  return out;
}

function treeStats(pid: number): { rss: number; fds: number } | undefined {
  let rss = 0;
  let fds = 0;
  try {
    for (const p of processTree(pid)) {
      try {
        rss += rssBytes(p);
        fds += readdirSync(`/proc/${p}/fd`).length;
      } catch { /* a child gone meanwhile */ }
    }
    return { rss, fds };
  } catch {
    return undefined;
  }
}

async function sampleNode(n: GatewayNode): Promise<NodeSample> {
  const pid = n.pid;
  if (!n.alive || pid === undefined) return { alive: false, gen: n.starts };
  const tree = treeStats(pid);
  let m: { heap: number; sockets: number; slowLane: number; restarts: number } | undefined;
  try {
    const s = parseMetrics(await n.metrics(5000));
    m = {
      heap: metricSum(s, 'sluice_heap_used_bytes'), sockets: metricSum(s, 'sluice_connected_sockets'),
      slowLane: metricSum(s, 'sluice_slow_lane_sockets'), restarts: metricSum(s, 'sluice_shard_restarts_total'),
    };
  } catch { /* a node busy or going down: no metrics this time */ }
  return { alive: n.alive, gen: n.starts, ...(tree ?? {}), ...(m ?? {}) };
}

const infoNum = (info: string, k: string): number | undefined => {
  const v = new RegExp(`^${k}:(\\d+)\\r?$`, 'm').exec(info)?.[1];
  return v === undefined ? undefined : Number(v);
};



/** Every event of `topic` in history, read by a plain socket straight to a node joining with since 0-0 (as scenarios.ts does). */
async function readHistory(node: GatewayNode, topic: string): Promise<HistoryEvent[]> {
  const c = await connectPatiently(`ws://127.0.0.1:${node.port}/ws`, { localAddress: '127.0.0.10' });
  try {
    const reply = await c.request({ type: 'join', topic, since: '0-0' }, 10_000);
    if (reply['status'] !== 'ok') throw new Error(`history of ${topic}: ${JSON.stringify(reply)}`);
    return c.takeEvents(topic).filter((f) => typeof f['id'] === 'string').map((f) => {
      const d = f['data'] as { p?: unknown; n?: unknown } | null;
      return { id: f['id'] as string, key: typeof d === 'object' && d !== null && typeof d.p === 'number' ? `${d.p}.${String(d.n)}` : undefined };
    });
  } finally {
    c.ws.terminate();
  }
}


/** The run: the cluster, the load for cfg.minutes, the end check; everything it started is stopped in the end. */
export async function runSoak(cfg: SoakConfig, log: (s: string) => void): Promise<SoakResult> {
  const startedAt = new Date().toISOString();
  const t0Epoch = performance.timeOrigin + performance.now();
  const now = (): number => performance.timeOrigin + performance.now() - t0Epoch;
  const run = `soak${Date.now().toString(36)}`;
  const slowCount = Math.round((cfg.clients * cfg.slowPct) / 100);
  const fleetCount = cfg.clients - slowCount;
  const roles: Roles = { ...defaultConfig(fleetCount).roles, run };
  const m = machineInfo();
  const machine = `${m.cores} cores (${m.cpuModel}), ${m.memGiB} GiB, ${m.node}, ${version('haproxy', ['-v'])}, ${version('redis-server', ['--version'])}`;
  // The fleet's processes end themselves after CHAOS_CHILD_LIFETIME_MS (30 min by default): the soak runs longer.
  process.env['CHAOS_CHILD_LIFETIME_MS'] ??= String((cfg.minutes + 45) * MINUTE_MS);
  const findings: string[] = [];
  const samples: SoakSample[] = [];
  const drains: DrainRecord[] = [];
  const churn = { cuts: 0, byNode: {} as Record<string, number>, failed: 0, errors: 0 };
  let cluster: Cluster | undefined;
  let fleet: Fleet | undefined;
  let slow: RpcChild<SlowRequest> | undefined;
  let connected = 0;
  let loadAt = NaN;
  let loadEnd = NaN;
  let slowStatus: SlowStatus | undefined;
  /** While the load runs (the sampler and the churn stop when it goes false, also when the run fails). */
  let loading = false;
  const tl = (): number => now() - loadAt;
  // The nodes run the sources (tsx), and B is started again every period:
  // a commit during the run reaches B's later lives, so the stamp says so.
  const commitAtStart = commit();
  const stamp = (): string => {
    const end = commit();
    return end === commitAtStart ? end : `${commitAtStart} (the sources changed during the run, ${end} at the end: B's later lives ran them)`;
  };
  const base = (): Omit<SoakResult, 'slopes'> => ({
    startedAt, commit: stamp(), machine, cfg, fleetClients: fleetCount, slowReaders: slowCount, connected, loadAt,
    loadMs: Number.isFinite(loadEnd) ? loadEnd - loadAt : Number.isFinite(loadAt) ? now() - loadAt : 0, wallS: now() / 1000,
    samples, drains, churn, ...(slowStatus === undefined ? {} : { slow: slowStatus }),
    acked: 0, ackedInHistory: 0, history: { acked: 0, lost: 0, storedTwice: 0, sharedIds: 0, examples: [] },
    delivery: { subscriptions: 0, expected: 0, missing: 0, missingLost: 0, duplicateIds: 0, duplicateKeys: 0, wireDuplicates: 0, examples: [] },
    unacked: 0, rejected: {}, recoveredFalse: 0, keyedStale: 0, keyedSubscribers: 0, notConnected: 0,
    shardRestarts: shardRestarts(), errorLines: cluster === undefined ? {} : Object.fromEntries(cluster.nodes.map((n) => [n.name, n.errorLines])),
    errorExamples: cluster === undefined ? [] : cluster.nodes.flatMap((n) => n.errorExamples),
    clientCloses: {}, unavailable: 0, findings,
    notable: cluster === undefined ? [] : cluster.nodes.flatMap((n) => n.notable.map((l) => `${n.name}: ${l}`)),
  });
  /** Shard restarts per node: the last count seen per start, summed over its starts. */
  function shardRestarts(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const node of ['a', 'b'] as const) {
      const byGen = new Map<number, number>();
      for (const s of samples) if (s[node].restarts !== undefined) byGen.set(s[node].gen, s[node].restarts!);
      out[node.toUpperCase()] = [...byGen.values()].reduce((a, b) => a + b, 0);
    }
    return out;
  }
  const fits = (): SlopeRow[] => slopes(samples, {
    warmupMs: cfg.warmupMinutes * MINUTE_MS, redisWarmupMs: cfg.redisWarmupMinutes * MINUTE_MS, endMs: Infinity, thresholdPct: cfg.thresholdPct,
    transients: transientsOf(drains),
  });
  let timer: NodeJS.Timeout | undefined;
  const maxMs = (cfg.minutes + 25) * MINUTE_MS;
  const overall = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`the soak took longer than ${maxMs / MINUTE_MS} min`)), maxMs); });
  const body = async (): Promise<SoakResult> => {
    log(`soak: ${fleetCount} fleet clients in ${cfg.procs} processes and ${slowCount} slow readers for ${cfg.minutes} min; drain of B every ${cfg.drainEveryMinutes} min; ` +
      `churn ${cfg.churnPct}% a minute; warm-up ${cfg.warmupMinutes} min (Redis ${cfg.redisWarmupMinutes} min); a sample every ${cfg.sampleSeconds} s`);
    if (cfg.redisWarmupMinutes >= cfg.minutes) log(`  note: the Redis warm-up (${cfg.redisWarmupMinutes} min) leaves no Redis sample to fit`);
    cluster = await Cluster.start({
      shards: cfg.shards, env: { WS_DRAIN_RATE: String(cfg.drainRate) }, haproxyInter: '500ms', redis: 'standalone',
      nodeLogs: cfg.nodeLogs === undefined ? undefined : join(cfg.nodeLogs, run),
    }, log);
    const c = cluster;
    fleet = await Fleet.start(fleetCount, cfg.procs);
    const f = fleet;
    const tc = now();
    const conn = await f.connect(c.urls, roles, 100, t0Epoch);
    connected = conn.ready;
    log(`  ${conn.ready}/${fleetCount} fleet clients connected and joined in ${((now() - tc) / 1000).toFixed(1)} s${conn.failed > 0 ? `; failed: ${JSON.stringify(conn.reasons)}` : ''}`);
    for (let k = 0; k < roles.topics; k++) await c.a.publish({ topic: durableTopic(roles, k), data: { warm: 1 } });
    for (let k = 0; k < roles.keyedTopics; k++) await c.a.publish({ topic: keyedTopic(roles, k), key: 'sym0', data: { warm: 1 } });
    if (!(await until(async () => (await f.status()).cold === 0, 30_000))) findings.push(`subscriptions without the warm-up event: ${(await f.status()).cold}`);
    if (slowCount > 0) {
      slow = await RpcChild.start<SlowRequest>(SELF, '--soak-child', 'soak slow readers');
      const sl = slow;
      process.once('exit', () => sl.killNow());
      const topics = Array.from({ length: slowCount }, (_, i) => topicsOf({ ...roles, topicsPerClient: cfg.slowTopics }, i * 7).map((k) => durableTopic(roles, k)));
      await sl.call({ op: 'start', urls: c.urls, topics, source: SLOW_SOURCE, stallMs: cfg.stallSeconds * 1000, pingMs: 20_000 }, 10_000);
    }
    await f.publishing(true);
    loadAt = now();
    const endAt = loadAt + cfg.minutes * MINUTE_MS;
    log(`  load started ${(loadAt / 1000).toFixed(0)} s into the run; it ends at ${new Date(Date.now() + cfg.minutes * MINUTE_MS).toISOString()}`);
    loading = true;

    const sampler = (async () => {
      let lastLog = -Infinity;
      while (loading) {
        const t = tl();
        const [a, b, redis, fs, ss] = await Promise.all([
          sampleNode(c.a), sampleNode(c.b),
          Promise.all([c.redis.cli('INFO', 'memory'), c.redis.cli('DBSIZE')]).catch(() => undefined),
          f.status().catch(() => undefined),
          slow?.call<SlowStatus>({ op: 'status' }, 5000).catch(() => undefined),
        ]);
        const keys = redis === undefined ? NaN : Number(redis[1].trim());
        let clientsRss = 0;
        for (const p of [...f.procs, ...(slow === undefined ? [] : [slow])]) { try { clientsRss += rssBytes(p.pid); } catch { /* exited */ } }
        const s: SoakSample = {
          t, a, b,
          ...(redis === undefined ? {} : { redisUsed: infoNum(redis[0], 'used_memory'), redisRss: infoNum(redis[0], 'used_memory_rss') }),
          ...(Number.isFinite(keys) ? { redisKeys: keys } : {}),
          ...(fs === undefined ? {} : { fleetOpen: fs.open, pending: fs.pending }),
          ...(ss === undefined ? {} : { slowOpen: ss.open, stalled: ss.stalled }),
          clientsRss,
        };
        samples.push(s);
        if (t - lastLog >= MINUTE_MS) {
          lastLog = t;
          const mib = (v: number | undefined): string => (v === undefined ? '-' : `${Math.round(v / MIB)}`);
          log(`  ${fmtMin(t)} min: A rss ${mib(a.rss)} MiB heap ${mib(a.heap)} MiB fds ${a.fds ?? '-'} sockets ${a.sockets ?? '-'}; ` +
            `B ${b.alive ? `rss ${mib(b.rss)} MiB sockets ${b.sockets ?? '-'}` : 'down'}; redis ${mib(s.redisUsed)} MiB, ${s.redisKeys ?? '-'} keys; ` +
            `fleet ${s.fleetOpen ?? '?'}/${fleetCount} open, ${s.pending ?? '?'} pending; slow ${s.slowOpen ?? '-'} open ${s.stalled ?? '-'} stalled; clients' rss ${mib(clientsRss)} MiB; ` +
            `churned ${churn.cuts}; drains ${drains.length}`);
        }
        const wait = loadAt + Math.ceil((t + 1) / (cfg.sampleSeconds * 1000)) * cfg.sampleSeconds * 1000 - now();
        await sleep(Math.max(0, Math.min(wait, endAt - now())));
        if (now() >= endAt) break;
      }
    })();

    const churner = (async () => {
      let carry = 0;
      while (loading && cfg.churnPct > 0) {
        await sleep(Math.min(CHURN_TICK_MS, Math.max(0, endAt - now())));
        if (!loading || now() >= endAt) break;
        const q = churnQuota(cfg.churnPct, fleetCount, CHURN_TICK_MS, carry);
        carry = q.carry;
        if (q.k === 0) continue;
        try {
          const per = await Promise.all(c.lbs.map(async (l) => parseShowSess(await haproxyCli(l.statsSocket, 'show sess')).map((x) => ({ ...x, lb: l }))));
          const picked = pickRandom(per.flat().filter((x) => x.src !== SLOW_SOURCE), q.k);
          await Promise.all(c.lbs.map(async (l) => {
            const mine = picked.filter((x) => x.lb === l);
            if (mine.length === 0) return;
            const said = await haproxyCli(l.statsSocket, mine.map((x) => `shutdown session ${x.id}`).join('; '));
            const gone = (said.match(/No such session|Unknown/gi) ?? []).length;
            churn.failed += gone;
            churn.cuts += mine.length - gone;
            for (const x of mine) churn.byNode[x.srv] = (churn.byNode[x.srv] ?? 0) + 1;
          }));
        } catch (err) {
          churn.errors++;
          if (churn.errors <= 3) findings.push(`churn: ${(err as Error).message}`);
        }
      }
    })();

    // The drains of B, every drainEveryMinutes, each waited for. The first comes half a period in, inside the warm-up (2.5 min
    // by default): A has held nearly every client once (its high-water mark) before its series are fitted.
    for (let k = 1; ; k++) {
      const at = loadAt + (k - 0.5) * cfg.drainEveryMinutes * MINUTE_MS;
      if (at >= endAt - 30_000) break;
      await sleep(Math.max(0, at - now()));
      const from = tl();
      const before = [...samples].reverse().find((s) => s.b.alive)?.b.sockets;
      log(`  ${fmtMin(from)} min: SIGTERM B (${before ?? '?'} sockets)`);
      c.b.signal('SIGTERM');
      if (!(await c.b.waitExit(45_000))) {
        findings.push(`drain ${k}: B did not exit within 45 s of SIGTERM; killed`);
        c.b.killNow();
        await c.b.waitExit(5000);
      }
      const exitMs = tl() - from;
      // The code of the process that exited: read before the new start replaces it.
      const exitCode = c.b.exitCode;
      let backAt = NaN;
      if (await until(async () => (await f.status()).open >= Math.ceil(0.99 * fleetCount), 60_000, 500)) backAt = tl() - from;
      let error: string | undefined;
      try {
        await c.b.start();
        await c.waitUp(['node-a', 'node-b'], 30_000);
      } catch (err) {
        error = (err as Error).message.slice(0, 300);
        findings.push(`drain ${k}: B not back: ${error}`);
      }
      const d: DrainRecord = {
        at: from, ...(before === undefined ? {} : { socketsBefore: before }), exitMs, exitCode, backMs: backAt, upMs: tl() - from,
        ...(error === undefined ? {} : { error }),
      };
      drains.push(d);
      log(`    B exited after ${fmtS(exitMs)}; 99% of the fleet open after ${fmtS(backAt)}; B UP again after ${fmtS(d.upMs)}`);
      if (error !== undefined) break;
    }
    await sleep(Math.max(0, endAt - now()));
    loading = false;
    await Promise.all([sampler, churner]);
    loadEnd = now();
    log(`  load over after ${((loadEnd - loadAt) / MINUTE_MS).toFixed(1)} min; ${samples.length} samples, ${churn.cuts} sessions cut, ${drains.length} drains`);

    // The end: slow readers read again; publishing stops; outboxes empty; a fence on every topic and feed; the checks.
    if (slow !== undefined) {
      await slow.call({ op: 'calm' }, 10_000).catch(() => undefined);
      slowStatus = await slow.call<SlowStatus>({ op: 'status' }, 10_000).catch(() => undefined);
    }
    await f.publishing(false);
    const drained = await until(async () => (await f.status()).pending === 0, 90_000, 500);
    const st0 = await f.status();
    log(`  publishing stopped; outboxes ${drained ? 'empty' : `still hold ${st0.pending}`}; ${st0.acked} acked`);
    if (!drained) findings.push(`outboxes still held ${st0.pending} publishes 90 s after publishing stopped`);
    const fence = await fenceAndWait(c.a, f, roles, 60_000);
    const st = fence.status;
    findings.push(...fence.findings);
    const { acked, extras } = await f.acked();
    const readAt = now();
    // Acks older than the history's TTL (less a minute for the reads' own time) have left history by design: deliveries only.
    const recent: Acked[] = acked.filter((x) => (x.ackAt ?? 0) >= readAt - cfg.historyTtlMs + MINUTE_MS);
    const history = new Map<string, HistoryEvent[]>();
    for (let k = 0; k < roles.topics; k++) history.set(durableTopic(roles, k), await readHistory(c.a, durableTopic(roles, k)));
    const hist = checkHistory(recent, history);
    const byTopic = ackedByTopic(acked);
    const delivery = mergeDeliveryChecks(await f.verify(Object.fromEntries([...byTopic].map(([t, ids]) => [t, [...ids]])), hist.lostIds ?? {}));
    let closesByReasonA: Record<string, number> | undefined;
    try { closesByReasonA = metricByLabel(await c.a.metrics(5000), 'sluice_clients_closed_total', 'reason'); } catch { /* A busy: not reported */ }
    for (const n of c.nodes) if (n.warnings.size > 0) findings.push(`${n.name} warnings: ${JSON.stringify(Object.fromEntries(n.warnings))}`);
    for (const n of c.nodes) if (n.stderrLines > 0) findings.push(`${n.name} wrote ${n.stderrLines} stderr lines: ${n.stderrExamples.join(' | ')}`);
    for (const l of c.lbs) {
      const changes = l.stderr.filter((x) => /Server sluice\/node-\w+ is (UP|DOWN)/.test(x));
      const other = l.stderr.filter((x) => !changes.includes(x));
      findings.push(`${l.name}: ${changes.length} server state changes`);
      if (other.length > 0) findings.push(`${l.name} stderr: ${other.slice(0, 5).join(' | ')}`);
    }
    if (c.a.starts !== 1) findings.push(`A was started ${c.a.starts} times: its series restart (only its first life is fitted)`);
    if (Object.keys(extras.errors).length > 0) findings.push(`client errors by code: ${JSON.stringify(extras.errors)}`);
    if (Object.keys(extras.refusals).length > 0) findings.push(`refused upgrades seen by clients, by status: ${JSON.stringify(extras.refusals)}`);
    findings.push(`keyed events received: ${extras.keyedReceived}; keyed-feed rejoins without a resume position: ${extras.keyedNoPosition}`);
    findings.push(...extras.odd, ...hist.examples, ...delivery.examples);
    const res: SoakResult = {
      ...base(), slopes: fits(), acked: acked.length, ackedInHistory: recent.length, history: hist, delivery, unacked: st.pending, rejected: extras.rejected,
      recoveredFalse: extras.recoveredFalse, keyedStale: st.keyedFenceMissing, keyedSubscribers: st.keyedSubscribers,
      notConnected: st.clients - st.open + (fleetCount - st.clients),
      ...(closesByReasonA === undefined ? {} : { closesByReasonA }), clientCloses: extras.closeCodes, unavailable: extras.unavailable,
    };
    return res;
  };
  try {
    return await Promise.race([body(), overall]);
  } catch (err) {
    const msg = (err as Error).message;
    log(`soak: FAILED: ${msg}`);
    return { ...base(), slopes: fits(), error: msg };
  } finally {
    loading = false;
    clearTimeout(timer);
    if (slow !== undefined) { await slow.call({ op: 'stop' }, 10_000).catch(() => undefined); await slow.exit().catch(() => undefined); }
    if (fleet !== undefined) { await fleet.close().catch(() => undefined); await fleet.exit().catch(() => undefined); }
    if (cluster !== undefined) await cluster.stop().catch((e: unknown) => log(`  cleanup: ${(e as Error).message}`));
  }
}

/** `pnpm chaos soak`: runs it, writes the markdown, the SVG and the JSON, prints the slopes; the exit code (1: an invariant broke or a series grows). */
export async function soakMain(argv: readonly string[]): Promise<number> {
  const cfg = parseSoakArgs(argv, Number(process.env['WS_HISTORY_TTL_MS'] ?? 600_000));
  if (cfg === 'help') { console.log(SOAK_HELP); return 0; }
  const fd = openFileLimit();
  if (fd.soft < 4000) console.log(`note: open-file limit ${fd.soft} here; each process started raises its own to the hard limit (${fd.hard})`);
  const r = await runSoak(cfg, (l) => console.log(l));
  const svgPath = `${cfg.out.replace(/\.md$/, '')}.svg`;
  mkdirSync(join(cfg.out, '..'), { recursive: true });
  writeFileSync(cfg.out, `${renderSoakReport(r, basename(svgPath))}\n`);
  writeFileSync(svgPath, renderSoakSvg({
    samples: r.samples, slopes: r.slopes, drains: r.drains.map((d) => d.at), warmupMs: cfg.warmupMinutes * MINUTE_MS,
    redisWarmupMs: cfg.redisWarmupMinutes * MINUTE_MS, thresholdPct: cfg.thresholdPct,
    title: `Soak: ${r.fleetClients + r.slowReaders} clients, ${(r.loadMs / MINUTE_MS).toFixed(0)} min, churn ${cfg.churnPct}%/min, B drained every ${cfg.drainEveryMinutes} min (${r.startedAt.slice(0, 16)}Z)`,
  }));
  writeFileSync(`${cfg.out.replace(/\.md$/, '')}.json`, `${JSON.stringify(r, null, 1)}\n`);
  console.log(`\n${slopeTable(r.slopes, cfg.thresholdPct)}\n\nwritten: ${cfg.out}, ${svgPath}`);
  const broken = soakViolations(r);
  if (broken.length > 0) {
    console.log(`\nsoak: ${broken.length} problem(s):\n  ${broken.join('\n  ')}`);
    return 1;
  }
  console.log('\nsoak: every invariant held and every judged series is flat or falling');
  return 0;
}

if (process.argv.includes('--soak-child') && process.argv[1] !== undefined && pathToFileURL(process.argv[1]).href === import.meta.url) childMain();
