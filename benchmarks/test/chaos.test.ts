// The chaos harness's own pure pieces: the invariant checker (lost and
// duplicate accounting, loss counted apart where a scenario allows it), the
// arrival-rate bucketing and peaks, reconnect times, the recovery after a
// Redis failover, readiness and load-balancer states around a network
// fault and ack latency by node, the verdicts, the HAProxy configuration made
// from the deploy file (a node in a network namespace too), the choice of
// topics and Cluster masters, the network-fault scenarios' settings.
// The full cluster run is the CI step `pnpm chaos:ci`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ackedByTopic, ackLatency, budgetBoundMs, checkHistory, checkSubscription, emptyDeliveryCheck, failoverCell, lostCell, mergeDeliveryChecks, mergeStateStats, netFaultCell,
  netFaultViolations, reconnectStats, recoveryStats, renderTable, returnSplit, stallsIn, stateStats, violations,
  type Acked, type NetFaultResult, type ReconnectStats, type ScenarioResult,
} from '../chaos/analysis.ts';
import { accumulate, bucketGrowth, peakInWindow, peakRate, sumSeries, timeToShare } from '../src/lib/series.ts';
import { requireSystemDep } from '../../tools/system-deps.mjs';
import { DEPLOY_CFG, haproxyConfig, parseShowStat } from '../chaos/haproxy.ts';
import { publishedTopics, topicsOf, wireEvent, type Roles } from '../chaos/fleet.ts';
import { ALL_SCENARIOS, CI_SCENARIOS, clusterMasters, defaultConfig, SETUP } from '../chaos/scenarios.ts';

const acked: Acked[] = [
  { topic: 't1', id: '1-0', key: '7.0' },
  { topic: 't1', id: '2-0', key: '7.1' },
  { topic: 't2', id: '3-0', key: '8.0' },
];

test('checkSubscription: every acked id of the topic must be there; repeats by id, by publish key and on the wire each count', () => {
  const byTopic = ackedByTopic(acked);
  const acc = emptyDeliveryCheck();
  // Complete, plus ids that were never acked (warm-up, fence): nothing to report.
  checkSubscription(acc, byTopic, { client: 1, topic: 't1', ids: ['0-1', '1-0', '2-0', '9-0'], keys: ['7.0', '7.1'], wire: ['0-1', '1-0', '2-0', '9-0'] });
  assert.deepEqual({ ...acc, examples: [] }, { subscriptions: 1, expected: 2, missing: 0, missingLost: 0, duplicateIds: 0, duplicateKeys: 0, wireDuplicates: 0, examples: [] });
  // Missing 2-0; got 1-0 twice; the SDK hid a repeat on the wire.
  checkSubscription(acc, byTopic, { client: 2, topic: 't1', ids: ['1-0', '1-0'], keys: ['7.0', '7.0'], wire: ['1-0', '1-0', '1-0'] });
  assert.equal(acc.missing, 1);
  assert.equal(acc.duplicateIds, 1);
  // The same publish key under two ids is a publish stored twice (the SDK cannot see it: the ids differ).
  assert.equal(acc.duplicateKeys, 1);
  assert.equal(acc.wireDuplicates, 2);
  // A topic nobody published on expects nothing.
  checkSubscription(acc, byTopic, { client: 3, topic: 't3', ids: [], keys: [], wire: [] });
  assert.equal(acc.expected, 4);
  assert.equal(acc.subscriptions, 3);
  assert.ok(acc.examples.some((e) => e.includes('client 2 never got t1 2-0')), acc.examples.join('\n'));
  const merged = mergeDeliveryChecks([acc, acc]);
  assert.equal(merged.missing, 2);
  assert.equal(merged.wireDuplicates, 4);
  assert.ok(merged.examples.length <= 10);
});

test('checkSubscription: an acked event lost from history and not delivered counts as missingLost, not missing', () => {
  const byTopic = ackedByTopic(acked);
  const acc = emptyDeliveryCheck();
  const lost = new Map([['t1', new Set(['2-0'])]]);
  checkSubscription(acc, byTopic, { client: 1, topic: 't1', ids: [], keys: [], wire: [] }, lost);
  assert.equal(acc.missing, 1);
  assert.equal(acc.missingLost, 1);
  assert.equal(mergeDeliveryChecks([acc, acc]).missingLost, 2);
  assert.ok(acc.examples.some((e) => e.includes('2-0 (lost from history)')), acc.examples.join('\n'));
});

test('checkHistory: acked ids missing from their topic, publishes stored twice, two publishes acked with one id', () => {
  const ok = checkHistory(acked, new Map([
    ['t1', [{ id: '0-1', key: undefined }, { id: '1-0', key: '7.0' }, { id: '2-0', key: '7.1' }]],
    ['t2', [{ id: '3-0', key: '8.0' }]],
  ]));
  assert.deepEqual({ ...ok, examples: [] }, { acked: 3, lost: 0, storedTwice: 0, sharedIds: 0, examples: [] });
  // 3-0 sits in the wrong topic's history: it is lost for t2. 7.0 stored twice.
  const bad = checkHistory([...acked, { topic: 't1', id: '2-0', key: '7.9' }], new Map([
    ['t1', [{ id: '1-0', key: '7.0' }, { id: '1-5', key: '7.0' }, { id: '2-0', key: '7.1' }, { id: '3-0', key: '8.0' }]],
  ]));
  assert.equal(bad.lost, 1);
  assert.deepEqual(bad.lostIds, { t2: ['3-0'] });
  assert.equal(ok.lostIds, undefined);
  assert.equal(bad.storedTwice, 1);
  assert.equal(bad.sharedIds, 1);
});

test('recoveryStats: from the kill to the last ack of a publish that waited more than lateMs; acks before the kill left out', () => {
  const a = (sentAt: number, ackAt: number): Acked => ({ topic: 't', id: `${ackAt}-0`, key: `1.${sentAt}`, sentAt, ackAt });
  const r = recoveryStats([
    a(0, 10), // before the kill
    a(990, 1005), // in flight at the kill, prompt
    a(995, 4000), // in flight at the kill, delayed: 3005 ms
    a(1500, 7000), // delayed: 5500 ms, the last delayed ack
    a(6000, 6100), // prompt
    a(8000, 8050), // prompt
    { topic: 't', id: '9-0', key: 'x' }, // no times (an older record): left out
  ], 1000);
  assert.deepEqual(r, { lateMs: 1000, delayed: 2, resumeMs: 3000, recoverMs: 6000, maxAckMs: 5500 });
  assert.deepEqual(recoveryStats([a(2000, 2100)], 1000), { lateMs: 1000, delayed: 0, resumeMs: 0, recoverMs: 0, maxAckMs: 100 });
  assert.deepEqual(recoveryStats([], 1000, 500), { lateMs: 500, delayed: 0, resumeMs: 0, recoverMs: 0, maxAckMs: 0 });
});

test('accumulate: a restart (new gen, or a lower value) counts from 0 again; the first poll is the baseline', () => {
  const s = accumulate([
    { ms: 0, value: 100, gen: 1 }, { ms: 100, value: 150, gen: 1 }, { ms: 200, value: 150, gen: 1 },
    { ms: 300, value: 20, gen: 2 }, { ms: 400, value: 30, gen: 2 },
    // Same gen but lower: a counter that went back is a reset too.
    { ms: 500, value: 5, gen: 2 },
    // A new start that already counted more than the old one had: still all growth.
    { ms: 600, value: 200, gen: 3 },
  ]);
  assert.deepEqual(s.map((p) => p.value), [0, 50, 50, 70, 80, 85, 285]);
});

test('bucketGrowth: growth goes to the bucket of the poll that saw it; polls outside the range are left out', () => {
  const polls = [{ ms: 0, value: 0 }, { ms: 90, value: 5 }, { ms: 180, value: 5 }, { ms: 260, value: 12 }, { ms: 450, value: 20 }];
  assert.deepEqual(bucketGrowth(polls, 0, 300, 100), [5, 0, 7]);
  assert.deepEqual(bucketGrowth(polls, 100, 500, 200), [7, 8]);
  assert.deepEqual(bucketGrowth(polls, 0, 0, 100), []);
});

test('peakRate: the most growth over one second between polls at least a second apart, per second', () => {
  // Polls every 100 ms; 500 arrivals between 1.0 s and 1.5 s, nothing else.
  const polls = Array.from({ length: 40 }, (_, i) => ({ ms: i * 100, value: i <= 10 ? 0 : i >= 15 ? 500 : (i - 10) * 100 }));
  assert.equal(peakRate(polls, 1000), 500);
  // A window that excludes the burst sees nothing.
  assert.equal(peakRate(polls, 1000, 2000, 4000), 0);
  // Over 100 ms windows the burst is 1000/s.
  assert.equal(peakRate(polls, 100), 1000);
  // Polls further apart than the window: the rate is over their real gap, not scaled up.
  assert.equal(peakRate([{ ms: 0, value: 0 }, { ms: 2000, value: 1000 }], 1000), 500);
  assert.equal(peakRate([{ ms: 0, value: 0 }], 1000), 0);
});

test('returnSplit: the waits the SDK scheduled between a client\'s first drop and its return, and the rest spent in attempts', () => {
  const tl = [
    // Dropped at 1000; waited 200 (backoff), an attempt refused at 1900 with a 500 ms hint, back at 2600.
    { client: 0, downs: [1000], ups: [0, 2600], waits: [1000, 200, 1900, 500] },
    // Dropped twice; a wait scheduled before the window and one that outlasts the return count only inside [first drop, return).
    { client: 1, downs: [1200, 2000], ups: [0, 1300, 2400], waits: [900, 300, 1200, 50, 2000, 1000] },
    { client: 2, downs: [1100], ups: [0], waits: [1100, 100] }, // never back: left out
    { client: 3, downs: [], ups: [0] }, // not dropped
  ];
  const r = returnSplit(tl, 1000, 3000);
  assert.equal(r.clients, 2);
  // Client 0: 700 waited, 900 in attempts. Client 1: 50 + min(1000, 400) = 450 waited, 1200 - 450 = 750 in attempts.
  assert.equal(r.waitedP50Ms, 450);
  assert.equal(r.waitedP99Ms, 700);
  assert.equal(r.attemptsP50Ms, 750);
  assert.equal(r.attemptsP99Ms, 900);
  assert.equal(r.attemptsPerClient, 2);
  const none = returnSplit(tl, 5000, 6000);
  assert.equal(none.clients, 0);
  assert.ok(Number.isNaN(none.waitedP50Ms));
  assert.equal(none.attemptsPerClient, 0);
});

test('stallsIn: the longest stall of any client process in the window, and the most stalled time of one process', () => {
  const stalls = [[900, 400, 1500, 300, 1800, 250], [1200, 700, 4000, 2000]];
  assert.deepEqual(stallsIn(stalls, 1000, 3000), { longestMs: 700, mostTotalMs: 700 });
  assert.deepEqual(stallsIn(stalls, 0, 5000), { longestMs: 2000, mostTotalMs: 2700 });
  assert.deepEqual(stallsIn([], 0, 5000), { longestMs: 0, mostTotalMs: 0 });
});

test('peakInWindow: most times within any one window, sliding', () => {
  assert.equal(peakInWindow([0, 100, 900, 999, 1000, 1500, 1999], 1000), 4); // 0, 100, 900, 999 (1000 is a window after 0)
  assert.equal(peakInWindow([0, 1000, 2000], 1000), 1);
  assert.equal(peakInWindow([], 1000), 0);
});

test('sumSeries: the sum of the latest values of each series at every poll', () => {
  const a = [{ ms: 0, value: 0 }, { ms: 100, value: 10 }, { ms: 200, value: 30 }];
  const b = [{ ms: 50, value: 5 }, { ms: 150, value: 7 }];
  assert.deepEqual(sumSeries([a, b]).map((p) => [p.ms, p.value]), [[0, 0], [50, 5], [100, 15], [150, 17], [200, 37]]);
});

test('reconnectStats: from the window start to each dropped client\'s return after its last drop; NaN when too few came back', () => {
  const tl = [
    { client: 0, downs: [1000], ups: [0, 1500] },
    { client: 1, downs: [1200, 2000], ups: [0, 1300, 2600] }, // dropped twice: back at 2600
    { client: 2, downs: [], ups: [0] }, // never dropped
    { client: 3, downs: [500], ups: [0, 700] }, // dropped before the window
    { client: 4, downs: [1100], ups: [0] }, // never back
  ];
  const r = reconnectStats(tl, 1000, 3000);
  assert.equal(r.dropped, 3);
  assert.equal(r.back, 2);
  assert.equal(r.t50Ms, 1600);
  assert.ok(Number.isNaN(r.t99Ms));
  assert.ok(Number.isNaN(r.tAllMs));
  assert.equal(r.firstDropMs, 0, 'the first drop at the window start');
  assert.ok(Number.isNaN(r.longestWaitMs), 'one never came back');
  const all = reconnectStats(tl.slice(0, 2), 1000, 3000);
  assert.equal(all.t99Ms, 1600);
  assert.equal(all.tAllMs, 1600);
  assert.equal(all.t99FromDropMs, 1600);
  // Client 1: without a connection from its first drop (1200) until back after its last (2600).
  assert.equal(all.longestWaitMs, 1400);
  const late = reconnectStats(tl.slice(0, 2), 800, 3000);
  assert.equal(late.firstDropMs, 200);
  assert.equal(late.t99FromDropMs, 1600);
  assert.deepEqual(reconnectStats(tl, 5000, 6000), {
    dropped: 0, back: 0, t50Ms: 0, t99Ms: 0, tAllMs: 0, firstDropMs: NaN, t99FromDropMs: 0, longestWaitMs: 0,
  });
  assert.equal(timeToShare([1, 2, 3], 3, 0.99), 3);
});

function result(over: Partial<ScenarioResult> = {}): ScenarioResult {
  return {
    scenario: 'rolling', planned: true, clients: 10, connected: 10, wallS: 60, drainRate: 500, acked: 5, unacked: 0, rejected: {},
    history: { acked: 5, lost: 0, storedTwice: 0, sharedIds: 0, examples: [] },
    delivery: { subscriptions: 20, expected: 50, missing: 0, missingLost: 0, duplicateIds: 0, duplicateKeys: 0, wireDuplicates: 0, examples: [] },
    recoveredFalse: 0, keyedStale: 0, keyedSubscribers: 1, notConnected: 0,
    steps: [{ name: 'drain A', survivors: ['B'], peakArrivalsPerS: 480, clientPeakPerS: 470, closesPeakPerS: 500, closesPeak5sPerS: 490, reconnect: { dropped: 5, back: 5, t50Ms: 4000, t99Ms: 9000, tAllMs: 9000, firstDropMs: 5000, t99FromDropMs: 4000, longestWaitMs: 3000 } }],
    peakRssMiB: { A: 200, B: 210 }, errorLines: { A: 0, B: 0 }, errorExamples: [], findings: [],
    ...over,
  };
}

test('violations: lost, duplicates, slow reconnects, and error lines only in planned scenarios', () => {
  const b = { max99Ms: 10_000 };
  assert.deepEqual(violations(result(), b), []);
  assert.match(violations(result({ history: { acked: 5, lost: 1, storedTwice: 0, sharedIds: 0, examples: [] } }), b).join(), /1 acknowledged publishes missing/);
  assert.match(violations(result({ delivery: { ...result().delivery, wireDuplicates: 2 } }), b).join(), /2 duplicate deliveries/);
  assert.match(violations(result({ steps: [{ ...result().steps[0]!, reconnect: { dropped: 5, back: 4, t50Ms: 1, t99Ms: NaN, tAllMs: NaN, firstDropMs: 0, t99FromDropMs: NaN, longestWaitMs: NaN } }] }), b).join(), /not back within 10 s/);
  assert.match(violations(result({ errorLines: { A: 1, B: 0 } }), b).join(), /1 error lines/);
  assert.deepEqual(violations(result({ planned: false, scenario: 'kill', errorLines: { A: 3 } }), b), []);
  assert.match(violations(result({ acked: 0 }), b).join(), /no publish/);
  const table = renderTable([result(), result({ scenario: 'kill', planned: false, delivery: { ...result().delivery, missing: 3 } })], b);
  const lines = table.split('\n');
  assert.equal(lines.length, 4);
  assert.match(lines[2]!, /\| rolling \| 10\/10 \| 5 \| 0 .*drain A: 480 at B \(off, 500\).*drain A: 9\.0 s \(5 dropped; 4\.0 s from the first drop; longest wait 3\.0 s\).*A 200 MiB, B 210 MiB.*\| - \| pass \|$/);
  assert.match(lines[3]!, /\| kill .*\| 3 \(history 0 of 5, deliveries 3 of 50\).*FAIL: 3 acknowledged events not delivered/);
});

test('violations: a shard restart always breaks; loss is counted, not failed, where the scenario allows it, and nothing else is excused', () => {
  const b = { max99Ms: 10_000 };
  assert.match(violations(result({ planned: false, shardRestarts: { A: 1, B: 0 } }), b).join(), /1 shard threads restarted after a crash \(A 1, B 0\)/);
  assert.deepEqual(violations(result({ shardRestarts: { A: 0, B: 0 } }), b), []);
  const lossy = {
    history: { acked: 5, lost: 2, storedTwice: 0, sharedIds: 0, examples: [] },
    delivery: { ...result().delivery, missingLost: 7 },
  };
  const strict = violations(result({ scenario: 'sentinel', planned: false, ...lossy }), b).join();
  assert.match(strict, /2 acknowledged publishes missing from history/);
  assert.match(strict, /7 deliveries of acknowledged events lost from history missing/);
  const allowed = result({ scenario: 'sentinel-n0', planned: false, lossAllowed: true, ackReplicas: 0, ...lossy });
  assert.deepEqual(violations(allowed, b), []);
  assert.equal(lostCell(allowed), '9 (history 2 of 5, deliveries 7 of 50), counted, allowed with WS_REDIS_ACK_REPLICAS=0');
  assert.equal(lostCell(result()), '0 (history 0 of 5, deliveries 0 of 50)');
  // Events in history that a subscriber never got, and duplicates, still break it.
  assert.match(violations({ ...allowed, delivery: { ...allowed.delivery, missing: 1 } }, b).join(), /1 acknowledged events not delivered/);
  assert.match(violations({ ...allowed, delivery: { ...allowed.delivery, duplicateKeys: 1 } }, b).join(), /1 duplicate deliveries/);
  assert.match(renderTable([allowed], b), /\| sentinel-n0 \| .*\| 9 \(history 2 of 5, deliveries 7 of 50\), counted, allowed with WS_REDIS_ACK_REPLICAS=0 \|.*\| pass \|$/m);
});

test('failoverCell and violations: from the kill to the new master, ready nodes, the first and last delayed ack; a node never ready again breaks', () => {
  const b = { max99Ms: 10_000 };
  assert.equal(failoverCell(result()), '-');
  const f = {
    killed: 'master :1', promoted: ':2', failoverMs: 2345, readyMs: 3500, rejoinedMs: 15_000,
    recovery: { lateMs: 1000, delayed: 12, resumeMs: 3600, recoverMs: 6100, maxAckMs: 4900 },
  };
  assert.equal(failoverCell(result({ failover: f })), 'new master 2.3 s; nodes ready 3.5 s; acks resume 3.6 s, backlog acked 6.1 s (12 delayed > 1 s, longest 4.9 s)');
  assert.match(failoverCell(result({ failover: { ...f, readyMs: 0 } })), /; nodes ready throughout;/);
  assert.deepEqual(violations(result({ failover: f }), b), []);
  assert.match(failoverCell(result({ failover: { ...f, readyMs: NaN } })), /nodes ready not reached/);
  assert.match(violations(result({ failover: { ...f, readyMs: NaN } }), b).join(), /a node was not ready again/);
  assert.match(violations(result({ failover: { ...f, rejoinedMs: NaN } }), b).join(), /old master did not rejoin/);
});

test('scenario setups: the failover scenarios\' Redis and acks; loss allowed only with WS_REDIS_ACK_REPLICAS=0; --ci runs rolling and sentinel', () => {
  for (const s of ALL_SCENARIOS) {
    const setup = SETUP[s];
    assert.ok(setup !== undefined, s);
    assert.equal(setup.lossAllowed === true, setup.ackReplicas === 0, s);
  }
  assert.deepEqual(['rolling', 'kill', 'redis', 'storm'].map((s) => SETUP[s as 'rolling']), Array(4).fill({ redis: 'standalone' }));
  assert.deepEqual(SETUP.sentinel, { redis: 'sentinel', ackReplicas: 1 });
  assert.deepEqual(SETUP.cluster, { redis: 'cluster', ackReplicas: 1 });
  assert.deepEqual(CI_SCENARIOS, ['rolling', 'sentinel']);
});

test('stateStats: downs from the fault on, the first down from its start, up again from its end, time down; merged over load balancers', () => {
  const at = (ms: number, up: boolean): { ms: number; up: boolean } => ({ ms, up });
  // Up, fault at 1000 until 5000; down at 4000..5800 (samples every 200 ms), up at 6000.
  const samples = [at(0, true), at(800, true), ...Array.from({ length: 10 }, (_, i) => at(4000 + i * 200, false)), at(6000, true), at(6200, true)];
  assert.deepEqual(stateStats(samples, 1000, 5000), { downs: 1, firstDownMs: 3000, upAgainMs: 1000, downMs: 2000 });
  // Never down: 0 downs, NaN first, up again 0.
  assert.deepEqual(stateStats([at(0, true), at(2000, true)], 1000, 1500), { downs: 0, firstDownMs: NaN, upAgainMs: 0, downMs: 0 });
  // Still down at the last sample: not up again (NaN).
  assert.ok(Number.isNaN(stateStats([at(0, true), at(1200, false)], 1000, 1100).upAgainMs));
  // Down before the fault only: not counted. Two flaps during it, up again before its end: 0.
  const flaps = stateStats([at(0, false), at(500, true), at(1000, true), at(1200, false), at(1400, true), at(2000, false), at(2400, true), at(9000, true)], 1000, 5000);
  assert.deepEqual(flaps, { downs: 2, firstDownMs: 200, upAgainMs: 0, downMs: 600 });
  // A sample down at the start whose predecessor (before the fault) was down too is no new down.
  assert.equal(stateStats([at(0, false), at(1000, false), at(1200, true)], 1000, 2000).downs, 0);
  // Load balancers: the first DOWN of either, the last UP of both, downs summed; one still DOWN: NaN.
  const m = mergeStateStats([
    { downs: 1, firstDownMs: 4200, upAgainMs: 1800, downMs: 2400 },
    { downs: 1, firstDownMs: 4000, upAgainMs: 2000, downMs: 2600 },
  ]);
  assert.deepEqual(m, { downs: 2, firstDownMs: 4000, upAgainMs: 2000, downMs: 2600 });
  assert.ok(Number.isNaN(mergeStateStats([m, { downs: 1, firstDownMs: 1, upAgainMs: NaN, downMs: 5 }]).upAgainMs));
  assert.deepEqual(mergeStateStats([{ downs: 0, firstDownMs: NaN, upAgainMs: 0, downMs: 0 }]), { downs: 0, firstDownMs: NaN, upAgainMs: 0, downMs: 0 });
});

test('ackLatency: publishes sent in the window, by the node that acked them', () => {
  const a = (sentAt: number, wait: number, node?: string): Acked => ({ topic: 't', id: `${sentAt}-0`, key: `1.${sentAt}`, sentAt, ackAt: sentAt + wait, node });
  const acked = [a(0, 5, 'n1'), a(100, 400, 'n1'), a(200, 600, 'n1'), a(300, 2500, 'n1'), a(150, 3, 'n2'), a(250, 7), a(999, 1, 'n1'), { topic: 't', id: 'x', key: 'y' }];
  assert.deepEqual(ackLatency(acked, 100, 999, new Set(['n1'])), { n: 3, p50Ms: 600, p99Ms: 2500, maxMs: 2500 });
  // Every node (and those acked without one) when none is named.
  assert.equal(ackLatency(acked, 100, 999).n, 5);
  // A node id list: a node restarted has one id per start.
  assert.equal(ackLatency(acked, -Infinity, Infinity, new Set(['n1', 'n2'])).n, 6);
  const none = ackLatency(acked, 5000, 6000);
  assert.equal(none.n, 0);
  assert.ok(Number.isNaN(none.p50Ms) && Number.isNaN(none.maxMs));
});

function netFault(over: Partial<NetFaultResult> = {}): NetFaultResult {
  const lat = { n: 20, p50Ms: 4, p99Ms: 9, maxMs: 12 };
  return {
    node: 'A', what: 'A\'s Redis traffic (:6379) dropped both ways', faultMs: 20_000,
    ready: { downs: 1, firstDownMs: 3600, upAgainMs: 1200, downMs: 17_600 },
    lb: { downs: 2, firstDownMs: 4300, upAgainMs: 2100, downMs: 17_800 },
    othersUnready: 0, outages: { A: 1, B: 0 },
    ackBefore: { A: lat, B: lat }, ackDuring: { A: { n: 80, p50Ms: 9000, p99Ms: 21_000, maxMs: 23_000 }, B: lat },
    recovery: { lateMs: 1000, delayed: 70, resumeMs: 21_300, recoverMs: 24_000, maxAckMs: 23_000 },
    expect: { unreadyByMs: 6000, readyWithinMs: 3000, outage: true },
    ...over,
  };
}

test('netFaultViolations: readiness as expected (failed by, back within), an outage counted, back at the end; the cell says it all', () => {
  const f = netFault();
  assert.deepEqual(netFaultViolations(f), []);
  assert.match(netFaultViolations(netFault({ ready: { downs: 0, firstDownMs: NaN, upAgainMs: 0, downMs: 0 } })).join(), /A never failed readiness during the fault \(expected by 6\.0 s\)/);
  assert.match(netFaultViolations(netFault({ ready: { ...f.ready, firstDownMs: 7000 } })).join(), /A failed readiness 7\.0 s after the fault began/);
  assert.match(netFaultViolations(netFault({ ready: { ...f.ready, upAgainMs: 4000 } })).join(), /A ready again 4\.0 s after the fault ended \(expected within 3\.0 s\)/);
  assert.match(netFaultViolations(netFault({ ready: { ...f.ready, upAgainMs: NaN } })).join(), /A was not ready again by the end of the step/);
  assert.match(netFaultViolations(netFault({ lb: { ...f.lb, upAgainMs: NaN } })).join(), /a load balancer still had A DOWN/);
  assert.match(netFaultViolations(netFault({ outages: { A: 0, B: 0 } })).join(), /did not count as an outage on A/);
  assert.match(netFaultViolations(netFault({ outages: { A: NaN, B: 0 } })).join(), /did not count as an outage/);
  assert.match(netFaultViolations(netFault({ faultFailure: 'pump exited' })).join(), /the fault did not hold: pump exited/);
  // A slow link expects nothing of readiness but that A is ready at the end: flaps and outages are counted, not failed.
  const slow = netFault({ expect: {}, ready: { downs: 3, firstDownMs: 9000, upAgainMs: 0, downMs: 4000 }, outages: { A: 3, B: 0 } });
  assert.deepEqual(netFaultViolations(slow), []);
  assert.equal(netFaultCell(f), 'A\'s Redis traffic (:6379) dropped both ways for 20.0 s: A 503 after 3.6 s, 200 again 1.2 s after the end; ' +
    'LBs: A DOWN after 4.3 s, UP 2.1 s after the end; outages A 1, B 0; acks on A during: p50 9.0 s, p99 21.0 s, max 23.0 s (80), before: p50 4 ms; ' +
    '70 acks later than 1 s (longest 23.0 s), from 21.3 s to 24.0 s after the start');
  assert.match(netFaultCell(netFault({ recovery: { lateMs: 1000, delayed: 0, resumeMs: 0, recoverMs: 0, maxAckMs: 700 } })), /; no ack later than 1 s$/);
  assert.match(netFaultCell(slow), /A 503 after 9\.0 s, 200 again 0\.0 s after the end \(3 times unready, 4\.0 s in all\)/);
  assert.match(netFaultCell(netFault({ ready: { downs: 0, firstDownMs: NaN, upAgainMs: 0, downMs: 0 }, lb: { downs: 0, firstDownMs: NaN, upAgainMs: 0, downMs: 0 } })),
    /: A ready throughout; LBs kept A UP; /);
});

test('violations: a network fault\'s own verdict, and error lines break it although it is no planned scenario', () => {
  const b = { max99Ms: 10_000 };
  const r = result({ scenario: 'partition', planned: false, errorLinesBreak: true, netFault: netFault(), steps: [] });
  assert.deepEqual(violations(r, b), []);
  assert.match(violations({ ...r, errorLines: { A: 2, B: 0 } }, b).join(), /2 error lines logged \(A 2, B 0\)/);
  assert.match(violations({ ...r, netFault: netFault({ ready: { ...r.netFault!.ready, upAgainMs: NaN } }) }, b).join(), /A was not ready again/);
  assert.equal(failoverCell(r), netFaultCell(r.netFault!));
  assert.match(renderTable([r], b), /\| partition \| .*\| A's Redis traffic \(:6379\) dropped both ways for 20\.0 s: .*\| pass \|$/m);
});

test('network-fault scenarios: node A in a namespace on one redis-server, default acks; a 20 s cut; 200 ms and 5% both ways for 30 to 60 s', () => {
  assert.deepEqual(SETUP.partition, { redis: 'standalone', nodeAInNetns: true });
  assert.deepEqual(SETUP.slowlink, { redis: 'standalone', nodeAInNetns: true });
  assert.ok(ALL_SCENARIOS.includes('partition') && ALL_SCENARIOS.includes('slowlink'));
  assert.ok(!CI_SCENARIOS.some((s) => SETUP[s].nodeAInNetns === true), 'the CI check needs no root');
  assert.deepEqual(Object.keys(SETUP).filter((s) => SETUP[s as 'rolling'].nodeAInNetns === true), ['partition', 'slowlink']);
  const cfg = defaultConfig(2000);
  assert.equal(cfg.partitionMs, 20_000);
  // docs/operations.md: unready 3 to 5 s after the cut, ready about 1 s after the link is back; the cut is an outage.
  assert.deepEqual(cfg.partitionExpect, { unreadyByMs: 6000, readyWithinMs: 3000, outage: true });
  assert.equal(cfg.slowLink.delayMs, 200);
  assert.equal(cfg.slowLink.lossPct, 5);
  assert.equal(cfg.slowLink.directions, 'both');
  assert.ok(cfg.slowLink.ms >= 30_000 && cfg.slowLink.ms <= 60_000);
});

test('publishedTopics: the topics some publisher has (every topic at 10k clients, 40 of 50 at 2000)', () => {
  const roles = { ...defaultConfig(10_000).roles, run: 'x' } satisfies Roles;
  assert.equal(publishedTopics(roles, 10_000).length, 50);
  assert.deepEqual(publishedTopics(roles, 2000), Array.from({ length: 40 }, (_, i) => i));
  assert.deepEqual(publishedTopics(roles, 1), [0]);
  assert.deepEqual(publishedTopics({ ...roles, publisherEvery: 0 }, 100), []);
});

test('clusterMasters: the masters serving slots, by port, from CLUSTER NODES; failed masters, replicas and migrating slots left out', () => {
  const text = [
    'a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460',
    'a2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922 [10923->-a3]',
    'a3 127.0.0.1:7003@17003,host master - 0 0 3 connected 10923-16383',
    'a4 127.0.0.1:7004@17004 slave a1 0 0 1 connected',
    'a5 127.0.0.1:7005@17005 master,fail - 0 0 4 disconnected',
    'a6 127.0.0.1:7006@17006 master - 0 0 5 connected 100 200-300',
    '',
  ].join('\n');
  assert.deepEqual([...clusterMasters(text)], [
    [7001, [[0, 5460]]], [7002, [[5461, 10922]]], [7003, [[10923, 16383]]], [7006, [[100, 100], [200, 300]]],
  ]);
});

const lbOpts = {
  bindPort: 23456, servers: [{ name: 'node-a', port: 24001 }, { name: 'node-b', port: 24002 }], source: '127.0.0.20',
  maxconn: 9000, ulimitN: 19_000, statsSocket: '/tmp/x.sock', inter: '500ms', fall: 2, rise: 2,
};

test('haproxyConfig: the deploy file with the run\'s ports, sizes, source and checks; HTTP/1.1 checks with a Host header', () => {
  const cfg = haproxyConfig(readFileSync(DEPLOY_CFG, 'utf8'), lbOpts);
  assert.match(cfg, /^ {4}maxconn 9000\n {4}ulimit-n 19000\n {4}stats socket \/tmp\/x\.sock level admin$/m);
  assert.match(cfg, /^ {4}bind 127\.0\.0\.1:23456\n {4}option forwardfor$/m);
  assert.match(cfg, /^ {4}balance leastconn$/m);
  assert.match(cfg, /^ {4}http-check send meth GET uri \/health\/ready ver HTTP\/1\.1 hdr Host sluice\n {4}http-check expect status 200$/m);
  assert.match(cfg, /^ {4}default-server inter 500ms fall 2 rise 2$/m);
  assert.match(cfg, /^ {4}source 127\.0\.0\.20$/m);
  assert.deepEqual([...cfg.matchAll(/^ {4}server (\S+) (\S+) check$/gm)].map((m) => [m[1], m[2]]), [['node-a', '127.0.0.1:24001'], ['node-b', '127.0.0.1:24002']]);
  assert.doesNotMatch(cfg, /8080|8081|:8000|200000/);
  assert.doesNotMatch(cfg, /^ *[^#\n ][^#\n]*shutdown-sessions/m);
  // Two fds per proxied connection: a maxconn the fd limit cannot hold is refused.
  assert.throws(() => haproxyConfig(readFileSync(DEPLOY_CFG, 'utf8'), { ...lbOpts, maxconn: 10_000, ulimitN: 19_000 }), /too small/);
  assert.throws(() => haproxyConfig('global\n    maxconn 5\n', lbOpts), /changed shape/);
});

const nsServers = [{ name: 'node-a', port: 24001, host: '10.251.3.2', source: '10.251.3.1' }, { name: 'node-b', port: 24002 }];

test('haproxyConfig: a node in a network namespace on its own address, reached from the host end of its link', () => {
  const cfg = haproxyConfig(readFileSync(DEPLOY_CFG, 'utf8'), { ...lbOpts, servers: nsServers });
  assert.deepEqual([...cfg.matchAll(/^ {4}server .*$/gm)].map((m) => m[0].trim()), [
    'server node-a 10.251.3.2:24001 check source 10.251.3.1',
    'server node-b 127.0.0.1:24002 check',
  ]);
  // The backend's loopback source stays for the others.
  assert.match(cfg, /^ {4}source 127\.0\.0\.20$/m);
});

test('haproxyConfig: haproxy -c accepts it', () => {
  const haproxy = requireSystemDep('haproxy');
  const dir = mkdtempSync(join(tmpdir(), 'chaos-test-'));
  try {
    for (const servers of [lbOpts.servers, nsServers]) {
      const p = join(dir, 'lb.cfg');
      writeFileSync(p, haproxyConfig(readFileSync(DEPLOY_CFG, 'utf8'), { ...lbOpts, servers, statsSocket: join(dir, 'lb.sock') }));
      const r = spawnSync(haproxy, ['-c', '-f', p], { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stdout + r.stderr);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('parseShowStat: backend servers and their status', () => {
  const csv = '# pxname,svname,qcur,status,weight\nws_in,FRONTEND,,OPEN,\nsluice,node-a,0,UP,1\nsluice,node-b,0,DOWN 1/2,1\nsluice,BACKEND,0,UP,1\n';
  assert.deepEqual(parseShowStat(csv), { 'node-a': 'UP', 'node-b': 'DOWN 1/2' });
  assert.deepEqual(parseShowStat(''), {});
});

test('topicsOf: distinct topics per client, every topic about equally subscribed', () => {
  const roles = { ...defaultConfig(10_000).roles, run: 'x' } satisfies Roles;
  const per = new Array<number>(roles.topics).fill(0);
  for (let i = 0; i < 10_000; i++) {
    const ts = topicsOf(roles, i);
    assert.equal(ts.length, roles.topicsPerClient);
    assert.equal(new Set(ts).size, ts.length);
    for (const t of ts) per[t]!++;
  }
  const expect = (10_000 * roles.topicsPerClient) / roles.topics;
  assert.ok(per.every((n) => Math.abs(n - expect) <= expect * 0.1), JSON.stringify(per));
});

test('the upgrade budget\'s goal: no survivor above 1.1x in a second, 99% back within moved / budget + 6 s from the first drop, all back', () => {
  const b = { max99Ms: 60_000 };
  const kill = (over: Partial<ReconnectStats>, peaks: Record<string, number>): ScenarioResult => result({
    scenario: 'kill', planned: false, upgradeRate: 1000,
    steps: [{ name: 'SIGKILL A', survivors: ['B'], peakArrivalsPerS: 0, peakArrivalsByNode: peaks, clientPeakPerS: 0, closesPeakPerS: 0, closesPeak5sPerS: 0,
      reconnect: { dropped: 5000, back: 5000, t50Ms: 3000, t99Ms: 10_000, tAllMs: 11_000, firstDropMs: 100, t99FromDropMs: 9900, longestWaitMs: 10_500, ...over } }],
  });
  // 5000 moved at 1000/s: 5 s + 6 s.
  assert.equal(budgetBoundMs({ upgradeRate: 1000, drainRate: 500 }, kill({}, {}).steps[0]!), 11_000);
  assert.deepEqual(violations(kill({}, { B: 1100 }), b), []);
  assert.match(violations(kill({}, { B: 1101 }), b).join(), /B accepted 1101 upgrades in one second, above 1.1x WS_UPGRADE_RATE=1000/);
  assert.match(violations(kill({ t99FromDropMs: 11_001 }, { B: 900 }), b).join(), /99% of 5000 moved clients back 11\.0 s after the first drop, above the budget's 11\.0 s/);
  assert.match(violations(kill({ back: 4999 }, { B: 900 }), b).join(), /1 dropped clients never came back/);
  // A drain slower than the budget paces the rolling restart: its rate is the bound's.
  assert.equal(budgetBoundMs({ upgradeRate: 1000, drainRate: 500 }, { name: 'drain A', survivors: ['B'], reconnect: kill({}, {}).steps[0]!.reconnect }), 16_000);
  // Two survivors share the moved clients: twice the budget.
  assert.equal(budgetBoundMs({ upgradeRate: 1000, drainRate: 500 }, { name: 'all cut', survivors: ['A', 'B'], reconnect: kill({}, {}).steps[0]!.reconnect }), 8500);
  // Budget off: nothing checked.
  assert.deepEqual(violations(result({ upgradeRate: 0, steps: kill({}, { B: 5000 }).steps }), b), []);
});

test('the fleet reads a durable event\'s topic and id off the wire as the gateway frames it', async () => {
  const { encodeEventFrame } = await import('@sluice/protocol');
  const base = { topic: 'chaos.r.d1', dataJson: '{"p":1,"id":"9-9"}', key: undefined, traceparent: undefined };
  assert.deepEqual(wireEvent(encodeEventFrame(base, '1796429097827-3')), { topic: 'chaos.r.d1', id: '1796429097827-3' });
  const traced = { ...base, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
  assert.deepEqual(wireEvent(encodeEventFrame(traced, '5-0')), { topic: 'chaos.r.d1', id: '5-0' });
  assert.equal(wireEvent(encodeEventFrame({ ...base, key: 'sym1' }, undefined)), undefined, 'a keyed event has no id');
  assert.equal(wireEvent(encodeEventFrame(base, undefined)), undefined, 'nor an ephemeral one, whatever its data holds');
  // Another field order (not the gateway's today) is parsed.
  assert.deepEqual(wireEvent('{"type":"event","data":1,"topic":"t","id":"7-1"}'), { topic: 't', id: '7-1' });
});

test('cpuBetween: each role\'s CPU between the samples around a window; describeCpu: shares of the core-seconds and the idle rest', async () => {
  const { cpuBetween, describeCpu } = await import('../chaos/cpu.ts');
  const samples: { t: number; by: Record<string, number> }[] = [
    { t: 0, by: { gateways: 0, clients: 0 } },
    { t: 1000, by: { gateways: 0.5, clients: 1.0 } },
    { t: 2000, by: { gateways: 1.5, clients: 1.5, HAProxy: 0.2 } },
    { t: 3000, by: { gateways: 2.0, clients: 2.5, HAProxy: 0.2 } },
  ];
  // [1200, 2500] is covered by the samples at 1000 and 3000.
  assert.deepEqual(cpuBetween(samples, 1200, 2500), { wallS: 2, by: { gateways: 1.5, clients: 1.5, HAProxy: 0.2 } });
  assert.deepEqual(cpuBetween(samples, 1000, 2000), { wallS: 1, by: { gateways: 1, clients: 0.5, HAProxy: 0.2 } });
  assert.equal(cpuBetween(samples, 2000, 2000), undefined, 'an empty window');
  assert.equal(cpuBetween([], 0, 1000), undefined);
  assert.equal(describeCpu({ wallS: 2, by: { gateways: 1.5, clients: 2 } }, 2), 'clients 2.0 s (50%), gateways 1.5 s (38%), idle 0.5 s (13%) of 4.0 core-seconds');
});
