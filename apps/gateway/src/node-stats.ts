/**
 * What the admin page shows of a node (GET /v1/nodes): its sockets, rates,
 * lag, memory and Redis state now, and a series of the last minutes.
 *
 * Every STATS_INTERVAL_MS the coordinator reads the node's metrics (the same
 * per-shard answers /metrics uses, with its wait for a busy shard) into one
 * sample; the last SERIES_LENGTH samples are kept (10 minutes, a few KiB).
 * Rates are the difference of the last two samples' counters over their
 * interval; counters include the shards that crashed (NodeMetrics keeps
 * them), so a restart never reads as a negative rate. Nothing here runs per
 * frame or per event: a sample is one scrape of each shard every 5 s.
 */
import type { MetricsJson } from '@sluice/telemetry';

/** How often a node samples itself for the admin page. */
export const STATS_INTERVAL_MS = 5000;
/** Samples kept: 10 minutes. */
export const SERIES_LENGTH = 120;

export type NodeState = 'ready' | 'not_ready' | 'draining' | 'unresponsive';

export interface ShardView {
  readonly shard: number;
  readonly sockets: number;
  readonly lagMs: number;
  readonly slowLane: number;
  readonly bufferedBytes: number;
}

export interface SeriesPoint {
  readonly t: number;
  readonly sockets: number;
  /** Per second, over the interval that ends at `t`. */
  readonly upgrades: number;
  readonly closes: number;
  readonly refused: number;
  readonly sent: number;
  readonly lagMs: number;
  readonly bufferedBytes: number;
}

export interface NodeRates {
  /** Per second, by outcome (`accepted`, `over_budget`, ...: sluice_upgrades_total's labels). */
  readonly upgrades: Record<string, number>;
  /** Sockets the server closed per second, by reason (sluice_clients_closed_total). */
  readonly closes: Record<string, number>;
  /** Client frames refused per second, by reason (sluice_limit_rejections_total). */
  readonly refused: Record<string, number>;
  readonly published: number;
  readonly sent: number;
  readonly dropped: number;
}

/** One node as GET /v1/nodes answers it (docs/admin-api.openapi.json: Node). */
export interface NodeView {
  readonly id: string;
  /** The node that answered the request. Set by the answering node. */
  self: boolean;
  state: NodeState;
  readonly version: string;
  readonly startedAt: number;
  /** When the sample was taken (this node's clock). */
  readonly sampledAt: number;
  /** How old the sample is, on the answering node's clock. Set by the answering node. */
  ageMs: number;
  readonly sockets: number;
  readonly users: number;
  readonly slowLane: number;
  readonly bufferedBytes: number;
  /** The largest event-loop lag (max over the last 5 s) of any thread of the node. */
  readonly lagMs: number;
  readonly heapUsedBytes: number;
  readonly rssBytes: number;
  /** `unknown`: a node that never answered. */
  readonly redis: 'up' | 'down' | 'none' | 'unknown';
  readonly upgradeBudget: number;
  readonly upgradeBacklogMs: number;
  readonly shards: readonly ShardView[];
  readonly rates: NodeRates;
  /** Oldest first, STATS_INTERVAL_MS apart. */
  readonly series: readonly SeriesPoint[];
}

/** What the sampler reads besides the metrics: the node's state now. */
export interface NodeFacts {
  readonly id: string;
  readonly version: string;
  readonly startedAt: number;
  state(): Exclude<NodeState, 'unresponsive'>;
  redis(): 'up' | 'down' | 'none';
  upgradeBudget(): number;
  upgradeBacklogMs(): number;
  /** Sockets per running shard now (shared memory: fresher than a scrape). */
  sockets(): ReadonlyMap<number, number>;
  rssBytes(): number;
}

export interface Sample {
  readonly t: number;
  readonly counters: Counters;
  readonly shards: readonly ShardView[];
  readonly users: number;
  readonly heapUsedBytes: number;
  readonly lagMs: number;
}

/** The counters' totals at a sample: the shape of the rates made from them. */
type Counters = NodeRates;

export interface MetricParts {
  readonly own: MetricsJson;
  readonly shards: ReadonlyMap<number, MetricsJson>;
  readonly retired: readonly MetricsJson[];
}

export class NodeStats {
  private readonly samples: Sample[] = [];
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> | undefined;

  constructor(
    private readonly facts: NodeFacts,
    /** The node's metrics, apart (NodeMetrics.parts). */
    private readonly read: () => Promise<MetricParts>,
    private readonly onError: (err: unknown) => void,
  ) {}

  start(): void {
    void this.sample();
    this.timer = setInterval(() => void this.sample(), STATS_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
  }

  /** Takes a sample now (one at a time: a call while one is taken waits for it). */
  sample(): Promise<void> {
    this.sampling ??= this.read().then((parts) => {
      this.samples.push(sampleOf(parts, Date.now()));
      if (this.samples.length > SERIES_LENGTH) this.samples.shift();
    }).catch(this.onError).finally(() => (this.sampling = undefined));
    return this.sampling;
  }

  /** The node as the admin page shows it: the last sample, with the sockets and state of now. */
  async view(): Promise<NodeView> {
    if (this.samples.length === 0) await this.sample();
    const f = this.facts;
    const last = this.samples.at(-1);
    const now = Date.now();
    const live = f.sockets();
    const shards = [...live].map(([shard, sockets]) => {
      const s = last?.shards.find((x) => x.shard === shard);
      return { shard, sockets, lagMs: s?.lagMs ?? 0, slowLane: s?.slowLane ?? 0, bufferedBytes: s?.bufferedBytes ?? 0 };
    });
    const series: SeriesPoint[] = [];
    for (let i = 1; i < this.samples.length; i++) series.push(pointOf(this.samples[i - 1]!, this.samples[i]!));
    const prev = this.samples.at(-2);
    return {
      id: f.id,
      self: true,
      state: f.state(),
      version: f.version,
      startedAt: f.startedAt,
      sampledAt: last?.t ?? now,
      ageMs: last === undefined ? 0 : now - last.t,
      sockets: shards.reduce((a, s) => a + s.sockets, 0),
      users: last?.users ?? 0,
      slowLane: shards.reduce((a, s) => a + s.slowLane, 0),
      bufferedBytes: shards.reduce((a, s) => a + s.bufferedBytes, 0),
      lagMs: last?.lagMs ?? 0,
      heapUsedBytes: last?.heapUsedBytes ?? 0,
      rssBytes: f.rssBytes(),
      redis: f.redis(),
      upgradeBudget: f.upgradeBudget(),
      upgradeBacklogMs: f.upgradeBacklogMs(),
      shards,
      rates: prev === undefined || last === undefined ? NO_RATES : ratesOf(prev, last),
      series,
    };
  }
}

const NO_RATES: NodeRates = { upgrades: {}, closes: {}, refused: {}, published: 0, sent: 0, dropped: 0 };

type Metric = MetricsJson[number];

function find(json: MetricsJson, name: string): Metric | undefined {
  return json.find((m) => m.name === name);
}

/** The sum of a metric's values (every label). */
function total(json: MetricsJson, name: string): number {
  let n = 0;
  for (const v of find(json, name)?.values ?? []) n += v.value;
  return n;
}

/** The sum of a metric's values by one label's value, added into `into`. */
function byLabel(json: MetricsJson, name: string, label: string, into: Record<string, number>): void {
  for (const v of find(json, name)?.values ?? []) {
    const k = String((v.labels as Record<string, string | number | undefined>)[label] ?? '');
    into[k] = (into[k] ?? 0) + v.value;
  }
}

function maxOf(json: MetricsJson, name: string): number {
  let n = 0;
  for (const v of find(json, name)?.values ?? []) n = Math.max(n, v.value);
  return n;
}

export function sampleOf(parts: MetricParts, t: number): Sample {
  const all = [parts.own, ...parts.shards.values(), ...parts.retired];
  const upgrades: Record<string, number> = {};
  const closes: Record<string, number> = {};
  const refused: Record<string, number> = {};
  let published = 0;
  let sent = 0;
  let dropped = 0;
  for (const j of all) {
    byLabel(j, 'sluice_upgrades_total', 'outcome', upgrades);
    byLabel(j, 'sluice_clients_closed_total', 'reason', closes);
    byLabel(j, 'sluice_limit_rejections_total', 'reason', refused);
    published += total(j, 'sluice_messages_published_total');
    sent += total(j, 'sluice_messages_sent_total');
    dropped += total(j, 'sluice_messages_dropped_total');
  }
  const shards: ShardView[] = [];
  let users = 0;
  let heap = total(parts.own, 'sluice_heap_used_bytes');
  let lag = maxOf(parts.own, 'sluice_eventloop_lag_max_seconds');
  for (const [shard, j] of parts.shards) {
    const shardLag = maxOf(j, 'sluice_eventloop_lag_max_seconds');
    lag = Math.max(lag, shardLag);
    heap += total(j, 'sluice_heap_used_bytes');
    users += total(j, 'sluice_users_connected');
    shards.push({ shard, sockets: total(j, 'sluice_connected_sockets'), lagMs: round(shardLag * 1000), slowLane: total(j, 'sluice_slow_lane_sockets'),
      bufferedBytes: total(j, 'sluice_buffered_bytes') });
  }
  return { t, counters: { upgrades, closes, refused, published, sent, dropped }, shards, users, heapUsedBytes: heap, lagMs: round(lag * 1000) };
}

function round(x: number): number {
  return Math.round(x * 10) / 10;
}

/** Per second between two samples; a counter that went down (it cannot, but a scrape may miss a shard) reads 0. */
function ratesOf(a: Sample, b: Sample): NodeRates {
  const s = Math.max(0.001, (b.t - a.t) / 1000);
  const per = (x: number, y: number): number => round(Math.max(0, y - x) / s);
  const perKey = (x: Record<string, number>, y: Record<string, number>): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const k of Object.keys(y)) {
      const r = per(x[k] ?? 0, y[k]!);
      if (r > 0) out[k] = r;
    }
    return out;
  };
  const c = a.counters;
  const d = b.counters;
  return { upgrades: perKey(c.upgrades, d.upgrades), closes: perKey(c.closes, d.closes), refused: perKey(c.refused, d.refused),
    published: per(c.published, d.published), sent: per(c.sent, d.sent), dropped: per(c.dropped, d.dropped) };
}

const sum = (r: Record<string, number>): number => Object.values(r).reduce((a, b) => a + b, 0);

function pointOf(a: Sample, b: Sample): SeriesPoint {
  const r = ratesOf(a, b);
  return { t: b.t, sockets: b.shards.reduce((x, s) => x + s.sockets, 0), upgrades: round(sum(r.upgrades)), closes: round(sum(r.closes)),
    refused: round(sum(r.refused)), sent: r.sent, lagMs: b.lagMs, bufferedBytes: b.shards.reduce((x, s) => x + s.bufferedBytes, 0) };
}
