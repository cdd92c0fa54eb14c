/**
 * The test kit's redis-server starts: a port taken between `freePort` and the
 * bind is reported at once with redis-server's own reason (not after the
 * 5 s wait), and a Cluster's bus ports are chosen free rather than assumed
 * at port + 10000. Its failover topologies: a Sentinel group and a Cluster
 * with replicas each replace a killed master by a replica that holds the
 * writes acknowledged with WAIT, and take the killed one back as a replica.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { describe, test } from 'node:test';
import calculateSlot from 'cluster-key-slot';
import { Redis } from 'ioredis';
import { freePort, type RedisServer, startRedis, startRedisCluster, startRedisSentinel } from '../src/testing.ts';

async function listen(port: number): Promise<Server> {
  const srv = createServer();
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, '127.0.0.1', () => resolve());
  });
  return srv;
}

/** The pids of this process's children, from /proc (no `ps` needed). */
function childPids(): number[] {
  return readdirSync('/proc').filter((d) => /^\d+$/.test(d)).map(Number).filter((pid) => {
    try {
      // <pid> (<comm>) <state> <ppid> ...: comm may hold spaces, so read after its ')'.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === process.pid;
    } catch {
      return false; // it exited between the listing and the read
    }
  });
}

/**
 * SET `key` on `server` and WAIT for `replicas` acknowledgements on the same
 * connection: WAIT counts the replicas that have this connection's last
 * write, so on a connection that wrote nothing (a separate `redis-cli WAIT`)
 * it would count every replica at once, whatever they hold. Returns WAIT's count.
 */
async function setAndWait(server: RedisServer, key: string, value: string, replicas: number): Promise<number> {
  const client = new Redis(server.url);
  try {
    await client.set(key, value);
    return Number(await client.call('WAIT', replicas, 1000));
  } finally {
    client.disconnect();
  }
}

/** Until `server` says it replicates `master` with its link up; rejects after `ms` with what it said last. */
async function waitReplicaOf(server: RedisServer, master: RedisServer, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  let info = '';
  while (Date.now() < deadline) {
    info = await server.cli('info', 'replication');
    if (/role:slave\r?\n/.test(info) && new RegExp(`master_port:${master.port}\\r?\\n`).test(info) && info.includes('master_link_status:up')) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`port ${server.port} did not become a linked replica of ${master.port} in ${ms} ms: ${info.replace(/\r?\n/g, ' ')}`);
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

  test('a Sentinel group: a killed master is replaced by a replica holding the acknowledged write; restarted, it rejoins as a replica', async (t) => {
    const group = await startRedisSentinel();
    try {
      assert.equal(group.servers.length, 3);
      assert.equal(group.sentinels.length, 3);
      assert.equal(group.sentinelsSpec, group.sentinels.map((s) => `127.0.0.1:${s.port}`).join(','));
      const first = await group.master();
      assert.equal(first, group.servers[0]);
      // Both replicas acknowledge: whichever Sentinel promotes holds the write.
      assert.equal(await setAndWait(first, 'acked', 'before', 2), 2);

      const t0 = Date.now();
      const killed = await group.killMaster();
      assert.equal(killed, first);
      // A bound, not a measure of speed: down-after 2 s, then the vote;
      // a split vote is tried again after 2 × failover-timeout (6 s).
      const promoted = await group.waitFailover(killed.port, 15_000);
      t.diagnostic(`Sentinel failover: ${Date.now() - t0} ms after the SIGKILL`);
      assert.notEqual(promoted, killed);
      assert.equal(await group.master(), promoted);
      assert.equal((await promoted.cli('set', 'after', 'failover')).trim(), 'OK');
      assert.equal((await promoted.cli('get', 'acked')).trim(), 'before');

      // Back empty and a master by its command line; a sentinel makes it a
      // replica of the new master only once it has reported that role for
      // 8 s (4 hello periods) and at its next INFO, every 10 s: about 10 s.
      const t1 = Date.now();
      await killed.start();
      await waitReplicaOf(killed, promoted, 20_000);
      t.diagnostic(`the restarted master became a replica ${Date.now() - t1} ms after its start`);
      assert.equal((await killed.cli('get', 'acked')).trim(), 'before');
      assert.equal((await killed.cli('get', 'after')).trim(), 'failover');
    } finally {
      await group.stop();
    }
  });

  test('a Sentinel group that fails to start stops the servers it started and says which process failed, and why', async () => {
    const before = childPids();
    // Sentinel refuses a down-after of 0 in its configuration file, after the master and replicas started.
    await assert.rejects(startRedisSentinel({ downAfterMs: 0 }), (e: Error) => {
      assert.match(e.message, /redis-sentinel on port \d+ exited \(1\) before it listened/);
      assert.match(e.message, /negative or zero time parameter/);
      return true;
    });
    assert.deepEqual(childPids(), before);
  });

  test('a Cluster with replicas: a killed master\'s replica takes its slots, with the keys written there before', async (t) => {
    const cluster = await startRedisCluster({ replicas: 1 });
    try {
      assert.equal(cluster.nodes.length, 6);
      const masters = await cluster.masters();
      assert.equal(masters.length, 3);
      for (const m of masters) assert.equal((await cluster.replicasOf(m)).length, 1);
      const victim = masters[0]!;
      const [replica] = await cluster.replicasOf(victim);
      // A key of the victim's slots: masters() sorts by first slot, so its first range starts at 0.
      const ranges = (await victim.cli('cluster', 'nodes')).split('\n').find((l) => l.includes('myself'))!.trim().split(' ').slice(8);
      const last = Number(ranges[0]!.split('-')[1]);
      let key = '';
      for (let i = 0; key === ''; i++) if (calculateSlot(`moved-${i}`) <= last) key = `moved-${i}`;
      assert.equal(await setAndWait(victim, key, 'before', 1), 1);

      const t0 = Date.now();
      await victim.stop();
      // A bound, not a measure of speed: node timeout 2 s, then the election.
      const promoted = await cluster.waitFailover(victim.port, 15_000);
      t.diagnostic(`Cluster failover: ${Date.now() - t0} ms after the SIGKILL`);
      assert.equal(promoted, replica);
      assert.equal((await promoted.cli('get', key)).trim(), 'before');
      for (const n of cluster.nodes.filter((n) => n !== victim)) assert.match(await n.cli('cluster', 'info'), /cluster_state:ok/);
      assert.deepEqual((await cluster.masters()).map((m) => m.port), [promoted, ...masters.slice(1)].map((m) => m.port));

      // Restarted with its nodes.conf, it learns its slots went to a newer
      // epoch and becomes the replica of the node that took them.
      await victim.start();
      await waitReplicaOf(victim, promoted, 10_000);
      // A Cluster replica answers reads of its master's slots with MOVED, unless the connection says READONLY.
      const reader = new Redis(victim.url);
      try {
        await reader.call('READONLY');
        assert.equal(await reader.get(key), 'before');
      } finally {
        reader.disconnect();
      }
    } finally {
      await cluster.stop();
    }
  });
});
