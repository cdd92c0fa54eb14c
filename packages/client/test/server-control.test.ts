/**
 * What the operator's side of the 2026-12 additions does to the SDK, on the
 * in-process fake gateway and its virtual clock (no sleeps): revocation
 * (4003, 401 `token_revoked`), disconnect (4000 with its hint, 1008 for
 * good), 429s at the upgrade, and server-side subscriptions (`subscribed`,
 * `unsubscribed`, and what a reconnect does with them).
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeReplyError, encodeReplyOk } from '@sluice/protocol';
import type { ClientEvents, SluiceClient, SluiceError, SluiceEvent, TokenRequest } from '../src/index.ts';
import { FakeServer } from './fake-server.ts';

type Logged = { [K in keyof ClientEvents]: { readonly at: number; readonly type: K; readonly ev: ClientEvents[K] } }[keyof ClientEvents];

const EVENTS = ['connected', 'disconnected', 'reconnecting', 'recovered', 'subscribed', 'unsubscribed', 'error'] as const;

function record(server: FakeServer, client: SluiceClient): Logged[] {
  const log: Logged[] = [];
  for (const type of EVENTS) client.on(type, (ev: unknown) => log.push({ at: server.clock.now(), type, ev } as Logged));
  return log;
}

const ofType = <K extends keyof ClientEvents>(log: Logged[], type: K): ClientEvents[K][] =>
  log.filter((l) => l.type === type).map((l) => l.ev as ClientEvents[K]);

/** random() = 0.5: each full-jitter wait is half its bound (250 ms for the first). */
const half = (): number => 0.5;

/** The joins of `topic` the client sent, with their since. */
const joinsOf = (server: FakeServer, topic: string): { at: number; since: string | undefined; socket: number }[] =>
  server.ofType('join').flatMap((r) => (r.frame.type === 'join' && r.frame.topic === topic
    ? [{ at: r.at, since: r.frame.since, socket: server.sockets.indexOf(r.socket) }] : []));

/** Answers every join with since as recovered: true (a gateway whose history reaches back). */
function recovering(server: FakeServer): void {
  server.onFrame = (f, socket) => {
    if (f.type !== 'join' || f.since === undefined) return undefined;
    socket.topics.add(f.topic);
    return [encodeReplyOk(f.ref, '{"recovered":true}')];
  };
}

describe('revocation: 4003 and 401 token_revoked', () => {
  test('4003 asks for a new token (refresh: true, token_revoked), reconnects with backoff and resumes with since', async () => {
    const server = new FakeServer();
    recovering(server);
    const asked: TokenRequest[] = [];
    const { client, t0 } = await server.open({ random: half, token: (r) => {
      asked.push(r);
      return `token-${asked.length}`;
    } });
    const log = record(server, client);
    const got: unknown[] = [];
    const sub = client.subscribe('room:1', (e) => got.push(e.data));
    await server.clock.advance(0);
    await sub.ready;
    const id = server.publish('room:1', 'before');
    await server.clock.advance(100);
    server.last.closeWith(4003, 'token_revoked');
    await server.clock.advance(0);
    const closedAt = server.clock.now();
    assert.equal(closedAt - t0, 100);
    assert.deepEqual(ofType(log, 'disconnected'), [{ code: 4003, reason: 'token_revoked', retryAfterMs: undefined, willReconnect: true, url: 'ws://fake/ws' }]);
    assert.deepEqual(ofType(log, 'reconnecting').map((e) => [e.inMs, e.reason, e.code]), [[250, 'token_revoked', 4003]]);
    await server.clock.advance(249);
    assert.equal(server.sockets.length, 1, 'not a millisecond early');
    await server.clock.advance(1);
    assert.equal(server.sockets.length, 2);
    assert.deepEqual(asked, [{ refresh: false, reason: undefined }, { refresh: true, reason: 'token_revoked' }]);
    assert.deepEqual(server.last.protocols, ['sluice.v1', 'bearer.token-2'], 'the new token, not the revoked one');
    assert.equal(client.state, 'open');
    assert.deepEqual(joinsOf(server, 'room:1').map((j) => [j.socket, j.since]), [[0, undefined], [1, id]]);
    assert.deepEqual(ofType(log, 'recovered'), [{ topic: 'room:1', recovered: true, since: id }]);
    server.publish('room:1', 'after');
    await server.clock.advance(0);
    assert.deepEqual(got, ['before', 'after']);
    assert.deepEqual(ofType(log, 'error'), [], 'a revocation is the operator\'s, not a failure');
    await client.close();
  });

  test('a 401 token_revoked at the upgrade: reported as token_revoked, a new token asked for as token_revoked, backoff that grows', async () => {
    const server = new FakeServer();
    let upgrades = 0;
    server.onUpgrade = () => (++upgrades <= 2 ? { kind: 'refuse', status: 401, body: '{"reason":"token_revoked"}' } : { kind: 'welcome' });
    const asked: TokenRequest[] = [];
    const client = server.client({ random: half, token: (r) => (asked.push(r), 'tok') });
    const log = record(server, client);
    client.connect();
    await server.clock.advance(10_000);
    assert.equal(client.state, 'open');
    assert.deepEqual(server.openedAt.map((t) => t - server.openedAt[0]!), [0, 250, 750], 'backoff: half of 500, then of 1000');
    assert.deepEqual(asked, [
      { refresh: false, reason: undefined }, { refresh: true, reason: 'token_revoked' }, { refresh: true, reason: 'token_revoked' },
    ]);
    const errors = ofType(log, 'error');
    assert.deepEqual(errors.map((e) => [e.code, e.status]), [['token_revoked', 401], ['token_revoked', 401]]);
    assert.deepEqual(ofType(log, 'reconnecting').map((e) => [e.reason, e.status]), [['token_revoked', 401], ['token_revoked', 401]]);
    await client.close();
  });

  test('a plain 401 is still unauthorized, asked for as unauthorized', async () => {
    const server = new FakeServer();
    let upgrades = 0;
    server.onUpgrade = () => (++upgrades === 1 ? { kind: 'refuse', status: 401, body: '{"reason":"unauthorized"}' } : { kind: 'welcome' });
    const asked: TokenRequest[] = [];
    const client = server.client({ random: half, token: (r) => (asked.push(r), 'tok') });
    const log = record(server, client);
    client.connect();
    await server.clock.advance(1000);
    assert.deepEqual(asked.map((r) => r.reason), [undefined, 'unauthorized']);
    assert.deepEqual(ofType(log, 'error').map((e) => e.code), ['unauthorized']);
    await client.close();
  });
});

describe('disconnect: 4000 and 1008', () => {
  test('4000 disconnected with retryAfterMs reconnects no sooner than the hint (plus at most a tenth), with the same token, resuming', async () => {
    const server = new FakeServer();
    recovering(server);
    const asked: TokenRequest[] = [];
    const { client } = await server.open({ random: half, token: (r) => (asked.push(r), 'tok') });
    const log = record(server, client);
    const sub = client.subscribe('room:2', () => undefined);
    await server.clock.advance(0);
    await sub.ready;
    const id = server.publish('room:2', 1);
    await server.clock.advance(0);
    server.last.closeWith(4000, 'disconnected', 2400);
    await server.clock.advance(0);
    const closedAt = server.clock.now();
    assert.deepEqual(ofType(log, 'disconnected'), [{ code: 4000, reason: 'disconnected', retryAfterMs: 2400, willReconnect: true, url: 'ws://fake/ws' }]);
    // 2400 and half of a tenth of it (random() = 0.5).
    assert.deepEqual(ofType(log, 'reconnecting').map((e) => [e.inMs, e.retryAfterMs, e.reason, e.code]), [[2520, 2400, 'disconnected', 4000]]);
    await server.clock.advance(2519);
    assert.equal(server.sockets.length, 1, 'not a millisecond early');
    await server.clock.advance(1);
    assert.equal(server.last.createdAt - closedAt, 2520);
    assert.equal(client.state, 'open');
    assert.deepEqual(asked, [{ refresh: false, reason: undefined }, { refresh: false, reason: undefined }], 'the token is still good');
    assert.deepEqual(joinsOf(server, 'room:2').map((j) => j.since), [undefined, id]);
    assert.deepEqual(ofType(log, 'error'), []);
    await client.close();
  });

  test('1008 disconnected stops: error disconnected (closeCode 1008), pending publishes reject with it, no reconnect ever', async () => {
    const server = new FakeServer();
    server.onFrame = (f) => (f.type === 'publish' ? [] : undefined); // never acknowledged: still pending at the close
    const { client } = await server.open({ random: half });
    const log = record(server, client);
    const pending = client.publish('room:3', 'x');
    const outcome = pending.then(() => 'acked', (e: SluiceError) => [e.code, e.closeCode]);
    await server.clock.advance(0);
    server.last.closeWith(1008, 'disconnected');
    await server.clock.advance(0);
    assert.equal(client.state, 'closed');
    assert.deepEqual(ofType(log, 'disconnected'), [{ code: 1008, reason: 'disconnected', retryAfterMs: undefined, willReconnect: false, url: 'ws://fake/ws' }]);
    const errors = ofType(log, 'error');
    assert.deepEqual(errors.map((e) => [e.code, e.closeCode]), [['disconnected', 1008]]);
    assert.deepEqual(await outcome, ['disconnected', 1008]);
    await server.clock.advance(120_000);
    assert.equal(server.sockets.length, 1, 'never reconnected');
    assert.deepEqual(ofType(log, 'reconnecting'), []);
    await assert.rejects(client.publish('room:3', 'y'), { code: 'closed' });
    // connect() starts again, as after any stop.
    client.connect();
    await server.clock.advance(0);
    assert.equal(client.state, 'open');
    await client.close();
  });

  test('1008 abusive and forbidden keep their own error codes', async () => {
    for (const reason of ['abusive', 'forbidden'] as const) {
      const server = new FakeServer();
      const { client } = await server.open({ random: half });
      const log = record(server, client);
      server.last.closeWith(1008, reason);
      await server.clock.advance(10_000);
      assert.deepEqual(ofType(log, 'error').map((e) => e.code), [reason]);
      assert.equal(server.sockets.length, 1);
    }
  });
});

describe('429 at the upgrade', () => {
  test('tenant_rate_limited waits its retryAfterMs plus at most a tenth; too_many_sockets (no hint) backs off, growing from the first', async () => {
    const server = new FakeServer();
    const answers = [
      { kind: 'refuse', status: 429, body: '{"reason":"tenant_rate_limited","retryAfterMs":700}', retryAfter: '1' },
      { kind: 'refuse', status: 429, body: '{"reason":"too_many_sockets"}' },
      { kind: 'refuse', status: 429, body: '{"reason":"too_many_sockets"}' },
    ] as const;
    let upgrades = 0;
    server.onUpgrade = () => answers[upgrades++] ?? { kind: 'welcome' };
    const asked: TokenRequest[] = [];
    const client = server.client({ random: half, token: (r) => (asked.push(r), 'tok') });
    const log = record(server, client);
    client.connect();
    await server.clock.advance(10_000);
    assert.equal(client.state, 'open');
    // 700 + 35 (half of a tenth); then half of 500 (the hinted refusal does not grow the backoff), then half of 1000.
    assert.deepEqual(server.openedAt.map((t) => t - server.openedAt[0]!), [0, 735, 985, 1485]);
    assert.deepEqual(ofType(log, 'reconnecting').map((e) => [e.reason, e.status, e.retryAfterMs]),
      [['tenant_rate_limited', 429, 700], ['too_many_sockets', 429, undefined], ['too_many_sockets', 429, undefined]]);
    assert.ok(asked.every((r) => !r.refresh), 'a 429 is not the token\'s fault');
    assert.deepEqual(ofType(log, 'error'), []);
    await client.close();
  });
});

describe('server-side subscriptions', () => {
  test('subscribed: emitted once, before the topic\'s events; subscribe() in the listener gets them all without a join', async () => {
    const server = new FakeServer();
    const { client } = await server.open({ random: half });
    const log = record(server, client);
    const got: SluiceEvent[] = [];
    let readyOf: Promise<unknown> | undefined;
    client.on('subscribed', ({ topic }) => {
      readyOf = client.subscribe(topic, (e) => got.push(e)).ready;
    });
    server.last.subscribe('room:42');
    const id = server.publish('room:42', { text: 'hi' });
    await server.clock.advance(0);
    assert.deepEqual(ofType(log, 'subscribed'), [{ topic: 'room:42' }]);
    assert.deepEqual(got, [{ topic: 'room:42', id, data: { text: 'hi' } }]);
    assert.deepEqual(await readyOf, { recovered: undefined }, 'ready at once: the server joined it');
    assert.deepEqual(server.ofType('join'), [], 'no join of our own');
    // Said again (a second POST /v1/subscribe): nothing new.
    server.last.subscribe('room:42');
    await server.clock.advance(0);
    assert.equal(ofType(log, 'subscribed').length, 1);
    await client.close();
  });

  test('a server-subscribed topic is resumed after a reconnect with since = its last id, handlers or not', async () => {
    const server = new FakeServer();
    recovering(server);
    const { client } = await server.open({ random: half });
    const log = record(server, client);
    const got: unknown[] = [];
    server.last.subscribe('room:a');
    server.last.subscribe('room:b'); // the application never subscribes to this one
    await server.clock.advance(0);
    client.subscribe('room:a', (e) => got.push(e.data));
    server.publish('room:a', 1);
    const lastA = server.publish('room:a', 2);
    server.publish('room:b', 1);
    const lastB = server.publish('room:b', 2);
    await server.clock.advance(0);
    server.last.closeWith(1012, 'unavailable', 0);
    await server.clock.advance(1000);
    assert.equal(server.sockets.length, 2);
    assert.deepEqual(joinsOf(server, 'room:a').map((j) => [j.socket, j.since]), [[1, lastA]]);
    assert.deepEqual(joinsOf(server, 'room:b').map((j) => [j.socket, j.since]), [[1, lastB]]);
    assert.deepEqual(ofType(log, 'recovered').map((r) => [r.topic, r.since]), [['room:a', lastA], ['room:b', lastB]]);
    server.publish('room:a', 3);
    await server.clock.advance(0);
    assert.deepEqual(got, [1, 2, 3], 'the handler outlives the socket');
    assert.equal(ofType(log, 'subscribed').length, 2, 'the rejoin is ours: no second subscribed');
    await client.close();
  });

  test('the resumed join refused forbidden (the token does not allow it): dropped with unsubscribed forbidden, once, no error, no loop', async () => {
    const server = new FakeServer();
    server.onFrame = (f) => (f.type === 'join' && f.topic === 'vip:1' ? [encodeReplyError(f.ref, 'forbidden', undefined, 'not in topics')] : undefined);
    const { client } = await server.open({ random: half });
    const log = record(server, client);
    const got: unknown[] = [];
    client.on('subscribed', ({ topic }) => void client.subscribe(topic, (e) => got.push(e.data)));
    client.subscribe('room:own', () => undefined);
    server.last.subscribe('vip:1');
    const id = server.publish('vip:1', 'while given');
    await server.clock.advance(0);
    server.last.closeWith(1012, 'unavailable', 0);
    await server.clock.advance(1000);
    assert.deepEqual(joinsOf(server, 'vip:1').map((j) => [j.socket, j.since]), [[1, id]]);
    assert.deepEqual(ofType(log, 'unsubscribed'), [{ topic: 'vip:1', reason: 'forbidden' }]);
    assert.deepEqual(ofType(log, 'error'), [], 'the end of what the server gave is not an error');
    // Gone for good: not joined again on later sockets, and its events are not delivered.
    server.last.pushFrame({ type: 'event', topic: 'vip:1', id: server.nextId(), data: 'stray' });
    server.last.closeWith(1012, 'unavailable', 0);
    await server.clock.advance(1000);
    assert.equal(server.sockets.length, 3);
    assert.equal(joinsOf(server, 'vip:1').length, 1);
    assert.deepEqual(joinsOf(server, 'room:own').map((j) => j.socket), [0, 1, 2], 'the other topic is resumed as usual');
    assert.deepEqual(got, ['while given']);
    await client.close();
  });

  test('a join of our own refused forbidden is still an error, and not an unsubscribed event', async () => {
    const server = new FakeServer();
    server.onFrame = (f) => (f.type === 'join' ? [encodeReplyError(f.ref, 'forbidden')] : undefined);
    const { client } = await server.open({ random: half });
    const log = record(server, client);
    const sub = client.subscribe('vip:2', () => undefined);
    await assert.rejects(sub.ready, { code: 'forbidden' });
    await server.clock.advance(0);
    assert.deepEqual(ofType(log, 'error').map((e) => [e.code, e.topic]), [['forbidden', 'vip:2']]);
    assert.deepEqual(ofType(log, 'unsubscribed'), []);
    await client.close();
  });

  test('unsubscribed removed: the topic is dropped, the app is told, its events stop, and it is not rejoined', async () => {
    const server = new FakeServer();
    const { client } = await server.open({ random: half });
    const log = record(server, client);
    const got: unknown[] = [];
    client.on('subscribed', ({ topic }) => void client.subscribe(topic, (e) => got.push(e.data)));
    server.last.subscribe('room:42');
    server.publish('room:42', 'a');
    await server.clock.advance(0);
    server.last.unsubscribe('room:42', 'removed');
    // A late event the server had already sent: not delivered.
    server.last.pushFrame({ type: 'event', topic: 'room:42', id: server.nextId(), data: 'late' });
    await server.clock.advance(0);
    assert.deepEqual(ofType(log, 'unsubscribed'), [{ topic: 'room:42', reason: 'removed' }]);
    assert.deepEqual(got, ['a']);
    server.last.closeWith(1012, 'unavailable', 0);
    await server.clock.advance(1000);
    assert.equal(server.sockets.length, 2);
    assert.deepEqual(joinsOf(server, 'room:42'), [], 'not joined again');
    assert.deepEqual(ofType(log, 'error'), []);
    await client.close();
  });

  test('subscribed for a topic the client subscribed itself: no event, no second join', async () => {
    const server = new FakeServer();
    const { client } = await server.open({ random: half });
    const log = record(server, client);
    const got: unknown[] = [];
    client.subscribe('room:7', (e) => got.push(e.data));
    await server.clock.advance(0);
    server.last.subscribe('room:7');
    server.publish('room:7', 'x');
    await server.clock.advance(0);
    assert.deepEqual(ofType(log, 'subscribed'), []);
    assert.deepEqual(got, ['x'], 'delivered once');
    assert.equal(joinsOf(server, 'room:7').length, 1);
    await client.close();
  });

  test('subscribed while our own join of the topic waits under the pacer: that join is not sent, ready resolves', async () => {
    const server = new FakeServer();
    server.limits = { ...server.limits, maxMessages: 1 };
    const { client, t0 } = await server.open({ random: half });
    const log = record(server, client);
    client.subscribe('room:first', () => undefined); // takes the window's one frame
    const got: unknown[] = [];
    const sub = client.subscribe('room:8', (e) => got.push(e.data));
    await server.clock.advance(0);
    server.last.subscribe('room:8');
    server.publish('room:8', 'x');
    await server.clock.advance(0);
    assert.deepEqual(await sub.ready, { recovered: undefined });
    assert.deepEqual(got, ['x']);
    await server.clock.advance(5000);
    assert.deepEqual(server.ofType('join').map((r) => [r.at - t0, r.frame.type === 'join' && r.frame.topic]), [[0, 'room:first']]);
    assert.deepEqual(ofType(log, 'subscribed'), []);
    await client.close();
  });

  test('subscribed while our own join is under way, which is then refused forbidden: the topic stays, no error', async () => {
    const server = new FakeServer();
    let joinRef: string | undefined;
    server.onFrame = (f) => {
      if (f.type !== 'join') return undefined;
      joinRef = f.ref;
      return []; // answered later, below
    };
    const { client } = await server.open({ random: half });
    const log = record(server, client);
    const got: unknown[] = [];
    const sub = client.subscribe('vip:3', (e) => got.push(e.data));
    await server.clock.advance(0);
    assert.ok(joinRef !== undefined);
    server.last.subscribe('vip:3');
    server.last.push(encodeReplyError(joinRef, 'forbidden'));
    server.publish('vip:3', 'kept');
    await server.clock.advance(0);
    assert.deepEqual(await sub.ready, { recovered: undefined });
    assert.deepEqual(got, ['kept']);
    assert.deepEqual(ofType(log, 'error'), []);
    assert.deepEqual(ofType(log, 'unsubscribed'), []);
    await client.close();
  });

  test('unsubscribe() of the last handler of a server-subscribed topic leaves it', async () => {
    const server = new FakeServer();
    const { client } = await server.open({ random: half });
    let sub: ReturnType<SluiceClient['subscribe']> | undefined;
    client.on('subscribed', ({ topic }) => (sub = client.subscribe(topic, () => undefined)));
    server.last.subscribe('room:9');
    await server.clock.advance(0);
    sub!.unsubscribe();
    await server.clock.advance(0);
    assert.deepEqual(server.ofType('leave').map((r) => r.frame.type === 'leave' && r.frame.topic), ['room:9']);
    assert.equal(server.last.topics.has('room:9'), false);
    server.last.closeWith(1012, 'unavailable', 0);
    await server.clock.advance(1000);
    assert.deepEqual(joinsOf(server, 'room:9'), []);
    await client.close();
  });
});
