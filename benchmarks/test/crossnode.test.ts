import { test } from 'node:test';
import assert from 'node:assert/strict';
import { redisCalls, S8_DEFAULT, variantsOf } from '../src/scenarios/crossnode.ts';
import { S3_DEFAULT } from '../src/scenarios/fanout.ts';
import { rows, ratios } from '../src/report/summary.ts';
import { rowsTables } from '../src/report/render.ts';
import { checkGoals } from '../src/report/gates.ts';
import type { Sample } from '../src/scenarios/common.ts';

test('redisCalls reads INFO commandstats per command, leaving out INFO itself', () => {
  const text = [
    '# Commandstats',
    'cmdstat_evalsha:calls=824,usec=70000,usec_per_call=84.95,rejected_calls=0,failed_calls=0',
    'cmdstat_xadd:calls=824,usec=5000,usec_per_call=6.07,rejected_calls=0,failed_calls=0',
    'cmdstat_info:calls=7,usec=300,usec_per_call=42.86,rejected_calls=0,failed_calls=0',
    'cmdstat_client|setinfo:calls=4,usec=3,usec_per_call=0.75,rejected_calls=0,failed_calls=0',
  ].join('\r\n');
  assert.deepEqual(redisCalls(text), { evalsha: 824, xadd: 824, 'client|setinfo': 4 });
});

test('S8 runs S3 with two nodes, again with one shard each, and one node with four; its variants name them', () => {
  assert.deepEqual(S8_DEFAULT, { ...S3_DEFAULT, warmupEvents: 1001, nodes: 2, ackReplicas: 0, restMs: 3000, nodeWorkers: 1, embeddedWorkers: 4 });
  assert.deepEqual(variantsOf(S8_DEFAULT), {
    embedded: '1 node, embedded', redisOne: '1 node on Redis', cluster: '2 nodes on Redis', fewerShards: '2 nodes on Redis, WS_WORKERS=1 each',
    moreShards: '1 node, embedded, WS_WORKERS=4',
  });
  assert.deepEqual(variantsOf({ nodes: 3, ackReplicas: 0 }), { embedded: '1 node, embedded', redisOne: '1 node on Redis', cluster: '3 nodes on Redis' });
});

test('S8 with --ack-replicas: a fourth variant, the same nodes with WS_REDIS_ACK_REPLICAS', () => {
  assert.deepEqual(variantsOf({ nodes: 2, ackReplicas: 1 }), {
    embedded: '1 node, embedded', redisOne: '1 node on Redis', cluster: '2 nodes on Redis', acked: '2 nodes on Redis, WS_REDIS_ACK_REPLICAS=1',
  });
  assert.equal(variantsOf({ nodes: 3, ackReplicas: 2 }).acked, '3 nodes on Redis, WS_REDIS_ACK_REPLICAS=2');
});

test('S8 rows render against the single node, and S8 has no Sluice/peer ratio', () => {
  const base: Sample = {
    scenario: 'S8', variant: '1 node, embedded', target: 'sluice', repeat: 0, ok: true, count: 3_000_000, wallS: 3, serverCpuS: 2,
    clientCpuS: [0.1, 1, 1], serverUtil: 0.67, clientUtilMax: 0.33, otherUtil: 0, bound: 'none', perSec: 1e6, perServerCpuS: 1.5e6,
    latency: { count: 100, p50Us: 10_000, p99Us: 20_000, p999Us: 30_000, maxUs: 40_000 }, extra: {},
  };
  const two: Sample = {
    ...base, variant: '2 nodes on Redis', perServerCpuS: 1.2e6, latency: { ...base.latency!, p99Us: 25_000 },
    extra: { redisUtil: 0.05, perTotalCpuS: 1.1e6, perServerCpuVsOneNode: 0.8, perTotalCpuVsOneNode: 0.73, redisCommandsPerEvent: 1,
      redisCallsPerEvent: 8, redisCpuUsPerEvent: 150, node0P99Us: 24_000, otherNodesP99Us: 25_000, p99AddedUs: 5000, restUtil: 0.03,
      aboveRestVsOneNode: 0.82 },
  };
  const table = rowsTables(rows([base, two]));
  assert.match(table, /### S8 cross-node fan-out/);
  assert.match(table, /\| 2 nodes on Redis \| Sluice \(2 workers\) \| 1\.00M \| 67% \| 5% \| 1\.20M \| 0\.80x \| 3% \| 0\.82x \| 1\.10M \| 0\.73x \| 1\.000 \| 8\.0 \| 150us \| 10ms \| 25ms \| 24ms \/ 25ms \| \+5\.0ms \|/);
  assert.match(table, /\| 1 node, embedded \| Sluice \(2 workers\) \| 1\.00M \| 67% \| - \| 1\.50M \| - \| - \| - \| - \| - \|/);
  assert.deepEqual(ratios([base, two]), []);
});

test('S8 with replicas: their CPU beside the master\'s, the publish ack; the goals read the plain two nodes, with 2 and with 1 shard each', () => {
  const base: Sample = {
    scenario: 'S8', variant: '1 node, embedded', target: 'sluice', repeat: 0, ok: true, count: 3_000_000, wallS: 3, serverCpuS: 2,
    clientCpuS: [0.1, 1, 1], serverUtil: 0.67, clientUtilMax: 0.33, otherUtil: 0, bound: 'none', perSec: 1e6, perServerCpuS: 1.5e6,
    latency: { count: 100, p50Us: 10_000, p99Us: 20_000, p999Us: 30_000, maxUs: 40_000 }, extra: { ackP50Us: 1000, ackP99Us: 2000 },
  };
  const two: Sample = { ...base, variant: '2 nodes on Redis', perServerCpuS: 1.4e6, extra: { redisUtil: 0.05, perServerCpuVsOneNode: 0.93, ackP50Us: 3000, ackP99Us: 6000 } };
  const acked: Sample = {
    ...base, variant: '2 nodes on Redis, WS_REDIS_ACK_REPLICAS=1', perServerCpuS: 0.9e6,
    extra: { redisUtil: 0.06, replicaUtil: 0.02, perServerCpuVsOneNode: 0.6, redisCpuUsPerEvent: 150, replicaCpuUsPerEvent: 40, ackP50Us: 5000, ackP99Us: 12_000 },
  };
  const table = rowsTables(rows([base, two, acked]));
  assert.match(table, /\| 2 nodes on Redis, WS_REDIS_ACK_REPLICAS=1 \| Sluice \(2 workers\) \| 1\.00M \| 67% \| 6% \+ 2% \| 900k \| 0\.60x \|/);
  assert.match(table, /\| 150us \+ 40us \|.*\| 5\.0ms \/ 12ms \|/);
  assert.match(table, /\| 2 nodes on Redis \| Sluice \(2 workers\) \| 1\.00M \| 67% \| 5% \| 1\.40M \| 0\.93x \|.*\| 3\.0ms \/ 6\.0ms \|/);
  assert.match(table, /\| 1 node, embedded \|.*\| 1\.0ms \/ 2\.0ms \|/);
  const one: Sample = { ...base, variant: '2 nodes on Redis, WS_WORKERS=1 each', perServerCpuS: 1.3e6, extra: { perServerCpuVsOneNode: 0.87 } };
  const goal = checkGoals(rows([base, two, acked, one]), [], [base, two, acked, one]).filter((g) => g.goal.scenario === 'S8');
  assert.deepEqual(goal.map((g) => [g.goal.text.slice(0, 34), g.measured, g.met]), [
    ['S8 2 nodes on Redis, 1 shard each:', 0.87, false],
    ['S8 2 nodes on Redis, 2 shards each', 0.93, true],
  ]);
});
