import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { Client, type Gateway, metricValue, startGateway } from './harness.ts';

// Small limits so that each one is reached in a few frames. Two shards.
const LIMITS = {
  WS_MAX_FRAME_BYTES: '1024',
  WS_HARD_MAX_FRAME_BYTES: '4096',
  WS_MAX_MESSAGES: '12',
  WS_RATE_WINDOW_MS: '1000',
  WS_MAX_JOINS: '3',
  WS_MAX_STRIKES: '5',
};

let gw: Gateway;
before(async () => {
  gw = await startGateway(LIMITS);
});
after(async () => {
  assert.equal(await gw.stop(), 0);
});

/** A publish frame of exactly `bytes` bytes, ref first as the SDK writes it. */
function frameOfSize(ref: string, bytes: number): string {
  const head = `{"type":"publish","ref":"${ref}","topic":"big","ephemeral":true,"data":"`;
  const tail = '"}';
  return head + 'x'.repeat(bytes - head.length - tail.length) + tail;
}

describe('frame caps', () => {
  test('a frame of exactly WS_MAX_FRAME_BYTES is accepted; one byte more is answered payload_too_large with its ref', async () => {
    const c = await Client.connect(gw.url());
    c.send(frameOfSize('at', 1024));
    assert.equal((await c.next((f) => f.ref === 'at')).status, 'ok');
    c.send(frameOfSize('over', 1025));
    const r = await c.next((f) => f.ref === 'over');
    assert.equal(r.status, 'error');
    assert.equal(r.reason, 'payload_too_large');
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    c.close();
  });

  test('an oversize frame whose ref is not first is answered with an error frame', async () => {
    const c = await Client.connect(gw.url());
    c.send(`{"type":"publish","topic":"big","data":"${'x'.repeat(1100)}","ref":"late"}`);
    const r = await c.next((f) => f.type === 'error');
    assert.equal(r.reason, 'payload_too_large');
    c.close();
  });

  test('a frame of exactly WS_HARD_MAX_FRAME_BYTES is only rejected; one byte more closes with 1009', async () => {
    const c = await Client.connect(gw.url());
    c.send(frameOfSize('hard', 4096));
    assert.equal((await c.next((f) => f.ref === 'hard')).reason, 'payload_too_large');
    c.send(frameOfSize('hard1', 4097));
    const closed = await c.closedBy();
    assert.equal(closed.code, 1009);
    assert.deepEqual(JSON.parse(closed.reason), { reason: 'payload_too_large' });
  });

  test('a plain ws client sees 1009 for a frame of twice the hard cap (the most the guard reads)', async () => {
    const ws = new WebSocket(gw.url());
    await new Promise((r) => ws.once('message', r));
    ws.send('x'.repeat(2 * 4096));
    const [code] = (await new Promise<[number, Buffer]>((r) => ws.once('close', (...a) => r(a))));
    assert.equal(code, 1009);
  });
});

describe('per-socket fixed window', () => {
  test('WS_MAX_MESSAGES frames pass, the next is rate_limited with the time left in the window, pings count', async () => {
    const c = await Client.connect(gw.url());
    const started = Date.now();
    for (let i = 0; i < 11; i++) c.send({ type: 'ping', ref: `p${i}` });
    c.send({ type: 'publish', ref: 'last-allowed', topic: 'w', data: 1, ephemeral: true });
    c.send({ type: 'publish', ref: 'one-past', topic: 'w', data: 1, ephemeral: true });
    for (let i = 0; i < 11; i++) assert.equal((await c.next((f) => f.ref === `p${i}`)).type, 'pong');
    assert.equal((await c.next((f) => f.ref === 'last-allowed')).status, 'ok');
    const limited = await c.next((f) => f.ref === 'one-past');
    const elapsed = Date.now() - started;
    assert.equal(limited.reason, 'rate_limited');
    assert.equal(typeof limited.retryAfterMs, 'number');
    assert.ok((limited.retryAfterMs as number) >= 1 && (limited.retryAfterMs as number) <= 1000, String(limited.retryAfterMs));
    assert.ok((limited.retryAfterMs as number) >= 1000 - elapsed - 5, `retryAfterMs ${limited.retryAfterMs} after ${elapsed} ms`);
    // After the hint the socket is served again.
    await new Promise((r) => setTimeout(r, (limited.retryAfterMs as number) + 20));
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    c.close();
  });

  test('binary frames count toward the window', async () => {
    const c = await Client.connect(gw.url());
    for (let i = 0; i < 3; i++) c.ws.send(Buffer.from([1, 2, 3]), { binary: true });
    for (let i = 0; i < 9; i++) c.send({ type: 'ping', ref: `q${i}` });
    c.send({ type: 'ping', ref: 'after-binary' });
    const r = await c.next((f) => f.ref === 'after-binary');
    assert.equal(r.reason, 'rate_limited');
    c.close();
  });
});

describe('joined-topics cap', () => {
  test('WS_MAX_JOINS joins pass, the next answers too_many_joins, a leave frees a slot', async () => {
    const c = await Client.connect(gw.url());
    for (const t of ['j1', 'j2', 'j3']) assert.equal((await c.request({ type: 'join', topic: t })).status, 'ok');
    const over = await c.request({ type: 'join', topic: 'j4' });
    assert.equal(over.reason, 'too_many_joins');
    assert.equal((await c.request({ type: 'leave', topic: 'j1' })).status, 'ok');
    assert.equal((await c.request({ type: 'join', topic: 'j4' })).status, 'ok');
    c.close();
  });
});

describe('strikes', () => {
  test('WS_MAX_STRIKES - 1 rejected frames leave the socket open, an accepted frame resets the count', async () => {
    const c = await Client.connect(gw.url());
    for (let i = 0; i < 4; i++) c.send('nope');
    c.send({ type: 'ping', ref: 'good' });
    assert.equal((await c.next((f) => f.ref === 'good')).type, 'pong');
    for (let i = 0; i < 3; i++) c.send('nope');
    c.send({ type: 'ping', ref: 'still' });
    assert.equal((await c.next((f) => f.ref === 'still')).type, 'pong');
    c.close();
  });

  test('WS_MAX_STRIKES rejected frames in a row close with 1008 abusive', async () => {
    const c = await Client.connect(gw.url());
    for (let i = 0; i < 5; i++) c.send('nope');
    const closed = await c.closedBy();
    assert.equal(closed.code, 1008);
    assert.deepEqual(JSON.parse(closed.reason), { reason: 'abusive' });
    assert.equal(c.frames.filter((f) => f.type === 'error').length, 5);
  });
});

describe('rejections are counted by reason and logged below error', () => {
  test('the counters of /metrics add up over both shards', async () => {
    const before = await metricValue(gw, 'sluice_limit_rejections_total', '{reason="not_joined"}');
    const clients = await Promise.all(Array.from({ length: 6 }, () => Client.connect(gw.url())));
    assert.ok(new Set(clients.map((c) => c.shard)).size >= 1);
    for (const c of clients) assert.equal((await c.request({ type: 'leave', topic: 'never' })).reason, 'not_joined');
    assert.equal(await metricValue(gw, 'sluice_limit_rejections_total', '{reason="not_joined"}'), before + 6);
    for (const c of clients) c.close();
    assert.ok(await metricValue(gw, 'sluice_frames_in_total') > 0);
    assert.equal(gw.logs.filter((l) => l.level === 'error' || l.level === 'fatal').length, 0);
  });
});

describe('the per-IP upgrade window in embedded mode (the shards\' shared table)', () => {
  let ipGw: Gateway;
  before(async () => {
    ipGw = await startGateway({ WS_IP_CONNECT_LIMIT: '20', WS_IP_WINDOW_MS: '600000' });
  });
  after(async () => {
    assert.equal(await ipGw.stop(), 0);
  });

  test('40 upgrades at once from one address: exactly 20 accepted over both shards, 20 refused 429 with Retry-After', async () => {
    const before = {
      accepted: await metricValue(ipGw, 'sluice_upgrades_total', '{outcome="accepted"}'),
      refused: await metricValue(ipGw, 'sluice_upgrades_total', '{outcome="ip_rate_limited"}'),
    };
    const outcomes = await Promise.all(Array.from({ length: 40 }, () => new Promise<{ status: number; retryAfter?: string; body?: string }>((resolve, reject) => {
      const ws = new WebSocket(ipGw.url(), ['sluice.v1']);
      ws.once('open', () => {
        ws.close();
        resolve({ status: 101 });
      });
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], body }));
      });
      ws.once('error', reject);
    })));
    // Each shard counting on its own would let up to 20 in on each.
    assert.equal(outcomes.filter((o) => o.status === 101).length, 20);
    const refused = outcomes.filter((o) => o.status !== 101);
    assert.equal(refused.length, 20);
    for (const r of refused) {
      assert.equal(r.status, 429);
      assert.ok(Number(r.retryAfter) >= 1, `Retry-After ${r.retryAfter}`);
      const body = JSON.parse(r.body!) as { reason: string; retryAfterMs: number };
      assert.equal(body.reason, 'ip_rate_limited');
      assert.ok(body.retryAfterMs > 0);
    }
    assert.equal(await metricValue(ipGw, 'sluice_upgrades_total', '{outcome="accepted"}') - before.accepted, 20);
    assert.equal(await metricValue(ipGw, 'sluice_upgrades_total', '{outcome="ip_rate_limited"}') - before.refused, 20);
  });
});
