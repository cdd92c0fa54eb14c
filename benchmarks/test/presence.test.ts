// S14 (presence at scale): what the load generator reads of presence frames,
// the per-socket rates of a phase, INFO commandstats, and how the rows and the
// chart render; S14 has no Sluice/peer ratio.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodePresenceData, encodePresenceDiff, encodePresenceState } from '@sluice/core';
import { Kind, classify, replyRefChar } from '../src/lib/codec.ts';
import { DiffCache, PresenceView, diffEntries, listedUsers, presenceKind, stateCount } from '../src/loadgen/presence.ts';
import { commandCalls, perSocketRates, S14_DEFAULT, S14_QUICK, variantOf, type PresencePoint } from '../src/scenarios/presence.ts';
import { ratios, rows } from '../src/report/summary.ts';
import { goalsTable, renderPresenceSvg, rowsTables } from '../src/report/render.ts';
import { checkGoals } from '../src/report/gates.ts';
import type { Sample } from '../src/scenarios/common.ts';

const buf = (s: string): Buffer => Buffer.from(s);
const users = (n: number, from = 0): Map<string, number> => new Map(Array.from({ length: n }, (_, i) => [`u${from + i}`, 1]));

test('presence frames are told apart by their first bytes, from pong and from replies', () => {
  const state = buf(encodePresenceState('room:1', encodePresenceData(users(3), 1000)));
  const diff = buf(encodePresenceDiff('room:1', { joins: users(2), leaves: ['u9'] }));
  assert.equal(classify('sluice', state, 0, state.length), Kind.Presence);
  assert.equal(classify('sluice', diff, 0, diff.length), Kind.Presence);
  const pong = buf('{"type":"pong","ref":"6"}');
  assert.equal(classify('sluice', pong, 0, pong.length), Kind.Other);
  assert.equal(presenceKind(state, 0, state.length), 'state');
  assert.equal(presenceKind(diff, 0, diff.length), 'diff');
  const reply = buf('{"type":"reply","ref":"l","status":"ok"}');
  assert.equal(classify('sluice', reply, 0, reply.length), Kind.ReplyOk);
  assert.equal(replyRefChar(reply, 0, reply.length), 'l');
});

test('a presence_state gives its full count and the users it lists, cut or not', () => {
  const full = buf(encodePresenceState('room:1', encodePresenceData(users(20), 1000)));
  assert.equal(stateCount(full, 0, full.length), 20);
  assert.equal(listedUsers(full, 0, full.length), 20);
  const cut = buf(encodePresenceState('room:1', encodePresenceData(users(2500), 1000)));
  assert.equal(stateCount(cut, 0, cut.length), 2500);
  assert.equal(listedUsers(cut, 0, cut.length), 1000);
  // Inside a larger buffer: only [s, e) is read.
  const padded = Buffer.concat([buf('xx"count":7'), full, buf('"count":9')]);
  assert.equal(stateCount(padded, 11, 11 + full.length), 20);
});

test('diffEntries counts joins and leaves; DiffCache counts a byte-equal frame once', () => {
  const d = buf(encodePresenceDiff('room:1', { joins: users(300), leaves: Array.from({ length: 120 }, (_, i) => `u${1000 + i}`) }));
  assert.deepEqual(diffEntries(d, 0, d.length), { joins: 300, leaves: 120 });
  const none = buf(encodePresenceDiff('room:1', { joins: new Map(), leaves: ['a'] }));
  assert.deepEqual(diffEntries(none, 0, none.length), { joins: 0, leaves: 1 });
  const cache = new DiffCache(2);
  const copy = Buffer.concat([buf('zz'), d]);
  assert.deepEqual(cache.entries(d, 0, d.length), { joins: 300, leaves: 120 });
  assert.equal(cache.entries(copy, 2, copy.length).joins, 300);
  assert.equal(cache.misses, 1);
  cache.entries(none, 0, none.length);
  const other = buf(encodePresenceDiff('room:1', { joins: users(1, 5), leaves: [] }));
  cache.entries(other, 0, other.length);
  cache.entries(d, 0, d.length); // pushed out by the two after it
  assert.equal(cache.misses, 4);
});

test('PresenceView follows a state and the diffs after it; a cut state is not exact', () => {
  const v = new PresenceView();
  v.diff(encodePresenceDiff('room:1', { joins: users(1), leaves: [] })); // before any state: ignored
  v.state(encodePresenceState('room:1', encodePresenceData(users(3), 1000)));
  v.diff(encodePresenceDiff('room:1', { joins: users(2, 10), leaves: ['u0'] }));
  assert.deepEqual([...v.users].sort(), ['u1', 'u10', 'u11', 'u2']);
  assert.equal(v.exact, true);
  v.state(encodePresenceState('room:1', encodePresenceData(users(5), 2)));
  assert.equal(v.exact, false);
});

test('perSocketRates: frames and bytes over the sockets joined each second; thin seconds left out of the max', () => {
  const p = (joined: number, diffFrames: number, diffBytes: number): PresencePoint =>
    ({ t: 0, phase: 'x', joined, diffFrames, diffBytes, stateFrames: 0, stateBytes: 0, ops: 0, cpu: 0 });
  const r = perSocketRates([p(100, 100, 1000), p(1000, 1000, 50_000), p(1000, 900, 40_000), p(10, 20, 9000), p(0, 0, 0)]);
  assert.equal(r.framesMean, 2020 / 2110);
  assert.equal(r.framesMax, 1);
  assert.equal(r.bytesMax, 50);
  assert.ok(Number.isNaN(perSocketRates([]).framesMean));
});

test('commandCalls reads INFO commandstats', () => {
  const info = '# Commandstats\r\ncmdstat_evalsha:calls=12,usec=300,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\ncmdstat_hset:calls=4000,usec=9\r\n';
  assert.deepEqual(commandCalls(info), { evalsha: 12, hset: 4000 });
});

test('S14 rows render in their own tables and chart, with no Sluice/peer ratio', () => {
  const base: Sample = {
    scenario: 'S14', variant: '', target: 'sluice', repeat: 0, ok: true, count: 20_000, wallS: 20, serverCpuS: 4, clientCpuS: [1],
    serverUtil: 0.2, clientUtilMax: 0.3, otherUtil: 0.05, bound: 'none', perSec: 1000, perServerCpuS: 5000, extra: {},
  };
  const cfg = S14_DEFAULT;
  const join: Sample = {
    ...base, variant: variantOf(cfg, 'join'),
    extra: { ops: 20_000, cpuPerOpUs: 200, idleCpuPerOpUs: 20, gatewayRedisCallsPerOp: 0.002, redisCommandsPerOp: 0.31, framesPerSocketS: 0.98,
      framesPerSocketSMax: 1.01, bytesPerSocketS: 27_000, bytesPerSocketSMax: 28_000, diffFrames: 200_000, states: 20_000, stateBytesAvg: 27_000,
      stateP50Ms: 3, stateP99Ms: 40, gaps: 180_000, gapMinMs: 700, gapP50Ms: 1000, checked: 20_000, wrongCounts: 0, settleMs: 800,
      rssPerMemberBytes: 900, redisBytesPerMember: 60, members: 20_000, diffMs: 1000 },
    timeline: [
      { t: 1, phase: 'join', joined: 1000, diffFrames: 900, diffBytes: 20_000_000, stateFrames: 1000, stateBytes: 1_000_000, ops: 1000, cpu: 0.5 },
      { t: 2, phase: 'churn 1', joined: 20_000, diffFrames: 20_000, diffBytes: 80_000_000, stateFrames: 100, stateBytes: 100_000, ops: 200, cpu: 0.7 },
      { t: 3, phase: 'kill', joined: 10_000, diffFrames: 10_000, diffBytes: 1_200_000_000, stateFrames: 0, stateBytes: 0, ops: 0, cpu: 0.4 },
    ],
  };
  const probe: Sample = { ...base, variant: variantOf(cfg, 'probe'), extra: { members: 20_000, stateMsA: 4.2, stateMaxMsA: 6, stateBytesA: 27_800, listedA: 1000, countA: 20_000,
    replyMsA: 2, queryMsA: 1.5, queryBytesA: 27_700, queryCountA: 20_000, adminMsA: 9, adminMsB: 11, adminBytes: 27_700, adminCount: 20_000, adminListed: 1000 } };
  const kill: Sample = { ...base, variant: variantOf(cfg, 'kill'), extra: { goneAdminMs: 18_000, goneAllSocketsMs: 19_500, goneP50SocketsMs: 19_000,
    goneObserversMs: '[19000,19100]', nodesDropMs: 17_900, boundMs: 23_500, ttlMs: 30_000, wrongCounts: 0, checked: 10_000 } };
  const fetchRow: Sample = { ...base, target: 'sio', variant: variantOf(cfg, 'sio-fetch'), extra: { fetchP50Ms: 300, fetchMaxMs: 350, fetchBytes: 10_000_000,
    fetchCount: 20_000, fetchLocal: 10_000, fetches: 5, cpuPerFetchMs: 400, redisCpuPerFetchMs: 10, fetchFromBMs: 320 } };
  const t = rowsTables(rows([join, probe, kill, fetchRow]));
  assert.match(t, /### S14 presence at scale/);
  assert.match(t, /\| presence join, 20000 users at 1000\/s \| Sluice \(2 workers\) \| 20000 \| 1\.0k \| 200us \| 20\.0us \| 0\.0020 \| 0\.310 \| 0\.98 \(1\.01\) \| 26\.37 KiB \(27\.34 KiB\) \|/);
  assert.match(t, /\| 0 \(20000\), 800 ms \| 900 B \/ 60 B \|/);
  assert.match(t, /\| Sluice: a new socket's presence_state, node A \(its replica\) \| 4\.2 ms \(6\.0 ms\) \| 27\.15 KiB \| 1000 of 20000 \|/);
  assert.match(t, /\| Socket\.IO: `io\.in\(room\)\.fetchSockets\(\)` on server A \(5 calls\) \| 300 ms \(350 ms\) \| 9\.5 MiB \| 20000 of 20000 \|/);
  assert.match(t, /\| SIGKILL node B \(10000 of 20000 members\), TTL 30000 ms \| 18000 ms \| 19500 ms \(19000 ms\) \| \[19000,19100\] \| 17900 ms \| 23500 ms \| yes \|/);
  assert.deepEqual(ratios([join, probe, kill, fetchRow]), []);
  const goals = checkGoals(rows([join, probe, kill, fetchRow]), [], [join, probe, kill, fetchRow]);
  const g = goals.find((x) => x.goal.scenario === 'S14')!;
  assert.equal(g.measured, 0.6);
  assert.equal(g.met, true);
  assert.match(goalsTable(goals), /S14 a SIGKILLed node's users gone .* \| Sluice \(2 workers\) \| 0\.60x \| yes/);
  const svg = renderPresenceSvg([join, kill]);
  assert.match(svg, /^<svg /);
  assert.match(svg, /presence_diff frames per joined socket per second/);
  assert.match(svg, />churn 1</);
  assert.ok(S14_QUICK.sockets < S14_DEFAULT.sockets && S14_QUICK.ttlMs >= 1000);
});
