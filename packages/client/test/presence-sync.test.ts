/**
 * Presence and user-addressed events (2026-12) on the in-process fake
 * gateway and its virtual clock: the state a subscription keeps (replaced by
 * `presence_state`, changed by `presence_diff`), its resume after a
 * reconnect, a truncated list, `fetchPresence()` and its refusals, and
 * `$user` events, which reach `client.on('user-event')` and no
 * subscription. The pure functions of presence.ts are checked against a
 * model of the server's users, over random joins and leaves.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { encodeReplyError, encodeReplyOk, type PresenceData, type PresenceFrame } from '@sluice/protocol';
import { applyDiff, replaceState } from '../src/presence.ts';
import type { PresenceEvent, SluiceClient, SluiceError, SluiceEvent } from '../src/index.ts';
import { FakeServer } from './fake-server.ts';

/** random() = 0.5: each full-jitter wait is half its bound (250 ms for the first). */
const half = (): number => 0.5;

/** Plain objects, for deepEqual: the SDK's records have no prototype. */
const plain = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

function presenceLog(client: SluiceClient): PresenceEvent[] {
  const log: PresenceEvent[] = [];
  client.on('presence', (ev) => log.push(ev));
  return log;
}

function errors(client: SluiceClient): SluiceError[] {
  const log: SluiceError[] = [];
  client.on('error', (e) => log.push(e));
  return log;
}

const asks = (server: FakeServer): PresenceFrame[] => server.ofType('presence').map((r) => r.frame as PresenceFrame);

describe('presence kept per subscription', () => {
  test('presence_state after the join sets it, each presence_diff applies joins then leaves; subscription and client are told', async () => {
    const server = new FakeServer();
    server.presence.set('room:42', { u1: { connections: 2 }, u2: { connections: 1 } });
    const { client } = await server.open();
    const onClient = presenceLog(client);
    const sub = client.subscribe('room:42', () => undefined);
    const onSub: PresenceEvent[] = [];
    sub.on('presence', (ev) => onSub.push(ev));
    assert.equal(sub.presence(), undefined, 'nothing before the first presence_state');
    await server.clock.advance(0);
    await sub.ready;
    const first = sub.presence();
    assert.deepEqual(plain(first), { users: { u1: { connections: 2 }, u2: { connections: 1 } }, count: 2, truncated: false });
    assert.deepEqual(plain(onSub), [{
      topic: 'room:42', joins: { u1: { connections: 2 }, u2: { connections: 1 } }, leaves: {},
      users: { u1: { connections: 2 }, u2: { connections: 1 } }, count: 2, truncated: false,
    }]);
    server.presenceDiff('room:42', { u3: { connections: 1 } }, ['u2']);
    await server.clock.advance(0);
    assert.deepEqual(plain(onSub[1]), {
      topic: 'room:42', joins: { u3: { connections: 1 } }, leaves: { u2: { connections: 1 } },
      users: { u1: { connections: 2 }, u3: { connections: 1 } }, count: 2, truncated: false,
    });
    assert.deepEqual(plain(sub.presence()), { users: { u1: { connections: 2 }, u3: { connections: 1 } }, count: 2, truncated: false });
    assert.deepEqual(Object.keys(first!.users), ['u1', 'u2'], 'a state handed out is never changed: the diff made a new one');
    assert.deepEqual(onClient, onSub, 'the client hears the same events, with the topic');
    await client.close();
  });

  test('a diff whose user joins and leaves ends with the user absent, in neither list; a diff for a topic without a state is dropped', async () => {
    const server = new FakeServer();
    server.presence.set('room:1', { u1: { connections: 1 } });
    const { client } = await server.open();
    const log = presenceLog(client);
    client.subscribe('room:1', () => undefined);
    client.subscribe('plain:1', () => undefined);
    await server.clock.advance(0);
    server.last.pushFrame({ type: 'presence_diff', topic: 'room:1', joins: { u2: { connections: 1 } }, leaves: { u2: {} } });
    server.last.pushFrame({ type: 'presence_diff', topic: 'plain:1', joins: { u9: { connections: 1 } }, leaves: {} });
    await server.clock.advance(0);
    assert.deepEqual(plain(log.map((e) => [e.topic, Object.keys(e.joins), Object.keys(e.leaves), Object.keys(e.users)])), [
      ['room:1', ['u1'], [], ['u1']],
      ['room:1', [], [], ['u1']],
    ]);
    await client.close();
  });

  test('a truncated state: count is every user; leaves of users the list left out count, and a list that holds count is whole again', async () => {
    const server = new FakeServer();
    server.presenceMaxUsers = 2;
    server.presence.set('room:big', { a: { connections: 1 }, b: { connections: 1 }, c: { connections: 1 }, d: { connections: 3 } });
    const { client } = await server.open();
    const sub = client.subscribe('room:big', () => undefined);
    const log: PresenceEvent[] = [];
    sub.on('presence', (ev) => log.push(ev));
    await server.clock.advance(0);
    assert.deepEqual(plain(sub.presence()), { users: { a: { connections: 1 }, b: { connections: 1 } }, count: 4, truncated: true });
    server.presenceDiff('room:big', {}, ['c']);
    await server.clock.advance(0);
    assert.deepEqual(plain(sub.presence()), { users: { a: { connections: 1 }, b: { connections: 1 } }, count: 3, truncated: true });
    assert.deepEqual(plain(log[1]!.leaves), {}, 'c was never in the list: only count tells');
    server.presenceDiff('room:big', { e: { connections: 1 } }, ['d', 'a']);
    await server.clock.advance(0);
    assert.deepEqual(plain(sub.presence()), { users: { b: { connections: 1 }, e: { connections: 1 } }, count: 2, truncated: false });
    assert.deepEqual(plain([log[2]!.joins, log[2]!.leaves]), [{ e: { connections: 1 } }, { a: { connections: 1 } }]);
    await client.close();
  });

  test('after a reconnect the fresh presence_state replaces the kept one: who left while away are leaves, who came are joins', async () => {
    const server = new FakeServer();
    server.presence.set('room:42', { u1: { connections: 1 }, u2: { connections: 1 } });
    const { client } = await server.open({ random: half });
    const sub = client.subscribe('room:42', () => undefined);
    const log: PresenceEvent[] = [];
    sub.on('presence', (ev) => log.push(ev));
    await server.clock.advance(0);
    const before = sub.presence();
    server.last.closeWith(1012, 'unavailable', 1000);
    await server.clock.advance(0);
    assert.equal(client.state, 'reconnecting');
    // While away: u2 leaves, u3 comes, u1 opens a second socket.
    server.presence.set('room:42', { u1: { connections: 2 }, u3: { connections: 1 } });
    assert.equal(sub.presence(), before, 'the last state is kept while the client is away');
    // A diff the new socket sends before its state (the contract says it does not) is dropped: the state holds it.
    server.onFrame = (f, socket) => {
      if (f.type !== 'join') return undefined;
      socket.topics.add(f.topic);
      return [
        JSON.stringify({ type: 'presence_diff', topic: f.topic, joins: { stale: { connections: 1 } }, leaves: {} }),
        encodeReplyOk(f.ref),
        JSON.stringify({ type: 'presence_state', topic: f.topic, ...server.presenceData(f.topic) }),
      ];
    };
    await server.clock.advance(1250);
    assert.equal(server.sockets.length, 2);
    assert.equal(client.state, 'open');
    assert.equal(log.length, 2);
    assert.deepEqual(plain(log[1]), {
      topic: 'room:42', joins: { u3: { connections: 1 } }, leaves: { u2: { connections: 1 } },
      users: { u1: { connections: 2 }, u3: { connections: 1 } }, count: 2, truncated: false,
    });
    server.presenceDiff('room:42', {}, ['u3']);
    await server.clock.advance(0);
    assert.deepEqual(Object.keys(sub.presence()!.users), ['u1'], 'diffs apply again once the fresh state came');
    await client.close();
  });

  test('a reconnect that changed nothing still tells the fresh state, with no joins and no leaves', async () => {
    const server = new FakeServer();
    server.presence.set('room:42', { u1: { connections: 1 } });
    const { client } = await server.open({ random: half });
    const log = presenceLog(client);
    client.subscribe('room:42', () => undefined);
    await server.clock.advance(0);
    server.last.serverClose(1006, '');
    await server.clock.advance(1000);
    assert.equal(server.sockets.length, 2);
    assert.deepEqual(plain(log.map((e) => [Object.keys(e.joins), Object.keys(e.leaves), e.count])), [[['u1'], [], 1], [[], [], 1]]);
    await client.close();
  });

  test('unsubscribe() ends the subscription\'s listeners; the last one drops the kept presence', async () => {
    const server = new FakeServer();
    server.presence.set('room:42', { u1: { connections: 1 } });
    const { client } = await server.open();
    const a = client.subscribe('room:42', () => undefined);
    const b = client.subscribe('room:42', () => undefined);
    const heardA: PresenceEvent[] = [];
    const heardB: PresenceEvent[] = [];
    a.on('presence', (ev) => heardA.push(ev));
    const off = b.on('presence', (ev) => heardB.push(ev));
    await server.clock.advance(0);
    assert.equal(heardA.length, 1);
    assert.equal(heardB.length, 1);
    off();
    a.unsubscribe();
    server.presenceDiff('room:42', { u2: { connections: 1 } }, []);
    await server.clock.advance(0);
    assert.equal(heardA.length, 1, 'a is unsubscribed');
    assert.equal(heardB.length, 1, 'b removed its listener');
    assert.deepEqual(Object.keys(b.presence()!.users), ['u1', 'u2'], 'b still subscribed: its state is kept');
    b.unsubscribe();
    assert.equal(b.presence(), undefined);
    await client.close();
  });

  test('a topic the server subscribed the client to: its presence is told to the client before any subscribe()', async () => {
    const server = new FakeServer();
    const { client } = await server.open();
    const log = presenceLog(client);
    server.last.subscribe('room:srv');
    server.last.pushFrame({ type: 'presence_state', topic: 'room:srv', users: { op: { connections: 1 } }, count: 1 });
    await server.clock.advance(0);
    assert.deepEqual(plain(log), [{ topic: 'room:srv', joins: { op: { connections: 1 } }, leaves: {}, users: { op: { connections: 1 } }, count: 1,
      truncated: false }]);
    const sub = client.subscribe('room:srv', () => undefined);
    assert.deepEqual(plain(sub.presence()), { users: { op: { connections: 1 } }, count: 1, truncated: false });
    await client.close();
  });
});

describe('fetchPresence()', () => {
  test('sends a presence frame and resolves with the reply\'s data; the kept state is not changed by it', async () => {
    const server = new FakeServer();
    server.presence.set('room:42', { u1: { connections: 1 } });
    const { client } = await server.open();
    const sub = client.subscribe('room:42', () => undefined);
    await server.clock.advance(0);
    const kept = sub.presence();
    server.presence.set('room:42', { u1: { connections: 1 }, u2: { connections: 4 } });
    const got = await sub.fetchPresence();
    assert.deepEqual(plain(got), { users: { u1: { connections: 1 }, u2: { connections: 4 } }, count: 2, truncated: false });
    assert.equal(sub.presence(), kept);
    assert.deepEqual(asks(server).map((f) => [typeof f.ref, f.topic]), [['string', 'room:42']]);
    // Any topic the token may join, subscribed or not; truncated as the server says.
    server.presenceMaxUsers = 1;
    server.presence.set('lobby', { a: { connections: 1 }, b: { connections: 1 } });
    assert.deepEqual(plain(await client.fetchPresence('lobby')), { users: { a: { connections: 1 } }, count: 2, truncated: true });
    assert.equal(server.ofType('join').length, 1, 'no join for a fetch');
    await client.close();
  });

  test('refusals reject with the server\'s reason: bad_request for a topic without presence, forbidden; both are error events too', async () => {
    const server = new FakeServer();
    server.onFrame = (f) => (f.type === 'presence' && f.topic === 'secret:1' ? [encodeReplyError(f.ref, 'forbidden')] : undefined);
    const { client } = await server.open();
    const errs = errors(client);
    await assert.rejects(client.fetchPresence('plain:1'), (e: SluiceError) => e.code === 'bad_request' && e.topic === 'plain:1');
    await assert.rejects(client.fetchPresence('secret:1'), (e: SluiceError) => e.code === 'forbidden' && e.topic === 'secret:1');
    assert.deepEqual(errs.map((e) => e.code), ['bad_request', 'forbidden']);
    await client.close();
  });

  test('a malformed reply rejects with internal', async () => {
    const server = new FakeServer();
    server.onFrame = (f) => (f.type === 'presence' ? [encodeReplyOk(f.ref, '{"users":{"u1":{}},"count":1}')] : undefined);
    const { client } = await server.open();
    await assert.rejects(client.fetchPresence('room:1'), (e: SluiceError) => e.code === 'internal');
    await client.close();
  });

  test('rate_limited: asked again after retryAfterMs, not a millisecond sooner', async () => {
    const server = new FakeServer();
    server.presence.set('room:1', { u1: { connections: 1 } });
    let refused = false;
    server.onFrame = (f) => {
      if (f.type !== 'presence' || refused) return undefined;
      refused = true;
      return [encodeReplyError(f.ref, 'rate_limited', 300)];
    };
    const { client, t0 } = await server.open();
    const got = client.fetchPresence('room:1');
    await server.clock.advance(299);
    assert.equal(asks(server).length, 1);
    await server.clock.advance(1);
    assert.equal(asks(server).length, 2);
    assert.equal(server.ofType('presence')[1]!.at - t0, 300);
    assert.equal((await got).count, 1);
    await client.close();
  });

  test('before connect() and while reconnecting it waits for the socket; one in flight when the socket went is asked again', async () => {
    const server = new FakeServer();
    server.presence.set('room:1', { u1: { connections: 1 } });
    const client = server.client({ random: half });
    const early = client.fetchPresence('room:1');
    client.connect();
    await server.clock.advance(0);
    assert.equal((await early).count, 1);
    server.onFrame = (f) => (f.type === 'presence' && server.sockets.length === 1 ? [] : undefined); // no answer on the first socket
    const lost = client.fetchPresence('room:1');
    await server.clock.advance(0);
    assert.equal(asks(server).length, 2);
    server.last.serverClose(1006, '');
    await server.clock.advance(250);
    assert.equal(server.sockets.length, 2);
    assert.equal((await lost).count, 1);
    assert.deepEqual(server.ofType('presence').map((r) => server.sockets.indexOf(r.socket)), [0, 0, 1]);
    await client.close();
  });

  test('close() rejects what is unanswered with closed; a closed client, $user and a bad topic reject at once, nothing sent', async () => {
    const server = new FakeServer();
    server.onFrame = (f) => (f.type === 'presence' ? [] : undefined);
    const { client } = await server.open();
    const pending = client.fetchPresence('room:1');
    await server.clock.advance(0);
    const closing = client.close();
    await assert.rejects(pending, (e: SluiceError) => e.code === 'closed');
    await server.clock.advance(0);
    await closing;
    await assert.rejects(client.fetchPresence('room:1'), (e: SluiceError) => e.code === 'closed');
    const other = await server.open();
    await assert.rejects(other.client.fetchPresence('$user'), (e: SluiceError) => e.code === 'bad_request' && /user-event/.test(e.message));
    await assert.rejects(other.client.fetchPresence('room 1'), (e: SluiceError) => e.code === 'bad_request');
    await server.clock.advance(0);
    assert.equal(asks(server).length, 1, 'only the first, unanswered one was sent');
    await other.client.close();
  });
});

describe('$user: events addressed to the user', () => {
  test('reach client.on(\'user-event\') with their data, and no subscription', async () => {
    const server = new FakeServer();
    const { client } = await server.open();
    const userEvents: unknown[] = [];
    client.on('user-event', (data) => userEvents.push(data));
    const topicEvents: SluiceEvent[] = [];
    client.subscribe('room:1', (e) => topicEvents.push(e));
    await server.clock.advance(0);
    server.last.pushFrame({ type: 'event', topic: '$user', data: { dm: 'hi' } });
    server.publish('room:1', 'room event');
    server.last.pushFrame({ type: 'event', topic: '$user', data: 2 });
    await server.clock.advance(0);
    assert.deepEqual(userEvents, [{ dm: 'hi' }, 2]);
    assert.deepEqual(topicEvents.map((e) => e.data), ['room event']);
    await client.close();
  });

  test('subscribe(\'$user\') throws bad_request naming client.on(\'user-event\'), and no join is sent', async () => {
    const server = new FakeServer();
    const { client } = await server.open();
    assert.throws(() => client.subscribe('$user', () => undefined),
      (e: SluiceError) => e.code === 'bad_request' && e.message.includes("client.on('user-event')"));
    await server.clock.advance(0);
    assert.equal(server.ofType('join').length, 0);
    await client.close();
  });
});

describe('presence.ts against a model of the server', () => {
  const pool = ['a', 'b', 'c', 'd', 'e', '__proto__'];
  const op = fc.record({ join: fc.boolean(), user: fc.constantFrom(...pool), connections: fc.integer({ min: 1, max: 3 }) });

  test('diffs netted per batch keep count exact, users a part of the server\'s (all of it unless truncated), joins and leaves apart', () => {
    fc.assert(fc.property(fc.subarray(pool), fc.nat(pool.length), fc.array(fc.array(op, { maxLength: 6 }), { maxLength: 8 }),
      (initial, max, batches) => {
        // The server: who is present (a user joins with its first socket, leaves with its last).
        const server = new Map(initial.map((u) => [u, { connections: 1 }]));
        let state = replaceState(undefined, stateOf(server, max)).state;
        for (const batch of batches) {
          const was = new Set(server.keys());
          for (const o of batch) if (o.join) server.set(o.user, server.get(o.user) ?? { connections: o.connections });
          else server.delete(o.user);
          // The batched diff, netted as the gateway sends it: a user is a join or a leave only if the batch changed its presence.
          const joins = Object.create(null) as Record<string, { connections: number }>;
          const leaves = Object.create(null) as Record<string, Record<string, never>>;
          for (const [u, v] of server) if (!was.has(u)) joins[u] = v;
          for (const u of was) if (!server.has(u)) leaves[u] = {};
          const c = applyDiff(state, { joins, leaves });
          const listed = Object.keys(c.state.users);
          assert.equal(c.state.count, server.size);
          assert.ok(listed.every((u) => server.has(u)));
          assert.equal(c.state.truncated, listed.length < server.size);
          if (!state.truncated) assert.deepEqual(listed.sort(), [...server.keys()].sort());
          assert.ok(Object.keys(c.joins).every((u) => Object.hasOwn(c.state.users, u) && !Object.hasOwn(c.leaves, u)));
          assert.ok(Object.keys(c.leaves).every((u) => !Object.hasOwn(c.state.users, u) && Object.hasOwn(state.users, u)));
          state = c.state;
        }
      }));
  });

  test('a state replacing another: joins are the new users, leaves the gone ones with their old entry', () => {
    fc.assert(fc.property(fc.subarray(pool), fc.subarray(pool), (before, after) => {
      const old = replaceState(undefined, stateOf(new Map(before.map((u) => [u, { connections: 1 }])), pool.length)).state;
      const c = replaceState(old, stateOf(new Map(after.map((u) => [u, { connections: 2 }])), pool.length));
      assert.deepEqual(Object.keys(c.joins).sort(), after.filter((u) => !before.includes(u)).sort());
      assert.deepEqual(Object.keys(c.leaves).sort(), before.filter((u) => !after.includes(u)).sort());
      assert.ok(Object.values(c.leaves).every((v) => v.connections === 1));
      assert.deepEqual(Object.keys(c.state.users).sort(), [...after].sort());
    }));
  });
});

/** The state the server sends for its users, at most `max` listed. */
function stateOf(server: Map<string, { connections: number }>, max: number): PresenceData {
  const users = Object.create(null) as Record<string, { connections: number }>;
  for (const [u, v] of [...server].slice(0, max)) users[u] = v;
  return { users, count: server.size, truncated: server.size > max };
}
