// The chaos harness's pure pieces (unit-tested in benchmarks/test/chaos.test.ts):
// the accounting of acknowledged publishes against history and against what
// each subscriber got, the reconnect arrival rate from polled counters, the
// time until a share of the dropped clients is back, the time until
// publishes are acknowledged again after a Redis failover, a node's
// readiness and load-balancer state around a network fault and its publish
// ack latency, the verdicts (which scenarios may lose acknowledged events,
// what readiness a fault must show), and the results table.

import { percentile, timeToShare } from '../src/lib/series.ts';


/** One acknowledged durable publish: its topic, the id the ack carried, and the publish's own key (`<client>.<n>`, also in its data). */
export interface Acked {
  readonly topic: string;
  readonly id: string;
  readonly key: string;
  /** When publish() was called and when its ack came (ms on the run's clock). */
  readonly sentAt?: number;
  readonly ackAt?: number;
  /** The gateway node id of the socket the ack came on (the first part of its connection id). */
  readonly node?: string;
}

/** What one subscriber got on one durable topic. */
export interface SubscriptionRecord {
  readonly client: number;
  readonly topic: string;
  /** Ids the SDK handed to the handler, each time it did (a duplicate appears twice). */
  readonly ids: readonly string[];
  /** The publish key of each of those events that carried one (`<client>.<n>`), in the same way. */
  readonly keys: readonly string[];
  /** Ids seen on the wire, over every socket the client had, each time they came. */
  readonly wire: readonly string[];
}

export interface DeliveryCheck {
  subscriptions: number;
  /** (subscriber, acked publish) pairs that should have been delivered. */
  expected: number;
  /** Of those, the ones the subscriber never got, of events that are in history. */
  missing: number;
  /** The same of events lost from history (acked, then lost in a failover): counted apart, since the scenarios that allow loss allow these. */
  missingLost: number;
  /** Events the handler got more than once under one id (per subscriber, topic and id). */
  duplicateIds: number;
  /** Events the handler got more than once under different ids with the same publish key: a publish stored twice. */
  duplicateKeys: number;
  /** Events the gateway sent a client more than once (over all of its sockets), whether or not the SDK passed them on. */
  wireDuplicates: number;
  /** Examples of each kind, at most `EXAMPLES` in all. */
  examples: string[];
}

export const EXAMPLES = 10;

export function emptyDeliveryCheck(): DeliveryCheck {
  return { subscriptions: 0, expected: 0, missing: 0, missingLost: 0, duplicateIds: 0, duplicateKeys: 0, wireDuplicates: 0, examples: [] };
}

/** Groups acked publishes by topic (ids as a set). */
export function ackedByTopic(acked: readonly Acked[]): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const a of acked) {
    let s = out.get(a.topic);
    if (s === undefined) out.set(a.topic, (s = new Set()));
    s.add(a.id);
  }
  return out;
}

function extras(values: readonly string[]): { extra: number; first: string | undefined; seen: Set<string> } {
  const seen = new Set<string>();
  let extra = 0;
  let first: string | undefined;
  for (const v of values) {
    if (seen.has(v)) { extra++; first ??= v; } else seen.add(v);
  }
  return { extra, first, seen };
}

/**
 * Adds one subscription to `acc`: every acked id of its topic must be among
 * the ids the handler got (missing otherwise; missingLost for the ids in
 * `lost`, those missing from history), and no id, publish key or wire id may
 * come twice (each repeat counts once).
 */
export function checkSubscription(acc: DeliveryCheck, acked: ReadonlyMap<string, ReadonlySet<string>>, sub: SubscriptionRecord,
  lost?: ReadonlyMap<string, ReadonlySet<string>>): void {
  acc.subscriptions++;
  const want = acked.get(sub.topic);
  const gone = lost?.get(sub.topic);
  // One pass over the ids gives both the set of those got and their repeats.
  const d = extras(sub.ids);
  const got = d.seen;
  const note = (s: string): void => { if (acc.examples.length < EXAMPLES) acc.examples.push(s); };
  if (want !== undefined) {
    acc.expected += want.size;
    for (const id of want) {
      if (got.has(id)) continue;
      if (gone?.has(id) === true) { acc.missingLost++; note(`client ${sub.client} never got ${sub.topic} ${id} (lost from history)`); } else {
        acc.missing++;
        note(`client ${sub.client} never got ${sub.topic} ${id}`);
      }
    }
  }
  if (d.extra > 0) { acc.duplicateIds += d.extra; note(`client ${sub.client} got ${sub.topic} ${d.first} more than once`); }
  const k = extras(sub.keys);
  if (k.extra > 0) { acc.duplicateKeys += k.extra; note(`client ${sub.client} got publish ${k.first} on ${sub.topic} under two ids`); }
  const w = extras(sub.wire);
  if (w.extra > 0) { acc.wireDuplicates += w.extra; note(`the gateway sent client ${sub.client} ${sub.topic} ${w.first} more than once`); }
}

export function mergeDeliveryChecks(parts: readonly DeliveryCheck[]): DeliveryCheck {
  const out = emptyDeliveryCheck();
  for (const p of parts) {
    out.subscriptions += p.subscriptions;
    out.expected += p.expected;
    out.missing += p.missing;
    out.missingLost += p.missingLost;
    out.duplicateIds += p.duplicateIds;
    out.duplicateKeys += p.duplicateKeys;
    out.wireDuplicates += p.wireDuplicates;
    for (const e of p.examples) if (out.examples.length < EXAMPLES) out.examples.push(e);
  }
  return out;
}

/** One event of a topic's history, as a join with since 0-0 replays it. */
export interface HistoryEvent {
  readonly id: string;
  /** The publish key in its data, when it has one. */
  readonly key: string | undefined;
}

export interface HistoryCheck {
  acked: number;
  /** Acked publishes whose id is not in the topic's history. */
  lost: number;
  /** Those ids by topic (for the delivery check; not in the JSON when empty). */
  lostIds?: Record<string, string[]>;
  /** Publish keys stored more than once (each extra copy counts). */
  storedTwice: number;
  /** Distinct publishes (keys) acked with one id that another publish was also acked with. */
  sharedIds: number;
  examples: string[];
}

export function checkHistory(acked: readonly Acked[], history: ReadonlyMap<string, readonly HistoryEvent[]>): HistoryCheck {
  const out: HistoryCheck = { acked: acked.length, lost: 0, storedTwice: 0, sharedIds: 0, examples: [] };
  const note = (s: string): void => { if (out.examples.length < EXAMPLES) out.examples.push(s); };
  const ids = new Map<string, Set<string>>();
  for (const [topic, events] of history) ids.set(topic, new Set(events.map((e) => e.id)));
  const keyOfId = new Map<string, string>();
  const lostIds: Record<string, string[]> = {};
  for (const a of acked) {
    if (ids.get(a.topic)?.has(a.id) !== true) {
      out.lost++;
      (lostIds[a.topic] ??= []).push(a.id);
      note(`acked ${a.topic} ${a.id} (${a.key}) is not in history`);
    }
    const tid = `${a.topic} ${a.id}`;
    const other = keyOfId.get(tid);
    if (other === undefined) keyOfId.set(tid, a.key);
    else if (other !== a.key) { out.sharedIds++; note(`${a.key} and ${other} were both acked as ${tid}`); }
  }
  for (const [topic, events] of history) {
    const keys = events.map((e) => e.key).filter((k): k is string => k !== undefined);
    const d = extras(keys);
    if (d.extra > 0) { out.storedTwice += d.extra; note(`${topic}: publish ${d.first} stored more than once`); }
  }
  if (out.lost > 0) out.lostIds = lostIds;
  return out;
}

// ---- after a Redis failover ----------------------------------------------------------

export interface RecoveryStats {
  /** A publish counts as delayed when its ack came more than this after publish() (ms). */
  lateMs: number;
  /** Publishes acked after the kill that were delayed. */
  delayed: number;
  /** From the kill until the first delayed publish got its ack (ms): acks resume. 0 when none was delayed. */
  resumeMs: number;
  /**
   * From the kill until the last delayed publish got its ack (ms): the
   * backlog the fault caused is acknowledged, and every later publish was
   * acked within lateMs. 0 when none was delayed. It includes the SDK's own
   * wait before each resend (full jitter from 0.5 s, doubling per
   * `unavailable`, up to 30 s): what a publisher sees.
   */
  recoverMs: number;
  /** The longest a publish acked after the kill waited for its ack (ms). */
  maxAckMs: number;
}

/** How long the publishes acked after `killAt` waited (from the acks' sentAt and ackAt); see RecoveryStats. */
export function recoveryStats(acked: readonly Acked[], killAt: number, lateMs = 1000): RecoveryStats {
  const out: RecoveryStats = { lateMs, delayed: 0, resumeMs: 0, recoverMs: 0, maxAckMs: 0 };
  let first = Infinity;
  for (const a of acked) {
    if (a.ackAt === undefined || a.sentAt === undefined || a.ackAt < killAt) continue;
    const waited = a.ackAt - a.sentAt;
    out.maxAckMs = Math.max(out.maxAckMs, waited);
    if (waited > lateMs) {
      out.delayed++;
      first = Math.min(first, a.ackAt - killAt);
      out.recoverMs = Math.max(out.recoverMs, a.ackAt - killAt);
    }
  }
  if (out.delayed > 0) out.resumeMs = first;
  return out;
}

export interface FailoverResult {
  /** What was killed: `master :6390`, with the share of published topics on it for a Cluster. */
  readonly killed: string;
  readonly promoted: string;
  /**
   * From the SIGKILL until the test kit saw the new master (every sentinel
   * naming it, or every Cluster node seeing the killed master's slots served
   * by its replica; and it saying role:master), polled every 100 ms.
   */
  readonly failoverMs: number;
  /** From the kill until both nodes' /health/ready answered 200 again after their last 503; 0 when they never failed; NaN when one still failed at the step's end. */
  readonly readyMs: number;
  /** From the kill until the old master, started again after the failover, was a replica with its link up (NaN: not within the wait). */
  readonly rejoinedMs: number;
  readonly recovery: RecoveryStats;
}

// ---- a network fault on one node's link to Redis -------------------------------------

/** One poll of something that is up or down (a node's /health/ready, a load balancer's view of a server), at `ms` (when it was asked). */
export interface StateSample {
  readonly ms: number;
  readonly up: boolean;
}

export interface StateStats {
  /** Up -> down changes from `from` on (a sample down at or after it whose previous sample was up, or that is the first). */
  downs: number;
  /** From `from` until the first sample down at or after it (ms); NaN when none was. */
  firstDownMs: number;
  /**
   * From `to` (the fault's end) until the first sample up after the last one
   * down (ms): 0 when none was down from `from` on, or when it was up again
   * before `to`; NaN when the last sample was down.
   */
  upAgainMs: number;
  /** Time down from `from` on: the gaps after each down sample, summed (ms). */
  downMs: number;
}

/** Down periods of `samples` (sorted by ms) from `from` on, against a fault from `from` to `to`; see StateStats. Polls every P ms: each time is late by up to P. */
export function stateStats(samples: readonly StateSample[], from: number, to: number): StateStats {
  const out: StateStats = { downs: 0, firstDownMs: NaN, upAgainMs: 0, downMs: 0 };
  let prevUp = true;
  let lastDown = -1;
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i]!;
    if (s.ms < from) { prevUp = s.up; continue; }
    if (!s.up) {
      if (prevUp) out.downs++;
      if (Number.isNaN(out.firstDownMs)) out.firstDownMs = s.ms - from;
      lastDown = i;
      const next = samples[i + 1];
      if (next !== undefined) out.downMs += next.ms - s.ms;
    }
    prevUp = s.up;
  }
  if (lastDown >= 0) {
    const up = samples.slice(lastDown + 1).find((x) => x.up);
    out.upAgainMs = up === undefined ? NaN : Math.max(0, up.ms - to);
  }
  return out;
}

/** Several views of one thing (a server in each load balancer): the first down of any, the last up again of all (NaN if any is still down), downs summed, the longest time down. */
export function mergeStateStats(parts: readonly StateStats[]): StateStats {
  const firsts = parts.map((p) => p.firstDownMs).filter((x) => !Number.isNaN(x));
  return {
    downs: parts.reduce((x, p) => x + p.downs, 0),
    firstDownMs: firsts.length === 0 ? NaN : Math.min(...firsts),
    upAgainMs: parts.some((p) => Number.isNaN(p.upAgainMs)) ? NaN : Math.max(0, ...parts.map((p) => p.upAgainMs)),
    downMs: Math.max(0, ...parts.map((p) => p.downMs)),
  };
}

export interface LatencyStats {
  /** Publishes counted. */
  n: number;
  /** From publish() to its ack (ms), nearest rank; NaN when none. */
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** Ack latency of the publishes sent in [from, to) and acked on one of `nodes` (gateway node ids; every node when absent). */
export function ackLatency(acked: readonly Acked[], from: number, to: number, nodes?: ReadonlySet<string>): LatencyStats {
  const waits: number[] = [];
  for (const a of acked) {
    if (a.sentAt === undefined || a.ackAt === undefined || a.sentAt < from || a.sentAt >= to) continue;
    if (nodes !== undefined && (a.node === undefined || !nodes.has(a.node))) continue;
    waits.push(a.ackAt - a.sentAt);
  }
  return { n: waits.length, p50Ms: percentile(waits, 0.5), p99Ms: percentile(waits, 0.99), maxMs: waits.length === 0 ? NaN : Math.max(...waits) };
}

/** What readiness a fault must show, as docs/operations.md ("Readiness and start-up") says it. */
export interface ReadinessExpectation {
  /** The node must fail readiness, by this long after the fault began (ms). */
  readonly unreadyByMs?: number;
  /** ... and answer 200 again by this long after the fault ended (ms). Without either: only ready again by the step's end. */
  readonly readyWithinMs?: number;
  /** The fault must count as an outage (sluice_redis_outages_total of the node grows). */
  readonly outage?: boolean;
}

export interface NetFaultResult {
  /** The node whose link had the fault (`A`). */
  readonly node: string;
  /** What was done, for the report: `A's Redis traffic (:6379) dropped both ways`. */
  readonly what: string;
  /** How long the fault was on (ms). */
  readonly faultMs: number;
  /** The node's /health/ready (polled every 200 ms), against the fault's start and end. */
  readonly ready: StateStats;
  /** The node in the load balancers (`show stat`, every 200 ms): any of them first marking it DOWN, all of them UP again. */
  readonly lb: StateStats;
  /** The other nodes' readiness failures over the step (none expected: their link was fine). */
  readonly othersUnready: number;
  /** sluice_redis_outages_total growth per node over the step. */
  readonly outages: Readonly<Record<string, number>>;
  /** Ack latency by node name, of publishes sent before the fault and during it. */
  readonly ackBefore: Readonly<Record<string, LatencyStats>>;
  readonly ackDuring: Readonly<Record<string, LatencyStats>>;
  /** From the fault's start: publishes acked more than 1 s after publish() (the SDK resends after `unavailable`). */
  readonly recovery: RecoveryStats;
  readonly expect: ReadinessExpectation;
  /** Set when the fault did not hold as asked (the delay pump died): what happened. */
  readonly faultFailure?: string;
}

/** What a network fault broke of its expectation, as sentences. */
export function netFaultViolations(f: NetFaultResult): string[] {
  const out: string[] = [];
  const n = f.node;
  if (f.faultFailure !== undefined) out.push(`the fault did not hold: ${f.faultFailure}`);
  if (Number.isNaN(f.ready.upAgainMs)) out.push(`${n} was not ready again by the end of the step`);
  if (Number.isNaN(f.lb.upAgainMs)) out.push(`a load balancer still had ${n} DOWN at the end of the step`);
  const e = f.expect;
  if (e.unreadyByMs !== undefined) {
    if (f.ready.downs === 0) out.push(`${n} never failed readiness during the fault (expected by ${fmtS(e.unreadyByMs)})`);
    else if (f.ready.firstDownMs > e.unreadyByMs) out.push(`${n} failed readiness ${fmtS(f.ready.firstDownMs)} after the fault began (expected by ${fmtS(e.unreadyByMs)})`);
  }
  if (e.readyWithinMs !== undefined && f.ready.upAgainMs > e.readyWithinMs) {
    out.push(`${n} ready again ${fmtS(f.ready.upAgainMs)} after the fault ended (expected within ${fmtS(e.readyWithinMs)})`);
  }
  if (e.outage === true && !((f.outages[n] ?? 0) >= 1)) out.push(`the fault did not count as an outage on ${n} (sluice_redis_outages_total)`);
  return out;
}

const fmtMs = (x: number): string => (x < 1000 ? `${Math.round(x)} ms` : fmtS(x));

function fmtLatency(l: LatencyStats | undefined): string {
  if (l === undefined || l.n === 0) return 'none';
  return `p50 ${fmtMs(l.p50Ms)}, p99 ${fmtMs(l.p99Ms)}, max ${fmtMs(l.maxMs)} (${l.n})`;
}

/** The fault cell of a network fault: readiness, the load balancers, outages, acks. */
export function netFaultCell(f: NetFaultResult): string {
  const r = f.ready;
  const n = f.node;
  const ready = r.downs === 0 ? `${n} ready throughout` : `${n} 503 after ${fmtS(r.firstDownMs)}, 200 again ${fmtS(r.upAgainMs)} after the end` +
    `${r.downs > 1 ? ` (${r.downs} times unready, ${fmtS(r.downMs)} in all)` : ''}`;
  const lb = f.lb.downs === 0 ? `LBs kept ${n} UP` : `LBs: ${n} DOWN after ${fmtS(f.lb.firstDownMs)}, UP ${fmtS(f.lb.upAgainMs)} after the end` +
    `${f.lb.downs > 2 ? ` (${f.lb.downs} DOWNs)` : ''}`;
  const rec = f.recovery;
  const before = f.ackBefore[n];
  // A slow link's late acks are no backlog that resumes: the first and the last of them are given from the fault's start.
  const acks = rec.delayed === 0 ? `no ack later than ${rec.lateMs / 1000} s`
    : `${rec.delayed} acks later than ${rec.lateMs / 1000} s (longest ${fmtS(rec.maxAckMs)}), from ${fmtS(rec.resumeMs)} to ${fmtS(rec.recoverMs)} after the start`;
  return `${f.what} for ${fmtS(f.faultMs)}: ${ready}; ${lb}; outages ${perNode(f.outages, String)}; ` +
    `acks on ${n} during: ${fmtLatency(f.ackDuring[n])}, before: p50 ${before === undefined || before.n === 0 ? '-' : fmtMs(before.p50Ms)}; ${acks}`;
}

// ---- reconnects --------------------------------------------------------------------

/** When one client's connection ended and when it had one again (ms on the run's clock, ascending). */
export interface ClientTimeline {
  readonly client: number;
  readonly downs: readonly number[];
  readonly ups: readonly number[];
  /** The reconnects the SDK scheduled, as pairs: when, and the wait it chose (the server's hint, or its backoff). */
  readonly waits?: readonly number[];
}

export interface ReconnectStats {
  /** Clients that lost their connection in the window. */
  dropped: number;
  /** Of those, the ones connected again after their last loss in the window. */
  back: number;
  /** ms from the window's start until that share of the dropped clients was back; NaN when fewer came back. */
  t50Ms: number;
  t99Ms: number;
  tAllMs: number;
  /** ms from the window's start to the first loss in it (a drain's delay, a kill's moment); NaN when none. */
  firstDropMs: number;
  /** From the first loss until 99% were back: what the upgrade budget's goal bounds. */
  t99FromDropMs: number;
  /** The longest any client was without a connection: from its first loss in the window until it was back after its last (NaN if one never was). */
  longestWaitMs: number;
}

/** A client's first loss in [fromMs, toMs), and its return after its last loss there (undefined if none yet); undefined when it lost none. */
function lossIn(t: ClientTimeline, fromMs: number, toMs: number): { first: number; up: number | undefined } | undefined {
  let first: number | undefined;
  let last: number | undefined;
  for (const d of t.downs) {
    if (d < fromMs || d >= toMs) continue;
    first ??= d;
    last = d;
  }
  if (first === undefined || last === undefined) return undefined;
  return { first, up: t.ups.find((u) => u >= last) };
}

/**
 * For the clients that lost their connection in [fromMs, toMs): the time
 * from `fromMs` until each had a connection again after its last loss in the
 * window (a client dropped twice counts once, at its last return), and how
 * long each was without one.
 */
export function reconnectStats(timelines: readonly ClientTimeline[], fromMs: number, toMs: number): ReconnectStats {
  const backAt: number[] = [];
  let dropped = 0;
  let firstDrop = Number.POSITIVE_INFINITY;
  let longestWait = 0;
  for (const t of timelines) {
    const loss = lossIn(t, fromMs, toMs);
    if (loss === undefined) continue;
    const { first, up } = loss;
    dropped++;
    firstDrop = Math.min(firstDrop, first);
    if (up !== undefined) {
      backAt.push(up - fromMs);
      longestWait = Math.max(longestWait, up - first);
    } else {
      longestWait = Number.NaN;
    }
  }
  backAt.sort((a, b) => a - b);
  const t99Ms = timeToShare(backAt, dropped, 0.99);
  const firstDropMs = dropped === 0 ? Number.NaN : firstDrop - fromMs;
  return {
    dropped, back: backAt.length,
    t50Ms: timeToShare(backAt, dropped, 0.5), t99Ms,
    tAllMs: backAt.length === dropped && dropped > 0 ? backAt[backAt.length - 1]! : dropped === 0 ? 0 : NaN,
    firstDropMs, t99FromDropMs: dropped === 0 ? 0 : t99Ms - firstDropMs,
    longestWaitMs: dropped === 0 ? 0 : longestWait,
  };
}

/**
 * Where the returns of a step went, for the clients that lost their
 * connection in [fromMs, toMs) and were back: the waits the SDK scheduled
 * (a refusal's or a close's hint, or its own backoff) between the client's
 * first loss and its return, and the rest, spent in attempts (connect,
 * upgrade, welcome, and the client process's own loop while it did them).
 */
export interface ReturnSplit {
  readonly clients: number;
  readonly waitedP50Ms: number;
  readonly waitedP99Ms: number;
  readonly attemptsP50Ms: number;
  readonly attemptsP99Ms: number;
  /** Attempts per client that came back (each scheduled reconnect is one). */
  readonly attemptsPerClient: number;
}

export function returnSplit(timelines: readonly ClientTimeline[], fromMs: number, toMs: number): ReturnSplit {
  const waited: number[] = [];
  const attempting: number[] = [];
  let attempts = 0;
  for (const t of timelines) {
    const loss = lossIn(t, fromMs, toMs);
    if (loss?.up === undefined) continue;
    const { first, up } = loss;
    let w = 0;
    const waits = t.waits ?? [];
    for (let i = 0; i + 1 < waits.length; i += 2) {
      if (waits[i]! < first || waits[i]! >= up) continue;
      // A wait that outlasts the return (a close() meanwhile) counts up to it.
      w += Math.min(waits[i + 1]!, up - waits[i]!);
      attempts++;
    }
    waited.push(w);
    attempting.push(up - first - w);
  }
  return {
    clients: waited.length,
    waitedP50Ms: percentile(waited, 0.5), waitedP99Ms: percentile(waited, 0.99),
    attemptsP50Ms: percentile(attempting, 0.5), attemptsP99Ms: percentile(attempting, 0.99),
    attemptsPerClient: waited.length === 0 ? 0 : attempts / waited.length,
  };
}

/** The client processes' event-loop stalls in [fromMs, toMs): the longest one, and the most stalled time of one process. */
export function stallsIn(stalls: readonly (readonly number[])[], fromMs: number, toMs: number): { longestMs: number; mostTotalMs: number } {
  let longestMs = 0;
  let mostTotalMs = 0;
  for (const proc of stalls) {
    let total = 0;
    for (let i = 0; i + 1 < proc.length; i += 2) {
      if (proc[i]! < fromMs || proc[i]! >= toMs) continue;
      longestMs = Math.max(longestMs, proc[i + 1]!);
      total += proc[i + 1]!;
    }
    mostTotalMs = Math.max(mostTotalMs, total);
  }
  return { longestMs, mostTotalMs };
}

// ---- verdicts and the table ----------------------------------------------------------

export interface StepResult {
  /** What was done: `drain A`, `SIGKILL A`, ... */
  readonly name: string;
  /** The node(s) whose arrivals are counted: the ones that stayed up. */
  readonly survivors: readonly string[];
  readonly peakArrivalsPerS: number;
  /** The same for each survivor on its own (what WS_UPGRADE_RATE bounds). */
  readonly peakArrivalsByNode?: Readonly<Record<string, number>>;
  /** Upgrades each survivor refused for WS_UPGRADE_RATE during the step (503 over_budget). */
  readonly overBudgetByNode?: Readonly<Record<string, number>>;
  /** The same seen by the clients: most connections (welcomes) in one second, on any node. */
  readonly clientPeakPerS: number;
  /** Closes the clients saw: most in one second, and the most in five seconds divided by five. */
  readonly closesPeakPerS: number;
  readonly closesPeak5sPerS: number;
  readonly reconnect: ReconnectStats;
  /** Where the returns went: the SDK's scheduled waits against the attempts themselves. */
  readonly returns?: ReturnSplit;
  /** The client processes' event-loop stalls from the first drop until 99% were back. */
  readonly clientStalls?: { readonly longestMs: number; readonly mostTotalMs: number };
  /** CPU seconds by role from the first drop until 99% were back (chaos/cpu.ts), and that wall time. */
  readonly returnCpu?: { readonly wallS: number; readonly by: Readonly<Record<string, number>> };
}

export interface ScenarioResult {
  readonly scenario: string;
  readonly planned: boolean;
  /**
   * Acknowledged events may be lost (a failover with WS_REDIS_ACK_REPLICAS=0):
   * the loss is counted and reported, and is no violation. Everything else
   * (duplicates, events in history not delivered, ...) still is.
   */
  readonly lossAllowed?: boolean;
  /** The Redis it ran on, and WS_REDIS_ACK_REPLICAS when set. */
  readonly redis?: string;
  readonly ackReplicas?: number;
  readonly clients: number;
  readonly connected: number;
  readonly wallS: number;
  readonly drainRate: number;
  /** WS_UPGRADE_RATE of each node; 0 when off. */
  readonly upgradeRate?: number;
  readonly acked: number;
  /** Publishes still unacknowledged at the end, and rejected ones by reason. */
  readonly unacked: number;
  readonly rejected: Readonly<Record<string, number>>;
  readonly history: HistoryCheck;
  readonly delivery: DeliveryCheck;
  readonly recoveredFalse: number;
  /** Keyed-feed subscribers that had not got the last keyed value at the end. */
  readonly keyedStale: number;
  readonly keyedSubscribers: number;
  readonly steps: readonly StepResult[];
  readonly peakRssMiB: Readonly<Record<string, number>>;
  readonly errorLines: Readonly<Record<string, number>>;
  readonly errorExamples: readonly string[];
  /** Shard threads restarted after a crash, per node (sluice_shard_restarts_total). */
  readonly shardRestarts?: Readonly<Record<string, number>>;
  /** Durable acks whose WAIT fell short, per node (sluice_redis_replica_ack_failures_total). */
  readonly replicaAckFailures?: Readonly<Record<string, number>>;
  /** `unavailable` answers the clients got (publishes and joins; the SDK resends). */
  readonly unavailableAnswers?: number;
  readonly failover?: FailoverResult;
  /** A network fault on one node's link (partition, slowlink). */
  readonly netFault?: NetFaultResult;
  /** Error lines break this scenario too (as they do a planned one): the network faults. */
  readonly errorLinesBreak?: boolean;
  /** sluice_redis_outages_total per node over the run (polled). */
  readonly redisOutages?: Readonly<Record<string, number>>;
  /** Clients not connected at the end. */
  readonly notConnected: number;
  readonly findings: readonly string[];
  /** Node log lines above info (the first of each node), for the JSON. */
  readonly notable?: readonly string[];
  /** Set when the run itself broke (a process did not start, a bound ran out). */
  readonly error?: string;
}

export interface Bounds {
  /** The longest a step may take for 99% of its dropped clients to be back, ms. */
  readonly max99Ms: number;
}

/** Every invariant the scenario broke, as sentences; empty when it held. */
export function violations(r: ScenarioResult, b: Bounds): string[] {
  const out: string[] = [];
  if (r.error !== undefined) out.push(`run failed: ${r.error}`);
  if (r.connected < r.clients) out.push(`only ${r.connected}/${r.clients} clients connected at the start`);
  if (r.acked === 0) out.push('no publish was acknowledged');
  if (r.history.lost > 0 && r.lossAllowed !== true) out.push(`${r.history.lost} acknowledged publishes missing from history`);
  if (r.delivery.missingLost > 0 && r.lossAllowed !== true) out.push(`${r.delivery.missingLost} deliveries of acknowledged events lost from history missing`);
  if (r.history.storedTwice > 0) out.push(`${r.history.storedTwice} publishes stored twice`);
  if (r.history.sharedIds > 0) out.push(`${r.history.sharedIds} publishes acked with another publish's id`);
  if (r.delivery.missing > 0) out.push(`${r.delivery.missing} acknowledged events not delivered to a subscriber`);
  const dups = r.delivery.duplicateIds + r.delivery.duplicateKeys + r.delivery.wireDuplicates;
  if (dups > 0) out.push(`${dups} duplicate deliveries (${r.delivery.duplicateIds} by id, ${r.delivery.duplicateKeys} by publish, ${r.delivery.wireDuplicates} on the wire)`);
  if (r.unacked > 0) out.push(`${r.unacked} publishes never acknowledged`);
  if (r.recoveredFalse > 0) out.push(`${r.recoveredFalse} resumes answered recovered: false`);
  if (r.keyedStale > 0) out.push(`${r.keyedStale}/${r.keyedSubscribers} keyed subscribers without the last keyed value`);
  if (r.notConnected > 0) out.push(`${r.notConnected} clients not connected at the end`);
  for (const s of r.steps) {
    if (s.reconnect.dropped > 0 && !(s.reconnect.t99Ms <= b.max99Ms)) {
      out.push(`${s.name}: 99% of ${s.reconnect.dropped} dropped clients not back within ${b.max99Ms / 1000} s (${fmtS(s.reconnect.t99Ms)})`);
    }
    out.push(...budgetViolations(r, s));
  }
  const errors = Object.values(r.errorLines).reduce((x, y) => x + y, 0);
  if (r.planned && errors > 0) out.push(`${errors} error lines logged in a planned scenario`);
  else if (r.errorLinesBreak === true && errors > 0) out.push(`${errors} error lines logged (${perNode(r.errorLines, String)})`);
  if (r.netFault !== undefined) out.push(...netFaultViolations(r.netFault));
  if (r.failover !== undefined && Number.isNaN(r.failover.readyMs)) out.push('a node was not ready again by the end of the failover step');
  if (r.failover !== undefined && Number.isNaN(r.failover.rejoinedMs)) out.push('the old master did not rejoin as a replica');
  const restarts = Object.values(r.shardRestarts ?? {}).reduce((x, y) => x + y, 0);
  if (restarts > 0) out.push(`${restarts} shard threads restarted after a crash (${perNode(r.shardRestarts ?? {}, String)})`);
  return out;
}

/** Slack on the upgrade budget's bound: rate + burst (a tenth) in any second, and the polls' 100 ms granularity. */
export const BUDGET_PEAK_FACTOR = 1.1;
/** Issue 22's goal: 99% back within (clients moved / the budget) + this, from the first drop. */
export const BUDGET_SLACK_MS = 6000;

/**
 * The pace 99% of a step's dropped clients can be back at: the survivors'
 * budgets together, or the drain's rate when it is slower (a rolling
 * restart moves clients no faster than WS_DRAIN_RATE closes them).
 */
export function budgetBoundMs(r: Pick<ScenarioResult, 'upgradeRate' | 'drainRate'>, s: Pick<StepResult, 'name' | 'survivors' | 'reconnect'>): number {
  const budget = (r.upgradeRate ?? 0) * s.survivors.length;
  const pace = s.name.startsWith('drain') ? Math.min(budget, r.drainRate) : budget;
  return (s.reconnect.dropped / pace) * 1000 + BUDGET_SLACK_MS;
}

/** With WS_UPGRADE_RATE on: no survivor above 1.1x its budget in any second, 99% back within the goal, everyone back. */
export function budgetViolations(r: ScenarioResult, s: StepResult): string[] {
  const rate = r.upgradeRate ?? 0;
  if (rate === 0 || s.reconnect.dropped === 0) return [];
  const out: string[] = [];
  for (const [node, peak] of Object.entries(s.peakArrivalsByNode ?? {})) {
    if (peak > BUDGET_PEAK_FACTOR * rate) out.push(`${s.name}: ${node} accepted ${Math.round(peak)} upgrades in one second, above ${BUDGET_PEAK_FACTOR}x WS_UPGRADE_RATE=${rate}`);
  }
  const bound = budgetBoundMs(r, s);
  if (!(s.reconnect.t99FromDropMs <= bound)) {
    out.push(`${s.name}: 99% of ${s.reconnect.dropped} moved clients back ${fmtS(s.reconnect.t99FromDropMs)} after the first drop, above the budget's ${fmtS(bound)}`);
  }
  if (s.reconnect.back < s.reconnect.dropped) out.push(`${s.name}: ${s.reconnect.dropped - s.reconnect.back} dropped clients never came back`);
  return out;
}

/** The acked-lost cell: total, then history and deliveries with their denominators; loss a scenario allows is marked so. */
export function lostCell(r: ScenarioResult): string {
  const missing = r.delivery.missing + r.delivery.missingLost;
  const lost = r.history.lost + missing;
  const text = `${lost} (history ${r.history.lost} of ${r.acked}, deliveries ${missing} of ${r.delivery.expected})`;
  return r.lossAllowed === true && lost > 0 ? `${text}, counted, allowed with WS_REDIS_ACK_REPLICAS=${r.ackReplicas ?? 0}` : text;
}

/**
 * The fault cell: for a failover, from the kill to the new master, to both
 * nodes ready, to the first and the last delayed ack (how many, the longest
 * wait); for a network fault, netFaultCell.
 */
export function failoverCell(r: ScenarioResult): string {
  if (r.netFault !== undefined) return netFaultCell(r.netFault);
  const f = r.failover;
  if (f === undefined) return '-';
  const rec = f.recovery;
  const ready = f.readyMs === 0 ? 'nodes ready throughout' : `nodes ready ${fmtS(f.readyMs)}`;
  return `new master ${fmtS(f.failoverMs)}; ${ready}; acks resume ${fmtS(rec.resumeMs)}, backlog acked ${fmtS(rec.recoverMs)} ` +
    `(${rec.delayed} delayed > ${rec.lateMs / 1000} s, longest ${fmtS(rec.maxAckMs)})`;
}

export function fmtS(ms: number): string {
  return Number.isFinite(ms) ? `${(ms / 1000).toFixed(1)} s` : 'not reached';
}

function perNode(rec: Readonly<Record<string, number>>, fmt: (v: number) => string): string {
  const ks = Object.keys(rec).sort();
  return ks.length === 0 ? '-' : ks.map((k) => `${k} ${fmt(rec[k]!)}`).join(', ');
}

/** The results table, one row per scenario, in markdown. */
export function renderTable(results: readonly ScenarioResult[], b: Bounds): string {
  const head = ['scenario', 'clients', 'acked publishes', 'acked lost', 'duplicates', 'peak arrivals/s per survivor (WS_UPGRADE_RATE, WS_DRAIN_RATE)',
    '99% reconnected after (from the first drop; the budget\'s bound); longest wait', 'peak RSS per node', 'error lines per node',
    'Redis fault: failover (from the kill to the new master, ready nodes, acks) or a node\'s link (readiness, load balancers, outages, acks)', 'verdict'];
  const rows = results.map((r) => {
    const dups = r.delivery.duplicateIds + r.delivery.duplicateKeys + r.delivery.wireDuplicates + r.history.storedTwice;
    const rate = r.steps.length === 0 ? '-' : r.steps.map((s) => `${s.name}: ${s.peakArrivalsByNode === undefined
      ? `${Math.round(s.peakArrivalsPerS)} at ${s.survivors.join('+')}`
      : perNode(s.peakArrivalsByNode, (v) => String(Math.round(v)))}` +
      `${s.overBudgetByNode === undefined ? '' : ` (refused for rate: ${perNode(s.overBudgetByNode, String)})`}`).join('; ');
    const budgetOn = (r.upgradeRate ?? 0) > 0;
    const back = r.steps.length === 0 ? '-' : r.steps.map((s) => (s.reconnect.dropped === 0
      ? `${s.name}: none dropped`
      : `${s.name}: ${fmtS(s.reconnect.t99Ms)} (${s.reconnect.dropped} dropped` +
        `${Number.isFinite(s.reconnect.firstDropMs) ? `; ${fmtS(s.reconnect.t99FromDropMs)} from the first drop` : ''}` +
        `${budgetOn ? `, bound ${fmtS(budgetBoundMs(r, s))}` : ''}; longest wait ${fmtS(s.reconnect.longestWaitMs)})`)).join('; ');
    const v = violations(r, b);
    return [
      r.scenario, `${r.connected}/${r.clients}`, String(r.acked), lostCell(r),
      String(dups), `${rate} (${budgetOn ? r.upgradeRate : 'off'}, ${r.drainRate})`, back,
      perNode(r.peakRssMiB, (m) => `${Math.round(m)} MiB`), perNode(r.errorLines, String), failoverCell(r),
      v.length === 0 ? 'pass' : `FAIL: ${v.join('; ')}`,
    ];
  });
  const line = (cells: readonly string[]): string => `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
  return [line(head), line(head.map(() => '---')), ...rows.map(line)].join('\n');
}
