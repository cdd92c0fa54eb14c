/**
 * A subscriber that has had no event on a topic yet is cut off, and the
 * topic's first event is published while it is away. Its join's reply gave
 * the topic's position (`data.position`), which the SDK keeps as its resume
 * point: the rejoin carries it as `since` and the event arrives, once, with
 * `recovered: true`. On one embedded gateway and on two nodes on one Redis
 * (the publish through the other node), as in S16's rolling restart.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import type { SluiceEvent } from '../src/index.ts';
import { eventually, type Gateway, ofType, sdk, startGateway } from './helpers.ts';

// The client waits out at least a second before it reconnects: the publish below lands in that gap.
const AWAY = { WS_RETRY_AFTER_MIN_MS: '1000', WS_RETRY_AFTER_MAX_MS: '1200' };

async function cutAndPublishMeanwhile(sub: Gateway, pub: Gateway, topic: string, newest?: string): Promise<void> {
  const c = sdk({ url: sub.url() });
  const got: SluiceEvent[] = [];
  const s = c.client.subscribe(topic, (e) => got.push(e));
  c.client.connect();
  await s.ready;
  const replies = c.tap.received.filter((w) => w.frame.type === 'reply');
  const joinRef = c.tap.sent.find((w) => w.frame.type === 'join')!.frame.ref;
  const reply = replies.find((w) => w.frame.ref === joinRef)!.frame as { data?: { position?: unknown } };
  const position = reply.data?.position;
  assert.match(String(position), /^\d+-\d+$/, 'the join without since answers the topic position');
  if (newest !== undefined) assert.equal(position, newest, 'a topic with events: its newest id');
  assert.equal(s.lastId, position, 'kept as the resume point');
  assert.equal(got.length, 0, 'nothing delivered yet');

  const connectionId = ofType(c.log, 'connected')[0]!.ev.connectionId;
  let acked: { id: string; open: boolean } | undefined;
  c.client.on('disconnected', () => {
    void pub.adminPost('/v1/publish', { topic, data: { first: true } }).then(async (res) => {
      assert.equal(res.status, 200);
      acked = { id: ((await res.json()) as { id: string }).id, open: c.client.state === 'open' };
    });
  });
  assert.equal((await sub.adminPost('/v1/disconnect', { connectionId, reconnect: true })).status, 202);
  await eventually(() => ofType(c.log, 'connected').length === 2, 10_000);
  await eventually(() => got.length === 1, 5000);
  assert.ok(acked !== undefined && !acked.open, 'the event was stored while the client was away');
  assert.deepEqual(got.map((e) => [e.id, e.data]), [[acked.id, { first: true }]]);
  const joins = c.tap.sent.filter((w) => w.frame.type === 'join').map((w) => w.frame.since);
  assert.deepEqual(joins, [undefined, position], 'the rejoin resumed from the position');
  assert.deepEqual(ofType(c.log, 'recovered').map((r) => r.ev), [{ topic, recovered: true, since: position }]);
  assert.deepEqual(ofType(c.log, 'error'), []);
  await c.client.close();
}

describe('resume from the join position, embedded gateway', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway(AWAY);
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('a topic with no event yet: the first event, published while the client is away, arrives after the rejoin', async () => {
    await cutAndPublishMeanwhile(gw, gw, 'resume:empty');
  });

  test('a topic with history: the position is its newest id, and only what came after it is replayed', async () => {
    const before = await gw.adminPost('/v1/publish', { topic: 'resume:old', data: 'old' });
    assert.equal(before.status, 200);
    await cutAndPublishMeanwhile(gw, gw, 'resume:old', ((await before.json()) as { id: string }).id);
  });
});

/**
 * A subscriber of a keyed-only feed (WS_POSITION_REFRESH_MS=1000): the
 * `position` frames of the quiet topic move its resume point on from the
 * join's; cut off, it rejoins from the newest one it got, and the durable
 * event published meanwhile arrives once, recovered. (Past
 * WS_HISTORY_TTL_MS + max(WS_HISTORY_TTL_MS, 1 h) after the join, only a
 * mark still recovers with Redis: soak in benchmarks/chaos.)
 */
async function resumeFromMark(sub: Gateway, pub: Gateway, topic: string): Promise<void> {
  const c = sdk({ url: sub.url() });
  const got: SluiceEvent[] = [];
  const s = c.client.subscribe(topic, (e) => got.push(e));
  c.client.connect();
  await s.ready;
  const joinRef = c.tap.sent.find((w) => w.frame.type === 'join')!.frame.ref;
  const position = (c.tap.received.find((w) => w.frame.type === 'reply' && w.frame.ref === joinRef)!.frame as { data: { position: string } }).data.position;
  const marks = (): string[] => c.tap.received.flatMap((w) => (w.frame.type === 'position' && w.frame.topic === topic ? [String(w.frame.position)] : []));
  await eventually(() => marks().length >= 1, 10_000);
  assert.notEqual(s.lastId, position, 'the join position was replaced');
  assert.equal(s.lastId, marks().at(-1), 'by the newest mark');

  const connectionId = ofType(c.log, 'connected')[0]!.ev.connectionId;
  let away: { lastId: string | undefined; id?: string } | undefined;
  c.client.on('disconnected', () => {
    away = { lastId: s.lastId };
    void pub.adminPost('/v1/publish', { topic, data: { while: 'away' } }).then(async (res) => {
      assert.equal(res.status, 200);
      away!.id = ((await res.json()) as { id: string }).id;
    });
  });
  assert.equal((await sub.adminPost('/v1/disconnect', { connectionId, reconnect: true })).status, 202);
  await eventually(() => ofType(c.log, 'connected').length === 2, 10_000);
  await eventually(() => got.length === 1, 5000);
  assert.ok(away?.lastId !== undefined && marks().includes(away.lastId), 'the resume point at the cut was a mark');
  assert.deepEqual(got.map((e) => [e.id, e.data]), [[away.id, { while: 'away' }]]);
  const joins = c.tap.sent.filter((w) => w.frame.type === 'join').map((w) => w.frame.since);
  assert.deepEqual(joins, [undefined, away.lastId], 'the rejoin resumed from the mark');
  assert.deepEqual(ofType(c.log, 'recovered').map((r) => r.ev), [{ topic, recovered: true, since: away.lastId }]);
  assert.deepEqual(ofType(c.log, 'error'), []);
  await c.client.close();
}

// Two nodes on Redis only: the marks of an embedded gateway reach the
// socket the same way (apps/gateway/test/positions.test.ts), and the SDK
// reads them the same way.
describe('resume from a position mark of a quiet topic', () => {
  let redis: RedisServer;
  let a: Gateway;
  let b: Gateway;
  const MARKS = { ...AWAY, WS_POSITION_REFRESH_MS: '1000' };
  before(async () => {
    redis = await startRedis();
    [a, b] = await Promise.all([startGateway({ REDIS_URL: redis.url, ...MARKS }), startGateway({ REDIS_URL: redis.url, ...MARKS })]);
    for (const g of [a, b]) await eventually(async () => (await fetch(g.admin('/health/ready'))).status === 200);
  });
  after(async () => {
    for (const g of [a, b]) assert.equal(await g.stop(), 0, g.stderr());
    await redis.stop();
  });

  test('two nodes on one Redis, the event published through the other', async () => {
    await resumeFromMark(a, b, 'marks:cluster');
  });
});

describe('resume from the join position, two nodes on one Redis', () => {
  let redis: RedisServer;
  let a: Gateway;
  let b: Gateway;
  before(async () => {
    redis = await startRedis();
    [a, b] = await Promise.all([startGateway({ REDIS_URL: redis.url, ...AWAY }), startGateway({ REDIS_URL: redis.url, ...AWAY })]);
    for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
  });
  after(async () => {
    assert.equal(await a.stop(), 0, a.stderr());
    assert.equal(await b.stop(), 0, b.stderr());
    await redis.stop();
  });

  test('the first event of a topic, published through the other node while the client is away, arrives after the rejoin', async () => {
    await cutAndPublishMeanwhile(a, b, 'resume:cluster');
  });
});
