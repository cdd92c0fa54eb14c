// Presence across nodes on one real Redis (PROTOCOL.md, additions of 2026-12):
// a socket's presence_state lists the users of every node; joins and leaves
// on one node reach the others as batched diffs; a node that is SIGKILLed
// takes its users out within WS_PRESENCE_TTL_MS; a node that drains takes
// its users out as their sockets close; after Redis loses everything (a
// restart without persistence) the nodes say their state again; and Redis
// calls grow with batches, not joins.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisCluster, type RedisServer, startRedis, startRedisCluster } from '@sluice/redis/testing';
import { Client, eventually, type Gateway, metricValue, startGateway } from './harness.ts';
import { bearer, SECRET, token } from './tokens.ts';

const DIFF_MS = 100;
const TTL_MS = 3000;

type Users = Record<string, { connections: number }>;
interface State { users: Users; count: number }
interface Diff { joins: Users; leaves: Record<string, object> }

async function connectAs(gw: Gateway, sub: string): Promise<Client> {
  return Client.connect(gw.url(), bearer(await token({ sub, topics: ['*'] })));
}

async function joinPresence(c: Client, topic: string): Promise<State> {
  const r = await c.request({ type: 'join', topic }, 10_000);
  assert.equal(r.type === 'reply' ? r.status : r.type, 'ok');
  return (await c.next((f) => f.type === 'presence_state')) as unknown as State;
}

async function presenceOf(gw: Gateway, topic: string): Promise<State> {
  const res = await gw.adminFetch(`/v1/presence?topic=${topic}`);
  assert.equal(res.status, 200);
  return (await res.json()) as State;
}

/** Waits for a diff on `c` that makes `pred` true of the users it has seen, applying every diff on the way. */
async function until(c: Client, users: Set<string>, pred: (u: Set<string>) => boolean, ms: number): Promise<number> {
  const t0 = Date.now();
  while (!pred(users)) {
    const d = (await c.next((f) => f.type === 'presence_diff', ms - (Date.now() - t0))) as unknown as Diff;
    for (const u of Object.keys(d.joins)) users.add(u);
    for (const u of Object.keys(d.leaves)) users.delete(u);
  }
  return Date.now() - t0;
}

describe('presence across three nodes on one Redis', () => {
  let redis: RedisServer;
  let env: Record<string, string>;
  let a: Gateway;
  let b: Gateway;
  const open: Client[] = [];
  const connect = async (gw: Gateway, sub: string): Promise<Client> => {
    const c = await connectAs(gw, sub);
    open.push(c);
    return c;
  };
  before(async () => {
    redis = await startRedis();
    env = { REDIS_URL: redis.url, WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_PRESENCE_TOPICS: 'room:*', WS_PRESENCE_DIFF_MS: String(DIFF_MS),
      WS_PRESENCE_TTL_MS: String(TTL_MS), WS_MAX_MESSAGES: '100000' };
    [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
    await eventually(async () => Number(await redis.cli('ZCARD', 'sluice:nodes')) === 2, 10_000);
    await eventually(async () => (await metricValue(a, 'sluice_cluster_nodes')) === 2 && (await metricValue(b, 'sluice_cluster_nodes')) === 2, 5000);
  });
  after(async () => {
    for (const c of open) c.close();
    for (const gw of [a, b]) if (gw.alive) assert.equal(await gw.stop(), 0);
    await redis.stop();
  });

  test("a join on node B lists node A's users at once; A's socket gets B's user as a diff", async () => {
    const alice = await connect(a, 'alice');
    assert.deepEqual((await joinPresence(alice, 'room:x')).users, { alice: { connections: 1 } });
    // alice's entry is in Redis once A flushed.
    await eventually(async () => (await redis.cli('HGET', `sluice:p:{default/room:x}:${await nodeOf(a)}`, 'alice')).trim() === '1', 3000);
    const bob = await connect(b, 'bob');
    const st = await joinPresence(bob, 'room:x');
    assert.deepEqual(Object.keys(st.users).sort(), ['alice', 'bob']);
    const seen = new Set(['alice']);
    await until(alice, seen, (u) => u.has('bob'), 3000);
    for (const gw of [a, b]) assert.deepEqual(Object.keys((await presenceOf(gw, 'room:x')).users).sort(), ['alice', 'bob']);
  });

  test('a node whose last socket left a topic and that joins it again reads the other nodes again', async () => {
    const ursula = await connect(a, 'ursula');
    await joinPresence(ursula, 'room:u');
    await eventually(async () => Object.keys((await presenceOf(b, 'room:u')).users).join() === 'ursula', 3000);
    const first = await connectAs(b, 'brief');
    assert.deepEqual(Object.keys((await joinPresence(first, 'room:u')).users).sort(), ['brief', 'ursula']);
    // B's last socket on room:u goes (B stops following the topic) and another joins at once, within one flush.
    first.close();
    // Its leave reached A: B's table had it, so B's shard had already let go of the topic.
    await eventually(async () => Object.keys((await presenceOf(a, 'room:u')).users).join() === 'ursula', 3000);
    const again = await connect(b, 'brief');
    const seen = new Set(Object.keys((await joinPresence(again, 'room:u')).users));
    // Its state or the flush its first read ends with lists ursula, and nothing takes her away.
    if (!seen.has('ursula')) await until(again, seen, (u) => u.has('ursula'), 3000);
    await new Promise((r) => setTimeout(r, DIFF_MS * 4));
    for (const d of again.frames.filter((f) => f.type === 'presence_diff')) assert.equal((d as unknown as Diff).leaves.ursula, undefined);
    assert.deepEqual(Object.keys((await presenceOf(b, 'room:u')).users).sort(), ['brief', 'ursula'], 'B follows A\'s users again');
  });

  test('garbage on a presence channel is ignored: no shard goes down, presence goes on', async () => {
    const w = await connect(a, 'garb-w');
    await joinPresence(w, 'room:g');
    for (const m of ['', 'x', 'n\x1f1\x1f0\x1fu\x1fnot-a-number', 'n\x1f1\x1f1\x1fu\x1f-5', 'n\x1fNaN\x1f0', 'n\x1f2\x1f0\x1fu\x1f1e3']) {
      await redis.cli('PUBLISH', 'sluice:pc:{default/room:g}', m);
    }
    const g = await connect(b, 'garb-g');
    const seen = new Set(['garb-w']);
    await joinPresence(g, 'room:g');
    await until(w, seen, (u) => u.has('garb-g'), 3000);
    for (const gw of [a, b]) assert.equal(await metricValue(gw, 'sluice_shard_restarts_total'), 0);
  });

  test('a node just started sees the others at once, not a quarter of the TTL later', async () => {
    // A TTL of 60 s renews every 15 s: only the renewal at the connection's ready makes this in time.
    const c = await startGateway({ ...env, WS_PRESENCE_TTL_MS: '60000' });
    try {
      const t0 = Date.now();
      await eventually(async () => (await metricValue(c, 'sluice_cluster_nodes')) === 3, 5000);
      assert.ok(Date.now() - t0 < 5000);
      const late = await connectAs(c, 'late-c');
      assert.ok((await joinPresence(late, 'room:x')).count >= 3, 'its first presence_state counts the other nodes\' users');
      late.close();
    } finally {
      assert.equal(await c.stop(), 0);
    }
  });

  test('a node without sockets on the topic answers GET /v1/presence from Redis', async () => {
    const c = await startGateway(env);
    try {
      await eventually(async () => (await metricValue(c, 'sluice_cluster_nodes')) === 3, 5000);
      assert.deepEqual(Object.keys((await presenceOf(c, 'room:x')).users).sort(), ['alice', 'bob']);
    } finally {
      assert.equal(await c.stop(), 0);
    }
  });

  test('joins of many users on one node cost one Redis write per flush, not per join', async () => {
    const watcher = await connect(b, 'watcher-w');
    await joinPresence(watcher, 'room:w');
    const writes = async (): Promise<number> => metricValue(a, 'sluice_presence_redis_calls_total', '{op="write"}');
    const before = await writes();
    const t0 = Date.now();
    const many = await Promise.all(Array.from({ length: 40 }, (_, i) => connect(a, `w${i}`)));
    await Promise.all(many.map((c) => c.request({ type: 'join', topic: 'room:w' })));
    const seen = new Set(['watcher-w']);
    await until(watcher, seen, (u) => u.size === 41, 5000);
    const elapsed = Date.now() - t0;
    const spent = (await writes()) - before;
    assert.ok(spent >= 1 && spent <= Math.ceil(elapsed / DIFF_MS) + 2, `${spent} writes for 40 joins in ${elapsed} ms`);
    for (const c of many) c.close();
    await until(watcher, seen, (u) => u.size === 1, 5000);
  });

  test('a node SIGKILLed takes its users out within WS_PRESENCE_TTL_MS', async () => {
    const c = await startGateway(env);
    await eventually(async () => (await metricValue(a, 'sluice_cluster_nodes')) === 3, 5000);
    const carol = await connectAs(c, 'carol');
    await joinPresence(carol, 'room:k');
    const watcher = await connect(a, 'watcher-k');
    const seen = new Set(Object.keys((await joinPresence(watcher, 'room:k')).users));
    if (!seen.has('carol')) await until(watcher, seen, (u) => u.has('carol'), 3000);
    const killedAt = Date.now();
    c.signal('SIGKILL');
    await c.exited;
    const took = await until(watcher, seen, (u) => !u.has('carol'), TTL_MS + 2000);
    assert.ok(took <= TTL_MS + 500, `carol left ${took} ms after the kill`);
    // Node B reads Redis for a topic it does not watch: its own view of the live nodes is renewed every TTL/4, so it may
    // lag A's by that much, and is still within the TTL.
    await eventually(async () => Object.keys((await presenceOf(b, 'room:k')).users).join() === 'watcher-k', TTL_MS + 2000);
    assert.ok(Date.now() - killedAt <= TTL_MS + 500, `B still listed carol ${Date.now() - killedAt} ms after the kill`);
  });

  test('after Redis lost everything (a restart without persistence) the nodes say their state again', async () => {
    const dave = await connect(a, 'dave');
    await joinPresence(dave, 'room:r');
    const erin = await connect(b, 'erin');
    await joinPresence(erin, 'room:r');
    await redis.stop();
    await redis.start();
    await eventually(async () => Number(await redis.cli('ZCARD', 'sluice:nodes')) === 2, 10_000);
    // A third node reads only Redis: both nodes' entries are back.
    const c = await startGateway(env);
    try {
      await eventually(async () => (await metricValue(c, 'sluice_cluster_nodes')) === 3, 5000);
      await eventually(async () => Object.keys((await presenceOf(c, 'room:r')).users).sort().join() === 'dave,erin', 5000);
      const frank = await connectAs(c, 'frank');
      assert.deepEqual(Object.keys((await joinPresence(frank, 'room:r')).users).sort(), ['dave', 'erin', 'frank']);
      frank.close();
    } finally {
      assert.equal(await c.stop(), 0);
    }
  });

  test("a node that drains takes its users out as their sockets close", async () => {
    const c = await startGateway({ ...env, WS_DRAIN_DELAY_MS: '0', WS_DRAIN_RATE: '1000' });
    await eventually(async () => (await metricValue(a, 'sluice_cluster_nodes')) >= 3, 5000);
    const gone = await connectAs(c, 'gina');
    await joinPresence(gone, 'room:d');
    const watcher = await connect(a, 'watcher-d');
    const seen = new Set(Object.keys((await joinPresence(watcher, 'room:d')).users));
    if (!seen.has('gina')) await until(watcher, seen, (u) => u.has('gina'), 3000);
    const t0 = Date.now();
    c.signal('SIGTERM');
    await until(watcher, seen, (u) => !u.has('gina'), TTL_MS);
    assert.ok(Date.now() - t0 < TTL_MS / 2, 'before any lease could end: the drain said so');
    assert.equal(await c.exited, 0);
  });
});

describe('presence and publishes to users on a Redis Cluster (sharded pub/sub)', () => {
  let cluster: RedisCluster;
  let a: Gateway;
  let b: Gateway;
  before(async () => {
    cluster = await startRedisCluster();
    // Both nodes are up throughout, so the publish to users waits for B's answer (milliseconds) however long B is
    // descheduled: with the default 1 s window one CI run counted bob offline (an answer later than 1 s is dropped).
    const env = { REDIS_URL: cluster.url, REDIS_CLUSTER: '1', WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_PRESENCE_TOPICS: 'room:*',
      WS_PRESENCE_DIFF_MS: String(DIFF_MS), WS_PRESENCE_TTL_MS: String(TTL_MS), WS_NODE_ANSWER_MS: '10000' };
    [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
    await eventually(async () => (await metricValue(a, 'sluice_cluster_nodes')) === 2 && (await metricValue(b, 'sluice_cluster_nodes')) === 2, 10_000);
  });
  after(async () => {
    for (const gw of [a, b]) if (gw.alive) assert.equal(await gw.stop(), 0);
    await cluster.stop();
  });

  test('presence over two nodes, on several topics (several slots), and a publish to users reaching both', async () => {
    const topics = ['room:c1', 'room:c2', 'room:c3', 'room:c4'];
    const alice = await connectAs(a, 'alice');
    const bob = await connectAs(b, 'bob');
    for (const t of topics) await joinPresence(alice, t);
    for (const t of topics) {
      // bob's first join on each topic reads node A's entries (they may still be on their way: then a diff brings them).
      const st = await joinPresence(bob, t);
      const seen = new Set(Object.keys(st.users));
      if (!seen.has('alice')) await until(bob, seen, (u) => u.has('alice'), 3000);
    }
    for (const t of topics) {
      await eventually(async () => Object.keys((await presenceOf(a, t)).users).sort().join() === 'alice,bob', 3000);
    }
    const sentAt = Date.now();
    const res = await a.adminPost('/v1/publish', { users: ['alice', 'bob', 'nobody'], data: 'both' });
    assert.deepEqual(await res.json(), { online: ['alice', 'bob'] }, `published at ${new Date(sentAt).toISOString()}; the nodes logged:\n${said(a, b)}`);
    for (const c of [alice, bob]) assert.equal((await c.next((f) => f.type === 'event' && f.topic === '$user')).data, 'both');
    bob.close();
    for (const t of topics) await eventually(async () => Object.keys((await presenceOf(a, t)).users).join() === 'alice', 3000);
    alice.close();
  });
});

/** What the nodes logged, a line each (their start-up config left out), for a failure's message. */
function said(...gws: Gateway[]): string {
  return gws.map((gw, i) => `node ${i}: ` + gw.logs.filter((l) => l['config'] === undefined)
    .map(({ time, level, msg, pid: _p, role: _r, ...rest }) => `${String(time)} ${String(level)} ${String(msg)} ${JSON.stringify(rest).slice(0, 300)}`).join(' | ')).join('\n');
}

/** A node's id: its connection ids begin with it. */
async function nodeOf(gw: Gateway): Promise<string> {
  const c = await Client.connect(gw.url(), bearer(await token({ sub: 'probe' })));
  c.close();
  return c.welcome.connectionId.split('.')[0]!;
}
