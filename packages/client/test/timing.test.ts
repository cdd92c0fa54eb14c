/**
 * The SDK's timing, on the in-process fake gateway and its virtual clock:
 * reconnect backoff and the server's hints, the connect timeout, the
 * heartbeat, close()'s wait, pacing, and the waits after rate_limited,
 * tenant_rate_limited and unavailable. No test sleeps: time moves only by
 * `clock.advance`, so each wait is checked to the millisecond.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeReplyError, encodeReplyOk } from '@sluice/protocol';
import type { ClientEvents, SluiceClient } from '../src/index.ts';
import { FakeServer, settle } from './fake-server.ts';

type Logged = { [K in keyof ClientEvents]: { readonly at: number; readonly type: K; readonly ev: ClientEvents[K] } }[keyof ClientEvents];

function record(server: FakeServer, client: SluiceClient): Logged[] {
  const log: Logged[] = [];
  for (const type of ['connected', 'disconnected', 'reconnecting', 'recovered', 'error'] as const) {
    client.on(type, (ev: unknown) => log.push({ at: server.clock.now(), type, ev } as Logged));
  }
  return log;
}

const ofType = <K extends keyof ClientEvents>(log: Logged[], type: K): ClientEvents[K][] =>
  log.filter((l) => l.type === type).map((l) => l.ev as ClientEvents[K]);

/** random() = 0.5: each full-jitter wait is half its bound. */
const half = (): number => 0.5;

describe('reconnect backoff', () => {
  test('attempts that fail wait half of 500, 1000, 2000, ... ms, capped at maxMs, and no sooner', async () => {
    const server = new FakeServer();
    server.onUpgrade = () => ({ kind: 'drop' });
    const client = server.client({ random: half, backoff: { maxMs: 4000 } });
    const log = record(server, client);
    client.connect();
    await server.clock.advance(20_000);
    const t0 = server.openedAt[0]!;
    const waits = server.openedAt.slice(1).map((t, i) => t - (i === 0 ? t0 : server.openedAt[i]!));
    assert.deepEqual(waits.slice(0, 6), [250, 500, 1000, 2000, 2000, 2000]);
    assert.deepEqual(ofType(log, 'reconnecting').slice(0, 4).map((e) => [e.attempt, e.inMs]), [[1, 250], [2, 500], [3, 1000], [4, 2000]]);
    assert.deepEqual(ofType(log, 'disconnected'), [], 'attempts that never opened are not disconnects');
    await client.close();
  });

  test('a close with retryAfterMs waits the hint plus at most a tenth, and does not grow the backoff; a connection open for resetAfterMs starts the count again', async () => {
    const server = new FakeServer();
    const client = server.client({ random: half });
    const log = record(server, client);
    client.connect();
    await server.clock.advance(10);
    assert.equal(client.state, 'open');
    server.last.serverClose(1012, '{"reason":"unavailable","retryAfterMs":2400}');
    await server.clock.advance(0);
    const closedAt = server.clock.now();
    // 2400 and half of a tenth of it.
    assert.deepEqual(ofType(log, 'reconnecting').map((e) => [e.attempt, e.inMs, e.reason, e.code]), [[1, 2520, 'unavailable', 1012]]);
    await server.clock.advance(2519);
    assert.equal(server.sockets.length, 1, 'not a millisecond early');
    await server.clock.advance(1);
    assert.equal(server.sockets.length, 2);
    assert.equal(server.last.createdAt - closedAt, 2520);
    // The server paced that one: the first wait without a hint is the first step of the backoff.
    await server.clock.advance(100);
    server.last.serverClose(1006, '');
    await server.clock.advance(0);
    assert.deepEqual(ofType(log, 'reconnecting').at(-1), { inMs: 250, attempt: 2, retryAfterMs: undefined, reason: undefined, code: 1006, status: undefined });
    await server.clock.advance(250);
    // Open for less than resetAfterMs (5000): the next wait grows.
    await server.clock.advance(100);
    server.last.serverClose(1006, '');
    await server.clock.advance(0);
    assert.deepEqual(ofType(log, 'reconnecting').at(-1), { inMs: 500, attempt: 3, retryAfterMs: undefined, reason: undefined, code: 1006, status: undefined });
    await server.clock.advance(500);
    // Open for 5000 ms: the count starts again.
    await server.clock.advance(5000);
    server.last.serverClose(1006, '');
    await server.clock.advance(0);
    assert.deepEqual(ofType(log, 'reconnecting').at(-1)!.attempt, 1);
    assert.equal(ofType(log, 'reconnecting').at(-1)!.inMs, 250);
    await client.close();
  });

  test('a 503 refusal with a body waits its retryAfterMs; a 401 asks for a fresh token', async () => {
    const server = new FakeServer();
    let refusals = 0;
    server.onUpgrade = () => (refusals++ === 0
      ? { kind: 'refuse', status: 503, body: '{"reason":"unavailable","retryAfterMs":3000}', retryAfter: '3' }
      : refusals === 2 ? { kind: 'refuse', status: 401, body: '{"reason":"unauthorized"}' } : { kind: 'welcome' });
    const requests: unknown[] = [];
    const client = server.client({ random: () => 0, token: (r) => (requests.push(r), 'jwt.a.b') });
    const log = record(server, client);
    client.connect();
    await server.clock.advance(0);
    assert.deepEqual(ofType(log, 'reconnecting').map((e) => [e.inMs, e.status, e.reason]), [[3000, 503, 'unavailable']]);
    await server.clock.advance(2999);
    assert.equal(server.sockets.length, 1);
    await server.clock.advance(1);
    // The 401 reconnects at once (random() = 0: no jitter, no hint).
    assert.deepEqual(server.openedAt.map((t) => t - server.openedAt[0]!), [0, 3000, 3000]);
    assert.deepEqual(ofType(log, 'error').map((e) => e.code), ['unauthorized']);
    assert.equal(client.state, 'open');
    assert.deepEqual(requests, [{ refresh: false, reason: undefined }, { refresh: false, reason: undefined }, { refresh: true, reason: 'unauthorized' }]);
    assert.deepEqual(server.sockets.map((s) => s.protocols), Array(3).fill(['sluice.v1', 'bearer.jwt.a.b']));
    await client.close();
  });
});

describe('timeouts and the heartbeat', () => {
  test('no welcome within connectTimeoutMs: the socket is cut and the attempt counts as failed', async () => {
    const server = new FakeServer();
    server.onUpgrade = () => ({ kind: 'silent' });
    const client = server.client({ random: half, connectTimeoutMs: 4000 });
    const log = record(server, client);
    client.connect();
    await server.clock.advance(3999);
    assert.deepEqual(ofType(log, 'reconnecting'), []);
    await server.clock.advance(1);
    assert.deepEqual(ofType(log, 'reconnecting').map((e) => [e.reason, e.inMs]), [['connect_timeout', 250]]);
    assert.equal(client.state, 'reconnecting');
    await client.close();
  });

  test('idle for heartbeatMs: a ping; answered, the socket stays; traffic holds the ping back', async () => {
    const server = new FakeServer();
    server.heartbeatMs = 1000;
    const client = server.client();
    const log = record(server, client);
    client.connect();
    await server.clock.advance(0);
    const t0 = server.clock.now();
    await server.clock.advance(999);
    assert.deepEqual(server.ofType('ping'), []);
    await server.clock.advance(1);
    assert.deepEqual(server.ofType('ping').map((r) => r.at - t0), [1000]);
    await server.clock.advance(1000);
    assert.deepEqual(server.ofType('ping').map((r) => r.at - t0), [1000, 2000], 'the pong is traffic: the next ping is a heartbeat later');
    // A frame every 600 ms: no ping while it lasts.
    for (let i = 0; i < 5; i++) {
      await server.clock.advance(600);
      server.last.push('{"type":"event","topic":"x","data":1}');
    }
    assert.equal(server.ofType('ping').length, 2);
    assert.deepEqual(ofType(log, 'disconnected'), []);
    await client.close();
  });

  test('a dead network: no frame for 2 x heartbeatMs ends the socket with heartbeat_timeout, and the client reconnects', async () => {
    const server = new FakeServer();
    server.heartbeatMs = 1000;
    const client = server.client({ random: half });
    const log = record(server, client);
    client.connect();
    await server.clock.advance(0);
    const t0 = server.clock.now();
    server.last.muted = true;
    await server.clock.advance(1999);
    assert.deepEqual(ofType(log, 'disconnected'), []);
    await server.clock.advance(1);
    const disc = log.filter((l) => l.type === 'disconnected');
    assert.deepEqual(disc.map((l) => [l.at - t0, (l.ev as ClientEvents['disconnected']).reason, (l.ev as ClientEvents['disconnected']).code]),
      [[2000, 'heartbeat_timeout', 1006]]);
    await server.clock.advance(250);
    assert.equal(server.sockets.length, 2);
    assert.equal(client.state, 'open');
    await client.close();
  });

  test('heartbeatMs: 0 turns the check off', async () => {
    const server = new FakeServer();
    server.heartbeatMs = 1000;
    const client = server.client({ heartbeatMs: 0 });
    client.connect();
    await server.clock.advance(0);
    server.last.muted = true;
    await server.clock.advance(60_000);
    assert.deepEqual(server.ofType('ping'), []);
    assert.equal(client.state, 'open');
    server.last.muted = false;
    await client.close();
  });

  test('close() waits 3000 ms for the server\'s close frame, then cuts the socket', async () => {
    const server = new FakeServer();
    const client = server.client();
    client.connect();
    await server.clock.advance(0);
    server.last.muted = true;
    let closed = false;
    void client.close().then(() => (closed = true));
    await server.clock.advance(2999);
    assert.equal(closed, false);
    await server.clock.advance(1);
    assert.equal(closed, true);
    assert.equal(server.last.closedByClient, 1000);
    assert.equal(server.clock.armed, 0, 'no timer left behind');
  });
});

describe('pacing and the waits the server asks for', () => {
  test('the welcome\'s limit paces frames: 5 per 1000 ms (+ 100 ms margin)', async () => {
    const server = new FakeServer();
    server.limits = { ...server.limits, maxMessages: 5 };
    const { client, t0 } = await server.open();
    const acks = Array.from({ length: 12 }, (_, i) => client.publish('pace:1', i));
    await server.clock.advance(3000);
    await Promise.all(acks);
    assert.deepEqual(server.ofType('publish').map((r) => r.at - t0), [0, 0, 0, 0, 0, 1100, 1100, 1100, 1100, 1100, 2200, 2200]);
    await client.close();
  });

  test('rate_limited holds every frame for retryAfterMs, then the publish is resent with the same idempotencyKey', async () => {
    const server = new FakeServer();
    let first = true;
    server.onFrame = (f) => {
      if (f.type !== 'publish' || !first) return undefined;
      first = false;
      return [encodeReplyError(f.ref, 'rate_limited', 400)];
    };
    const { client, t0 } = await server.open();
    const ack = client.publish('rl:1', 'x');
    await server.clock.advance(0);
    client.subscribe('rl:2', () => undefined);
    await server.clock.advance(1000);
    assert.match((await ack).id ?? '', /^\d+-\d+$/);
    const pubs = server.ofType('publish');
    assert.deepEqual(pubs.map((r) => r.at - t0), [0, 400]);
    assert.deepEqual(server.ofType('join').map((r) => r.at - t0), [400], 'the join waited too');
    const keys = pubs.map((r) => (r.frame.type === 'publish' ? r.frame.idempotencyKey : undefined));
    assert.equal(keys[0], keys[1]);
    await client.close();
  });

  test('tenant_rate_limited holds publishes only; unavailable resends after a jittered, growing wait', async () => {
    const server = new FakeServer();
    const answers = [
      (ref: string | undefined) => encodeReplyError(ref, 'tenant_rate_limited', 700),
      (ref: string | undefined) => encodeReplyError(ref, 'unavailable'),
      (ref: string | undefined) => encodeReplyError(ref, 'unavailable'),
    ];
    server.onFrame = (f) => (f.type === 'publish' && answers.length > 0 ? [answers.shift()!(f.ref)] : undefined);
    const { client, t0 } = await server.open({ random: half });
    const ack = client.publish('t:1', 'x');
    await server.clock.advance(100);
    client.subscribe('t:2', () => undefined);
    await server.clock.advance(5000);
    await ack;
    // 700 (tenant window), then half of 500 and half of 1000 (unavailable, twice).
    assert.deepEqual(server.ofType('publish').map((r) => r.at - t0), [0, 700, 950, 1450]);
    assert.deepEqual(server.ofType('join').map((r) => r.at - t0), [100], 'the join did not wait for the tenant window');
    await client.close();
  });

  test('a durable publish unacknowledged past idempotencyWindowMs is not resent: outcome_unknown', async () => {
    const server = new FakeServer();
    server.onFrame = (f) => (f.type === 'publish' ? [] : undefined); // never acknowledged
    const client = server.client({ random: half, idempotencyWindowMs: 1000 });
    client.on('error', () => undefined);
    client.connect();
    await server.clock.advance(0);
    const ack = client.publish('idem:1', 'x');
    const outcome = ack.then(() => 'acked', (e: { code: string }) => e.code);
    await server.clock.advance(900);
    server.last.serverClose(1006, '');
    await server.clock.advance(250); // the new socket comes at 1150 ms, past the window
    await settle();
    assert.equal(await outcome, 'outcome_unknown');
    assert.equal(server.ofType('publish').length, 1, 'never sent twice');
    await client.close();
  });

  test('a join refused unavailable is tried again after the jittered wait, then resolves', async () => {
    const server = new FakeServer();
    let refused = false;
    server.onFrame = (f) => {
      if (f.type !== 'join') return undefined;
      if (!refused) {
        refused = true;
        return [encodeReplyError(f.ref, 'unavailable')];
      }
      return [encodeReplyOk(f.ref)];
    };
    const { client, t0 } = await server.open({ random: half });
    const sub = client.subscribe('j:1', () => undefined);
    await server.clock.advance(1000);
    assert.deepEqual(await sub.ready, { recovered: undefined });
    assert.deepEqual(server.ofType('join').map((r) => r.at - t0), [0, 250]);
    await client.close();
  });
});

describe('token refresh on the open socket', () => {
  /** A server whose tokens live a minute, answering every refresh with a new minute (or as `answer` says). */
  function minuteTokens(answer?: (ref: string | undefined) => string | undefined): FakeServer {
    const server = new FakeServer();
    server.tokenLifeMs = 60_000;
    server.onFrame = (f) => {
      if (f.type !== 'refresh') return undefined;
      return [answer?.(f.ref) ?? encodeReplyOk(f.ref, JSON.stringify({ expiresAt: server.clock.wall() + 60_000 }))];
    };
    return server;
  }

  test('ahead of expiresAt, at 0.75-0.9 of its life (jittered), the token callback is asked (expiring) and sent as refresh', async () => {
    const server = minuteTokens();
    const asked: unknown[] = [];
    let n = 0;
    const { client, t0 } = await server.open({ random: half, token: (r) => {
      asked.push(r);
      return `token-${n++}`;
    } });
    assert.deepEqual(asked, [{ refresh: false, reason: undefined }], 'the first token, for the upgrade');
    // random 0.5: 0.825 of 60 s is 49.5 s.
    await server.clock.advance(49_499);
    assert.equal(server.ofType('refresh').length, 0, 'not a millisecond early');
    await server.clock.advance(1);
    await settle();
    const sent = server.ofType('refresh');
    assert.equal(sent.length, 1);
    assert.equal(sent[0]!.at - t0, 49_500);
    assert.deepEqual(asked[1], { refresh: true, reason: 'expiring' });
    assert.equal(sent[0]!.frame.type === 'refresh' && sent[0]!.frame.token, 'token-1');
    // The reply set a new minute: the next refresh comes 49.5 s after this one, on the same socket.
    await server.clock.advance(49_500);
    await settle();
    assert.equal(server.ofType('refresh').length, 2);
    assert.equal(server.sockets.length, 1, 'no reconnect');
    assert.equal(client.state, 'open');
    await client.close();
  });

  test('a refused refresh (unauthorized) is tried again after a tenth of what is left; forbidden is not', async () => {
    let refuse: 'unauthorized' | 'forbidden' = 'unauthorized';
    let refusals = 0;
    const server = minuteTokens((ref) => (refusals++ < 1 ? encodeReplyError(ref, refuse, undefined, 'no') : undefined));
    const errors: string[] = [];
    const { client } = await server.open({ random: half, token: () => 'tok' });
    client.on('error', (e) => errors.push(e.code));
    await server.clock.advance(49_500);
    await settle();
    assert.equal(server.ofType('refresh').length, 1);
    assert.deepEqual(errors, ['unauthorized']);
    // 10.5 s were left: the retry comes 1.05 s later, and is accepted.
    await server.clock.advance(1049);
    await settle();
    assert.equal(server.ofType('refresh').length, 1);
    await server.clock.advance(1);
    await settle();
    assert.equal(server.ofType('refresh').length, 2);
    await client.close();

    refuse = 'forbidden';
    refusals = 0;
    const other = minuteTokens((ref) => encodeReplyError(ref, refuse, undefined, 'another user'));
    const second = await other.open({ random: half, token: () => 'tok' });
    await other.clock.advance(59_000);
    await settle();
    assert.equal(other.ofType('refresh').length, 1, 'a token of another user is not sent again');
    await second.client.close();
  });

  test('without a token callback, or without expiresAt, nothing is refreshed', async () => {
    const server = minuteTokens();
    const { client } = await server.open({ random: half });
    const plain = new FakeServer();
    const second = await plain.open({ random: half, token: () => 'tok' });
    await server.clock.advance(120_000);
    await plain.clock.advance(120_000);
    assert.equal(server.ofType('refresh').length, 0);
    assert.equal(plain.ofType('refresh').length, 0);
    await client.close();
    await second.client.close();
  });

  test('an unsubscribed frame drops the topic and is told as an unsubscribed event', async () => {
    const server = new FakeServer();
    const { client } = await server.open({ random: half });
    const events: unknown[] = [];
    const got: unknown[] = [];
    client.on('unsubscribed', (e) => events.push(e));
    const sub = client.subscribe('room:1', (e) => got.push(e.data));
    await server.clock.advance(0);
    await sub.ready;
    server.last.push('{"type":"unsubscribed","topic":"room:1","reason":"forbidden"}');
    server.last.push('{"type":"event","topic":"room:1","data":"after"}');
    await server.clock.advance(0);
    assert.deepEqual(events, [{ topic: 'room:1', reason: 'forbidden' }]);
    assert.deepEqual(got, [], 'no event of a topic the server took away');
    // A reconnect does not join it again.
    server.last.serverClose(1012, '{"reason":"unavailable","retryAfterMs":0}');
    await server.clock.advance(5_000);
    assert.equal(server.ofType('join').length, 1);
    await client.close();
  });
});
