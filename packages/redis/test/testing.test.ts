/**
 * The test kit's redis-server starts: a port taken between `freePort` and the
 * bind is reported at once with redis-server's own reason (not after the
 * 5 s wait), and a Cluster's bus ports are chosen free rather than assumed
 * at port + 10000.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { describe, test } from 'node:test';
import { freePort, startRedis, startRedisCluster } from '../src/testing.ts';

async function listen(port: number): Promise<Server> {
  const srv = createServer();
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, '127.0.0.1', () => resolve());
  });
  return srv;
}

describe('redis test kit', () => {
  test('a port already in use fails the start with redis-server reason, before the wait ends', async () => {
    const port = await freePort();
    const holder = await listen(port);
    try {
      const t0 = Date.now();
      await assert.rejects(startRedis({ port }), (e: Error) => {
        assert.match(e.message, new RegExp(`redis-server on port ${port} exited`));
        assert.match(e.message, /in use/i);
        return true;
      });
      // The exit ended the wait: it did not run out its 5000 ms.
      assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
    } finally {
      holder.close();
    }
  });

  test('a Cluster node does not use port + 10000 for its bus: a listener there does not stop the start', async () => {
    const cluster = await startRedisCluster();
    try {
      const busPorts = await Promise.all(cluster.nodes.map(async (n) => {
        const line = (await n.cli('config', 'get', 'cluster-port')).trim().split('\n');
        return Number(line[1]);
      }));
      for (const [i, bus] of busPorts.entries()) {
        assert.ok(bus > 0, `node ${i} has a bus port`);
        assert.notEqual(bus, cluster.ports[i]! + 10000);
      }
      assert.equal(new Set(busPorts).size, 3);
      assert.match(await cluster.nodes[0]!.cli('cluster', 'info'), /cluster_state:ok/);
    } finally {
      await cluster.stop();
    }
  });
});
