/** The SDK against one real gateway: the API, the outbox's local checks, 1009, heartbeats. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SluiceError, type SluiceEvent } from '../src/index.ts';
import { counts, eventually, type Gateway, history, metricValue, NodeWebSocket, ofType, sdk, sleep, startGateway, Tap } from './helpers.ts';

describe('one gateway, defaults', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_MAX_FRAME_BYTES: '4096', WS_HARD_MAX_FRAME_BYTES: '65536', WS_MAX_MESSAGES: '200' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('connects with the plain ws export, publishes every class, and a subscriber gets them in order with ids', async () => {
    const { client: pub } = sdk({ url: gw.url(), WebSocket: NodeWebSocket });
    const { client: subClient, log } = sdk({ url: gw.url() });
    assert.equal(pub.state, 'idle');
    const got: SluiceEvent[] = [];
    const sub = subClient.subscribe('api:1', (e) => got.push(e));
    subClient.connect();
    assert.equal(subClient.state, 'connecting');
    assert.deepEqual(await sub.ready, { recovered: undefined });
    assert.equal(subClient.state, 'open');
    const connected = ofType(log, 'connected');
    assert.equal(connected.length, 1);
    assert.match(connected[0]!.ev.connectionId, /^[0-9a-f]+\.\d+\.\d+\.\d+$/);
    assert.equal(connected[0]!.ev.limits.maxMessages, 200);
    pub.connect();
    const a = await pub.publish('api:1', { n: 1 });
    const b = await pub.publish('api:1', { n: 2 }, { key: 'K' });
    const c = await pub.publish('api:1', { n: 3 }, { ephemeral: true });
    const d = await pub.publish('api:1', { n: 4 }, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
    assert.match(a.id!, /^\d+-\d+$/);
    assert.deepEqual(b, {});
    assert.deepEqual(c, {});
    await eventually(() => got.length === 4);
    assert.deepEqual(got.map((e) => e.data), [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]);
    assert.equal(got[0]!.id, a.id);
    assert.equal(got[1]!.key, 'K');
    assert.equal(got[1]!.id, undefined);
    assert.equal(got[3]!.traceparent, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    assert.equal(sub.lastId, d.id, 'lastId follows durable events only');
    await pub.close();
    await subClient.close();
    assert.equal(subClient.state, 'closed');
    const disc = ofType(log, 'disconnected');
    assert.equal(disc.length, 1);
    assert.equal(disc[0]!.ev.willReconnect, false);
  });

  test('durable publishes carry a generated idempotencyKey, unique per publish; keyed and ephemeral carry none', async () => {
    const { client, tap } = sdk({ url: gw.url() });
    client.connect();
    const results = await Promise.all([
      client.publish('idem:gen', 1), client.publish('idem:gen', 2), client.publish('idem:gen', 3, { key: 'k' }),
      client.publish('idem:gen', 4, { ephemeral: true }), client.publish('idem:gen', 5, { idempotencyKey: 'mine-1' }),
    ]);
    const frames = tap.sentOfType('publish').map((w) => w.frame);
    const keys = frames.map((f) => f.idempotencyKey);
    assert.equal(typeof keys[0], 'string');
    assert.equal(typeof keys[1], 'string');
    assert.notEqual(keys[0], keys[1]);
    assert.deepEqual(keys.slice(2), [undefined, undefined, 'mine-1']);
    // The generated key really is the idempotency key: repeating it by hand is a duplicate of the first.
    const again = await client.publish('idem:gen', 'other', { idempotencyKey: keys[0] as string });
    assert.deepEqual(again, { id: results[0].id, duplicate: true });
    await client.close();
  });

  test('publishes the server would refuse are refused locally and never sent: bad topic, key with ephemeral, above maxFrameBytes', async () => {
    const { client, tap, log } = sdk({ url: gw.url() });
    client.connect();
    await client.publish('local:ok', 'warm-up');
    const before = tap.sent.length;
    await assert.rejects(client.publish('bad topic', 1), (e: SluiceError) => e instanceof SluiceError && e.code === 'bad_request');
    await assert.rejects(client.publish('local:x', 1, { key: 'k', ephemeral: true }), { code: 'bad_request' });
    await assert.rejects(client.publish('local:x', 1, { key: 'k', idempotencyKey: 'i' }), { code: 'bad_request' });
    await assert.rejects(client.publish('local:x', undefined), { code: 'bad_request' });
    await assert.rejects(client.publish('local:big', 'x'.repeat(5000)), { code: 'payload_too_large' });
    assert.equal(tap.sent.length, before, 'nothing went on the wire');
    assert.throws(() => client.subscribe('bad topic', () => undefined), { code: 'bad_request' });
    assert.throws(() => client.subscribe('local:x', () => undefined, { since: 'yesterday' }), { code: 'bad_request' });
    // Each refusal was also reported on the error event.
    assert.deepEqual(ofType(log, 'error').map((e) => e.ev.code), ['bad_request', 'bad_request', 'bad_request', 'bad_request', 'payload_too_large']);
    assert.equal(await metricValue(gw, 'sluice_limit_rejections_total', '{reason="payload_too_large"}'), 0);
    assert.equal(client.state, 'open');
    await client.close();
  });

  test('the outbox is bounded: beyond outboxLimit publish() rejects with outbox_full; the kept ones are sent once connected', async () => {
    const { client, log, tap } = sdk({ url: gw.url(), outboxLimit: 5 });
    const kept = Array.from({ length: 5 }, (_, i) => client.publish('outbox:1', i));
    await assert.rejects(client.publish('outbox:1', 5), (e: SluiceError) => e.code === 'outbox_full');
    await assert.rejects(client.publish('outbox:1', 6), { code: 'outbox_full' });
    assert.equal(ofType(log, 'error').filter((e) => e.ev.code === 'outbox_full').length, 2);
    client.connect();
    const ids = (await Promise.all(kept)).map((r) => r.id);
    assert.equal(new Set(ids).size, 5);
    // With room again, publish() accepts.
    await client.publish('outbox:1', 7);
    assert.deepEqual(tap.sentOfType('publish').map((w) => w.frame.data), [0, 1, 2, 3, 4, 7], 'sent in publish() order');
    // Stored once each. (Not asserted: the stored order. The embedded gateway can reorder one
    // socket's publishes that carry different idempotency keys; reported with the SDK.)
    const events = await history(gw, 'outbox:1');
    assert.deepEqual(events.map((e) => e.data as number).sort((x, y) => x - y), [0, 1, 2, 3, 4, 7]);
    await client.close();
  });

  test('close() rejects what is not yet acknowledged with closed; a closed client refuses publish() until connect()', async () => {
    const { client } = sdk({ url: gw.url() });
    const p = client.publish('closing:1', 1);
    await client.close();
    await assert.rejects(p, { code: 'closed' });
    await assert.rejects(client.publish('closing:1', 2), { code: 'closed' });
    client.connect();
    assert.match((await client.publish('closing:1', 3)).id!, /^\d+-\d+$/);
    await client.close();
  });

  test('1009: a frame above the hard cap is not resent and rejects payload_too_large; the publishes in flight with it are resent and acked once', async () => {
    // The tap raises the limits the welcome announces, so the SDK's local check lets the oversized frame go.
    const tap = new Tap({
      incoming: (f) => (f.type === 'welcome'
        ? { ...f, limits: { ...(f.limits as object), maxFrameBytes: 10_000_000, hardMaxFrameBytes: 10_000_000 } }
        : f),
    });
    const { client, log } = sdk({ url: gw.url(), backoff: { initialMs: 50 } }, tap);
    client.connect();
    await client.publish('big:1', 'warm-up');
    const small1 = client.publish('big:1', 'a');
    const big = client.publish('big:1', 'x'.repeat(100_000));
    const small2 = client.publish('big:1', 'b');
    await assert.rejects(big, (e: SluiceError) => e.code === 'payload_too_large' && e.closeCode === 1009);
    const [r1, r2] = await Promise.all([small1, small2]);
    const disc = ofType(log, 'disconnected');
    assert.equal(disc[0]!.ev.code, 1009);
    assert.equal(disc[0]!.ev.willReconnect, true);
    assert.equal(tap.sockets.length, 2, 'reconnected once');
    const bigSends = tap.sentOfType('publish').filter((w) => typeof w.frame.data === 'string' && (w.frame.data as string).length > 1000);
    assert.equal(bigSends.length, 1, 'the oversized frame was sent once and never again');
    const events = await history(gw, 'big:1');
    assert.deepEqual(events.map((e) => e.data).sort(), ['a', 'b', 'warm-up']);
    assert.deepEqual(events.filter((e) => e.data !== 'warm-up').map((e) => e.id).sort(), [r1.id, r2.id].sort());
    await client.close();
  });

  test('heartbeat: a connection that delivers nothing is declared dead after a ping goes unanswered, and replaced', async () => {
    const { client, tap, log } = sdk({ url: gw.url(), heartbeatMs: 300, backoff: { initialMs: 50 } });
    const got: unknown[] = [];
    client.subscribe('hb:1', (e) => got.push(e.data));
    client.connect();
    await eventually(() => client.state === 'open');
    await sleep(700);
    assert.equal(tap.sockets.length, 1, 'an idle but live connection is kept: its pings are answered');
    assert.ok(tap.sentOfType('ping').length >= 1, 'it pinged while idle');
    const stalled = tap.last;
    stalled.pauseReading();
    const pausedAt = Date.now();
    await eventually(() => ofType(log, 'disconnected').length === 1, 5000);
    const disc = ofType(log, 'disconnected')[0]!;
    assert.equal(disc.ev.reason, 'heartbeat_timeout');
    assert.equal(disc.ev.willReconnect, true);
    // Nothing was read after the pause; the bound is two heartbeats from the last frame read.
    const detectedIn = disc.at - pausedAt;
    assert.ok(detectedIn <= 2 * 300 + 500, `declared dead ${detectedIn} ms after it stopped delivering`);
    await eventually(() => tap.sockets.length === 2 && client.state === 'open', 5000);
    const { client: p } = sdk({ url: gw.url(), WebSocket: NodeWebSocket });
    p.connect();
    await p.publish('hb:1', 'after');
    await eventually(() => got.includes('after'));
    await p.close();
    await client.close();
  });

  test('a publish stored but whose ack was lost is resent after the reconnect with the same key: one event, the first id', async () => {
    const { client, tap, log } = sdk({ url: gw.url(), heartbeatMs: 300, backoff: { initialMs: 50 } });
    client.connect();
    await client.publish('lost:1', 'before');
    tap.last.pauseReading();
    const p = client.publish('lost:1', 'lost-ack');
    // The gateway stores it and acks; the ack sits unread until the heartbeat gives the socket up.
    const r = await p;
    assert.equal(ofType(log, 'disconnected')[0]!.ev.reason, 'heartbeat_timeout');
    const sends = tap.sentOfType('publish').filter((w) => w.frame.data === 'lost-ack');
    assert.equal(sends.length, 2, 'sent on both sockets');
    assert.equal(sends[0]!.frame.idempotencyKey, sends[1]!.frame.idempotencyKey);
    assert.equal(r.duplicate, true, 'the resend was recognised');
    const events = (await history(gw, 'lost:1')).filter((e) => e.data === 'lost-ack');
    assert.equal(events.length, 1);
    assert.equal(events[0]!.id, r.id);
    await client.close();
  });
});

describe('subscriptions', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway();
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('unsubscribe leaves the topic: no event after it, and counts of duplicates stay at one', async () => {
    const { client, tap } = sdk({ url: gw.url() });
    const got: unknown[] = [];
    const sub = client.subscribe('leave:1', (e) => got.push(e.data));
    client.connect();
    await sub.ready;
    await client.publish('leave:1', 1);
    await eventually(() => got.length === 1);
    sub.unsubscribe();
    await eventually(() => tap.sentOfType('leave').length === 1);
    await eventually(() => tap.received.some((w) => w.frame.type === 'reply' && w.frame.ref === tap.sentOfType('leave')[0]!.frame.ref));
    await client.publish('leave:1', 2);
    await client.publish('leave:other', 'probe');
    await sleep(100);
    assert.deepEqual(got, [1]);
    assert.deepEqual([...counts(tap.sentOfType('join').map((w) => w.frame.topic)).values()], [1]);
    await client.close();
  });
});
