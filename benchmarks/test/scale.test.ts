import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  SeqTrack, deliveriesPerSecond, feedFollowers, limits, nodeOf, reconnectNode, roomMembers, rooms, sizeFor, topicsOf, type Mix,
} from '../src/scenarios/scale-plan.ts';
import { S16_DEFAULT, variantOf, type ScalePoint } from '../src/scenarios/scale.ts';
import { renderScaleSvg } from '../src/report/scale.ts';
import { rows, ratios } from '../src/report/summary.ts';
import { rowsTables } from '../src/report/render.ts';
import type { Sample } from '../src/scenarios/common.ts';

const MIX: Mix = { sockets: 1005, roomSize: 10, feeds: 100 };

test('every socket has one room of roomSize neighbours and one feed; the counts add up to the sockets', () => {
  assert.equal(rooms(MIX), 101);
  assert.deepEqual(topicsOf(MIX, 0), { room: 0, feed: 0 });
  assert.deepEqual(topicsOf(MIX, 19), { room: 1, feed: 19 });
  assert.deepEqual(topicsOf(MIX, 1004), { room: 100, feed: 4 });
  const byRoom = new Map<number, number>();
  const byFeed = new Map<number, number>();
  for (let i = 0; i < MIX.sockets; i++) {
    const t = topicsOf(MIX, i);
    byRoom.set(t.room, (byRoom.get(t.room) ?? 0) + 1);
    byFeed.set(t.feed, (byFeed.get(t.feed) ?? 0) + 1);
  }
  for (let k = 0; k < rooms(MIX); k++) assert.equal(roomMembers(MIX, k), byRoom.get(k), `room ${k}`);
  for (let k = 0; k < MIX.feeds; k++) assert.equal(feedFollowers(MIX, k), byFeed.get(k), `feed ${k}`);
  assert.equal(roomMembers(MIX, 100), 5);
  assert.equal(roomMembers(MIX, 101), 0);
  assert.equal(feedFollowers(MIX, 100), 0);
});

test('a room\'s members start on different nodes', () => {
  const nodes = new Set(Array.from({ length: 7 }, (_, j) => nodeOf(70 + j, 7)));
  assert.equal(nodes.size, 7);
});

test('a dropped client goes to the node restarted last, else spreads over the other up nodes', () => {
  const up = [true, true, false, true];
  // The drained node (2) is down; node 0 was restarted last.
  assert.equal(reconnectNode(up, 0, 2, 5), 0);
  // No preference: spread over 0, 1, 3 by client.
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((c) => reconnectNode(up, -1, 2, c)), [0, 1, 3, 0, 1, 3]);
  // The preferred node is the one it left (a publisher socket refused there): another one.
  assert.equal(reconnectNode([true, true], 0, 0, 0), 1);
  // Nothing else up: back to where it was, or nowhere.
  assert.equal(reconnectNode([true, false], -1, 0, 3), 0);
  assert.equal(reconnectNode([false, false], 1, 0, 3), -1);
});

test('deliveries per second: the big topic reaches every socket, a room event its room, a feed update its followers', () => {
  const m: Mix = { sockets: 100_000, roomSize: 10, feeds: 1000 };
  assert.deepEqual(deliveriesPerSecond(m, { big: 1, room: 10, feed: 10 }), { big: 100_000, room: 100, feed: 1000, total: 101_100 });
});

test('SeqTrack counts gaps as missing until a late arrival fills them, repeats as duplicates', () => {
  const t = new SeqTrack();
  for (const s of [0, 1, 4, 2, 2, 5]) t.see(s);
  assert.equal(t.last, 5);
  assert.deepEqual([...t.missing!].sort(), [3]);
  assert.equal(t.late, 1);
  assert.equal(t.duplicates, 1);
  // 8 published: 3, 6 and 7 never came; 6 was never acknowledged, so it is not counted lost.
  assert.deepEqual(t.lost(8, new Set([6])), [3, 7]);
  // Nothing missing from a complete run.
  const ok = new SeqTrack();
  for (let s = 0; s < 10; s++) ok.see(s);
  assert.deepEqual(ok.lost(10, undefined), []);
  assert.equal(ok.missing, null);
});

test('limits are ordered by share of their limit: the first is the one met first', () => {
  const l = limits({
    cpuCores: 1.9, cores: 2, memUsedBytes: 6 * 2 ** 30, memTotalBytes: 24 * 2 ** 30, redisCores: 0.1, portsPerSource: 12_500, portRange: 28_232,
    gatewayFds: 16_800, loadFds: 14_400, fdLimit: 20_000,
  });
  assert.deepEqual(l.map((x) => x.resource), ['CPU', 'file descriptors', 'ports', 'memory', 'Redis']);
  assert.equal(l[0]!.share, 0.95);
  assert.match(l[1]!.detail, /16800 \(gateway\) \/ 14400 \(load process\) of 20000/);
});

test('sizing: nodes from sockets per node, RAM from the per-socket cost, cores from deliveries and events, Redis shards from its CPU', () => {
  const s = sizeFor(
    { sockets: 1_000_000, deliveriesPerS: 1_000_000, eventsPerS: 1000, socketsPerNode: 50_000, cpuTarget: 0.5, redisTarget: 0.5 },
    { rssPerSocket: 4096, rssBase: 200 * 2 ** 20, cpuUsPerDelivery: 2, cpuUsPerEventPerNode: 50, redisUsPerEvent: 300 },
  );
  assert.equal(s.nodes, 20);
  assert.equal(s.ramPerNodeBytes, 200 * 2 ** 20 + 4096 * 50_000);
  // (1e6 x 2 us + 1000 x 20 x 50 us) / 1e6 = 3 cores over 20 nodes at half a core's use: 0.3 cores each.
  assert.equal(s.gatewayCores, 3);
  assert.ok(Math.abs(s.coresPerNode - 0.3) < 1e-9);
  assert.ok(Math.abs(s.redisCores - 0.3) < 1e-9);
  assert.equal(s.redisShards, 1);
});

function sample(): Sample {
  const tl: ScalePoint[] = ['idle', 'steady', 'steady', 'restart', 'tail'].map((phase, i) => ({
    t: (i + 1) * 2, phase, wallS: 2, deliveries: phase === 'idle' ? 0 : 200_000, big: 200_000, room: 0, feed: 0, published: 2, gatewayCpuS: 1, redisCpuS: 0.1,
    loadCpuS: 0.5, machineBusyS: 3, redisCalls: 30, p50Us: 2000, p99Us: 9000, subscribed: phase === 'restart' ? 85_000 : 100_000,
    gatewayRssBytes: 3e9, maxGatewayFds: 15_000, memUsedBytes: 6e9,
  }));
  return {
    scenario: 'S16', variant: variantOf(S16_DEFAULT), target: 'sluice', repeat: 0, ok: true, count: 400_000, wallS: 4, serverCpuS: 2, clientCpuS: [1],
    serverUtil: 0.5, clientUtilMax: 0.25, otherUtil: 0, bound: 'none', perSec: 100_000, perServerCpuS: 200_000,
    latency: { count: 400_000, p50Us: 2000, p99Us: 9000, p999Us: 12_000, maxUs: 20_000 },
    extra: {
      roomSize: 10, feeds: 1000, rateBig: 1, rateRoom: 10, rateFeed: 10, deliveredShare: 0.99, gatewayCpuUsPerDelivery: 5, gatewayUtil: 0.5, redisUtil: 0.05,
      loadUtil: 0.25, machineUtil: 1.5, redisCallsPerEvent: 15, redisCpuUsPerEvent: 300, rssPerSocketBytes: 3000, rssPerSocketMinBytes: 2500,
      rssPerSocketMaxBytes: 3500, idleCpuUsPerSocketS: 1.5, firstLimit: 'CPU', restartDrainMaxMs: 9000, restartBack99MaxMs: 15_000, ackedDurable: 1234,
      lostPairs: 0,
    },
    timeline: tl,
  };
}

test('S16 renders its row with the restart and the first limit, and has no Sluice/peer ratio', () => {
  const s = sample();
  const table = rowsTables(rows([s]));
  assert.match(table, /### S16 100,000 sockets on one box/);
  assert.match(table, /\| 100000 sockets, 7 nodes \| 100k \(99\.0%\) \| 5us \| 0\.50 \/ 0\.05 \/ 0\.25 \/ 1\.50 \| 15\.00 \| 300us \| 2\.0ms \/ 9\.0ms \| 2\.93 KiB \(2\.44 KiB-3\.42 KiB\) \| 1\.50 µs\/s \| CPU \| 9\.0 s \/ 15\.0 s \| 1\.2k \/ 0 \| 1\/1 \|/);
  assert.deepEqual(ratios([s]), []);
});

test('the S16 chart has both panels, every phase named, and the headline numbers', () => {
  const svg = renderScaleSvg(sample());
  assert.match(svg, /^<svg /);
  for (const phase of ['idle', 'steady', 'restart', 'tail']) assert.match(svg, new RegExp(`>${phase}</text>`));
  assert.match(svg, /sockets joined/);
  assert.match(svg, /delivery p99 \(right axis\)/);
  assert.match(svg, /1234 durable publishes acked, 0 \(subscription, event\) pairs lost/);
  assert.equal((svg.match(/<polyline /g) ?? []).length, 7);
});
