// Presence on one node of two shards (PROTOCOL.md, additions of 2026-12):
// presence_state after the join's reply, batched presence_diff by user (not
// by connection), the presence frame, GET /v1/presence and their refusals.
// Users' sockets are spread over both shards, so a topic's table (at its
// owner shard) and the replicas of the other shard are both in play.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, eventually, type Frame, type Gateway, metricValue, startGateway } from './harness.ts';
import { bearer, SECRET, token } from './tokens.ts';

const DIFF_MS = 150;

type Users = Record<string, { connections: number }>;
interface Diff { joins: Users; leaves: Record<string, object> }
interface State { users: Users; count: number; truncated?: boolean }

async function connectAs(gw: Gateway, sub: string, topics = ['room:*', 'plain:*']): Promise<Client> {
  return Client.connect(gw.url(), bearer(await token({ sub, topics })));
}

/** Joins and returns the presence_state that follows the reply (and checks that it follows it). */
async function joinPresence(c: Client, topic: string): Promise<State & { topic: string }> {
  const r = await c.request({ type: 'join', topic });
  assert.equal(r.type === 'reply' ? r.status : r.type, 'ok');
  const i = c.frames.findIndex((f) => f.type === 'presence_state');
  const st = (await c.next((f) => f.type === 'presence_state' && (f as { topic?: string }).topic === topic)) as unknown as State & { topic: string };
  assert.ok(i <= 0, 'presence_state comes right after the reply');
  return st;
}

const diffsOf = (c: Client, topic: string): { joins: Users; leaves: Record<string, object> }[] => {
  const out: { joins: Users; leaves: Record<string, object> }[] = [];
  for (let i = 0; i < c.frames.length;) {
    const f = c.frames[i] as Frame & { topic?: string };
    if (f.type === 'presence_diff' && f.topic === topic) {
      out.push(f as unknown as { joins: Users; leaves: Record<string, object> });
      c.frames.splice(i, 1);
    } else i++;
  }
  return out;
};

/** Applies diffs to a set of users, as the SDK does. */
function apply(users: Set<string>, diffs: { joins: Users; leaves: Record<string, object> }[]): Set<string> {
  for (const d of diffs) {
    for (const u of Object.keys(d.joins)) users.add(u);
    for (const u of Object.keys(d.leaves)) users.delete(u);
  }
  return users;
}

describe('presence on one node of two shards', () => {
  let gw: Gateway;
  const open: Client[] = [];
  before(async () => {
    gw = await startGateway({ WS_WORKERS: '2', WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_PRESENCE_TOPICS: 'room:*,lobby',
      WS_PRESENCE_DIFF_MS: String(DIFF_MS), WS_PRESENCE_MAX_USERS: '5', WS_MAX_MESSAGES: '100000' });
  });
  after(async () => {
    for (const c of open) c.close();
    assert.equal(await gw.stop(), 0);
  });
  const connect = async (sub: string, topics?: string[]): Promise<Client> => {
    const c = await connectAs(gw, sub, topics);
    open.push(c);
    return c;
  };

  test('the first user sees itself; a second user on the other shard sees both, and the first gets one diff joining it', async () => {
    const alice = await connect('alice');
    const first = await joinPresence(alice, 'room:a');
    assert.deepEqual(first, { type: 'presence_state', topic: 'room:a', users: { alice: { connections: 1 } }, count: 1 });
    // bob on the other shard than alice.
    let bob = await connect('bob');
    while (bob.shard === alice.shard) {
      bob.close();
      bob = await connect('bob');
    }
    // alice's own join reaches the table and comes back in a flush first (duplicates of what she saw are harmless).
    await alice.next((f) => f.type === 'presence_diff' && (f as unknown as Diff).joins.alice !== undefined);
    const st = await joinPresence(bob, 'room:a');
    assert.deepEqual(Object.keys(st.users).sort(), ['alice', 'bob']);
    assert.equal(st.count, 2);
    const d = await alice.next((f) => f.type === 'presence_diff');
    assert.deepEqual(d, { type: 'presence_diff', topic: 'room:a', joins: { bob: { connections: 1 } }, leaves: {} }, 'the next diff is bob\'s');
  });

  test('a user\'s second socket is not a diff; its last one leaving is', async () => {
    const watcher = await connect('wendy');
    await joinPresence(watcher, 'room:b');
    const c1 = await connect('carl');
    const c2 = await connect('carl');
    await joinPresence(c1, 'room:b');
    await watcher.next((f) => f.type === 'presence_diff' && JSON.stringify(f).includes('carl'));
    // A diff of wendy's own join may have come in an earlier flush than carl's: nothing after carl's is hers.
    diffsOf(watcher, 'room:b');
    await joinPresence(c2, 'room:b');
    const viaAdmin = async (): Promise<State> => (await gw.adminFetch('/v1/presence?topic=room:b')).json() as Promise<State>;
    await eventually(async () => (await viaAdmin()).users.carl?.connections === 2);
    await new Promise((r) => setTimeout(r, DIFF_MS * 3));
    assert.deepEqual(diffsOf(watcher, 'room:b'), [], 'a second connection of carl is no diff');
    assert.equal((await c1.request({ type: 'leave', topic: 'room:b' })).type, 'reply');
    await new Promise((r) => setTimeout(r, DIFF_MS * 3));
    assert.deepEqual(diffsOf(watcher, 'room:b'), [], 'carl still has a socket there');
    c2.close();
    const d = await watcher.next((f) => f.type === 'presence_diff');
    assert.deepEqual(d, { type: 'presence_diff', topic: 'room:b', joins: {}, leaves: { carl: {} } });
    assert.deepEqual((await viaAdmin()).users, { wendy: { connections: 1 } });
  });

  test('a burst of joins comes as at most one diff per interval per socket, and the state it builds is exact', async () => {
    const watcher = await connect('watcher');
    await joinPresence(watcher, 'room:c');
    await watcher.next((f) => f.type === 'presence_diff' && (f as unknown as Diff).joins.watcher !== undefined);
    const t0 = Date.now();
    const joiners = await Promise.all(Array.from({ length: 12 }, (_, i) => connect(`j${i}`)));
    await Promise.all(joiners.map((c) => c.request({ type: 'join', topic: 'room:c' })));
    for (const c of joiners.slice(0, 4)) c.close();
    // Diffs are applied as they come until the watcher's view holds the 9 users present.
    const users = new Set(['watcher']);
    const expected = ['watcher', ...joiners.slice(4).map((_, i) => `j${i + 4}`)].sort().join();
    let diffs = 0;
    while ([...users].sort().join() !== expected) {
      apply(users, [(await watcher.next((f) => f.type === 'presence_diff', 5000)) as unknown as Diff]);
      diffs++;
    }
    const elapsed = Date.now() - t0;
    assert.ok(diffs <= Math.ceil(elapsed / DIFF_MS) + 1, `${diffs} diffs in ${elapsed} ms`);
  });

  test('the presence frame answers the data; a topic without presence is bad_request, one the token may not join forbidden', async () => {
    const c = await connect('pam', ['room:*', 'plain:*']);
    await joinPresence(c, 'room:d');
    const r = await c.request({ type: 'presence', topic: 'room:d' });
    assert.deepEqual(r, { type: 'reply', ref: (r as { ref: string }).ref, status: 'ok', data: { users: { pam: { connections: 1 } }, count: 1 } });
    // Not joined: asked of the topic's owner.
    const other = await c.request({ type: 'presence', topic: 'room:a' });
    assert.equal(other.type === 'reply' ? other.status : '', 'ok');
    assert.ok(((other as unknown as { data: State }).data.count) >= 2);
    const plain = await c.request({ type: 'presence', topic: 'plain:1' });
    assert.deepEqual([plain.type === 'reply' ? plain.status : '', (plain as { reason?: string }).reason], ['error', 'bad_request']);
    const lobby = await c.request({ type: 'presence', topic: 'lobby' });
    assert.deepEqual([(lobby as { reason?: string }).reason], ['forbidden']);
    const bad = await c.request({ type: 'presence', topic: 'no spaces' });
    assert.equal((bad as { reason?: string }).reason, 'bad_request');
    assert.equal((await c.request({ type: 'ping' })).type, 'pong', 'the socket stays usable');
  });

  test('a join of a topic without presence gets no presence frames', async () => {
    const c = await connect('quinn');
    assert.equal((await c.request({ type: 'join', topic: 'plain:x' })).type, 'reply');
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    assert.equal(c.frames.filter((f) => f.type.startsWith('presence')).length, 0);
  });

  test('past WS_PRESENCE_MAX_USERS the list is cut, count is the full number and truncated says so', async () => {
    const many = await Promise.all(Array.from({ length: 7 }, (_, i) => connect(`t${i}`)));
    for (const c of many) await c.request({ type: 'join', topic: 'room:t' });
    await eventually(async () => ((await gw.adminFetch('/v1/presence?topic=room:t').then((r) => r.json())) as State).count === 7);
    const admin = (await (await gw.adminFetch('/v1/presence?topic=room:t')).json()) as State;
    assert.equal(Object.keys(admin.users).length, 5);
    assert.equal(admin.truncated, true);
    // The replicas have the 7 once a joined socket's presence frame (answered from its shard's replica) counts them.
    await eventually(async () => ((await many[0]!.request({ type: 'presence', topic: 'room:t' })) as unknown as { data: State }).data.count === 7);
    const late = await connect('late');
    const st = await joinPresence(late, 'room:t');
    assert.equal(st.count, 8);
    assert.equal(st.truncated, true);
    assert.ok(st.users.late !== undefined, 'the socket\'s own user is listed');
    assert.equal(Object.keys(st.users).length, 5);
  });

  test('GET /v1/presence refuses bad queries with a 400 and a message; without the token 401', async () => {
    const cases: [string, RegExp][] = [
      ['/v1/presence', /topic must be given/],
      ['/v1/presence?topic=plain:1', /does not keep presence/],
      ['/v1/presence?topic=room:1&x=1', /unknown query parameter "x"; \/v1\/presence takes tenant, topic/],
      ['/v1/presence?topic=room:1&topic=room:2', /given twice/],
      ['/v1/presence?topic=room:1&tenant=a%2Fb', /tenant must match/],
      ['/v1/presence?topic=bad%20topic', /topic must be given and match/],
    ];
    for (const [path, message] of cases) {
      const res = await gw.adminFetch(path);
      assert.equal(res.status, 400, path);
      const body = (await res.json()) as { reason: string; message: string };
      assert.equal(body.reason, 'bad_request');
      assert.match(body.message, message);
    }
    assert.equal((await fetch(gw.admin('/v1/presence?topic=room:1'))).status, 401);
    const empty = await gw.adminFetch('/v1/presence?topic=room:nobody');
    assert.equal(empty.status, 200);
    assert.deepEqual(await empty.json(), { users: {}, count: 0 });
  });

  test('metrics count members, flushes and diffs', async () => {
    const m = await gw.metrics();
    assert.ok((await metricValue(gw, 'sluice_presence_members')) > 0, 'members');
    assert.ok((await metricValue(gw, 'sluice_presence_diffs_total')) > 0);
    assert.ok((await metricValue(gw, 'sluice_presence_flushes_total')) > 0);
    assert.match(m, /sluice_presence_diff_deliveries_total/);
  });
});
