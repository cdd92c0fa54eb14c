// Lifecycle webhooks (issue 19): connect, disconnect with its code,
// presence join and leave, topic occupied and vacated, in signed batches,
// at least once (a failed batch is sent again with the same ids), from a
// bounded queue that counts what it drops; against a real node:http
// receiver that can fail, hang and go away.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { verifyBody } from '@sluice/telemetry';
import { Client, eventually, type Gateway, metricValue, startGateway } from './harness.ts';

const SECRET = 'webhook-secret-of-at-least-32-characters';

interface Batch {
  readonly headers: IncomingMessage['headers'];
  readonly raw: string;
  readonly events: Record<string, unknown>[];
}

class Receiver {
  readonly batches: Batch[] = [];
  /** What to answer: a status, or hang. */
  mode: number | 'hang' = 200;
  private readonly held = new Set<ServerResponse>();
  private server: Server | undefined;
  port = 0;

  async start(port = 0): Promise<void> {
    this.server = createServer((req, res) => {
      let raw = '';
      req.on('data', (c: Buffer) => (raw += c.toString()));
      req.on('end', () => {
        this.batches.push({ headers: req.headers, raw, events: (JSON.parse(raw) as { events: Record<string, unknown>[] }).events });
        if (this.mode === 'hang') {
          this.held.add(res);
          return;
        }
        res.writeHead(this.mode).end();
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/hooks`;
  }

  events(type?: string): Record<string, unknown>[] {
    return this.batches.flatMap((b) => b.events).filter((e) => type === undefined || e['type'] === type);
  }

  async stop(): Promise<void> {
    for (const r of this.held) r.destroy();
    this.server!.closeAllConnections();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
  }
}

describe('lifecycle webhooks', () => {
  const rx = new Receiver();
  let gw: Gateway;
  before(async () => {
    await rx.start();
    gw = await startGateway({ WS_WEBHOOK_URL: rx.url, WS_WEBHOOK_SECRET: SECRET, WS_WEBHOOK_BATCH_MS: '50', WS_PRESENCE_TOPICS: 'room:*',
      WS_PRESENCE_DIFF_MS: '50', WS_WEBHOOK_RETRY_MAX_MS: '200', WS_WEBHOOK_TIMEOUT_MS: '500' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await rx.stop();
  });

  test('connect and disconnect (with the close code) arrive in signed batches, each event with an id', async () => {
    const a = await Client.connect(gw.url());
    const b = await Client.connect(gw.url());
    await eventually(() => rx.events('connect').length >= 2);
    const ids = [a.welcome.connectionId, b.welcome.connectionId];
    const connects = rx.events('connect').filter((e) => ids.includes(e['connectionId'] as string));
    assert.equal(connects.length, 2);
    for (const e of connects) {
      assert.deepEqual([e['tenant'], e['user'], typeof e['id'], typeof e['time'], typeof e['node']], ['default', 'anonymous', 'string', 'number', 'string']);
    }
    a.ws.close(4321, 'bye');
    await eventually(() => rx.events('disconnect').some((e) => e['connectionId'] === ids[0]));
    const gone = rx.events('disconnect').find((e) => e['connectionId'] === ids[0])!;
    assert.deepEqual([gone['code'], gone['reason']], [4321, 'bye']);
    b.close();
    await eventually(() => rx.events('disconnect').some((e) => e['connectionId'] === ids[1]));
    assert.equal(await metricValue(gw, 'sluice_webhook_events_total', '{type="connect"}'), 2);
    assert.equal(await metricValue(gw, 'sluice_webhook_events_total', '{type="disconnect"}'), 2);
    const all = rx.events();
    assert.equal(new Set(all.map((e) => e['id'])).size, all.length, 'every event has an id of its own');
    // Signed: HMAC-SHA256 over "<timestamp>.<body>"; a wrong secret or an old timestamp does not verify.
    for (const batch of rx.batches) {
      const sig = batch.headers['x-sluice-signature'] as string;
      const ts = batch.headers['x-sluice-timestamp'] as string;
      assert.equal(verifyBody(SECRET, sig, ts, batch.raw, Date.now()), true);
      assert.equal(verifyBody(`${SECRET}x`, sig, ts, batch.raw, Date.now()), false);
      assert.equal(verifyBody(SECRET, sig, ts, `${batch.raw} `, Date.now()), false);
      assert.equal(verifyBody(SECRET, sig, ts, batch.raw, Number(ts) + 600_000), false, 'replayed 10 minutes later');
    }
    assert.ok(rx.batches.some((x) => x.events.length >= 2), 'events share batches');
  });

  test('presence join once per user however many sockets, leave after the last; topic occupied and vacated per node', async () => {
    const c1 = await Client.connect(gw.url());
    const c2 = await Client.connect(gw.url());
    for (const c of [c1, c2]) assert.equal((await c.request({ type: 'join', topic: 'room:wh' })).status, 'ok');
    await eventually(() => rx.events('presence_join').some((e) => e['topic'] === 'room:wh'));
    await eventually(() => rx.events('topic_occupied').some((e) => e['topic'] === 'room:wh'));
    c1.close();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(rx.events('presence_leave').filter((e) => e['topic'] === 'room:wh').length, 0, 'a socket of the user is still there');
    assert.equal(rx.events('topic_vacated').filter((e) => e['topic'] === 'room:wh').length, 0);
    c2.close();
    await eventually(() => rx.events('presence_leave').some((e) => e['topic'] === 'room:wh'));
    await eventually(() => rx.events('topic_vacated').some((e) => e['topic'] === 'room:wh'));
    assert.equal(rx.events('presence_join').filter((e) => e['topic'] === 'room:wh').length, 1);
    assert.equal(rx.events('topic_occupied').filter((e) => e['topic'] === 'room:wh').length, 1);
    assert.deepEqual([rx.events('presence_leave').find((e) => e['topic'] === 'room:wh')!['user'], rx.events('topic_vacated')[0]!['tenant']],
      ['anonymous', 'default']);
  });

  test('a batch answered 500, or not answered in time, is sent again with the same ids', async () => {
    rx.mode = 500;
    const before = rx.batches.length;
    const c = await Client.connect(gw.url());
    await eventually(() => rx.batches.length >= before + 2, 5000);
    const [first, second] = rx.batches.slice(before);
    assert.deepEqual(second!.events.map((e) => e['id']), first!.events.map((e) => e['id']));
    assert.equal(first!.headers['x-sluice-batch'], second!.headers['x-sluice-batch']);
    assert.deepEqual([first!.headers['x-sluice-attempt'], second!.headers['x-sluice-attempt']], ['1', '2']);
    rx.mode = 'hang';
    const hung = rx.batches.length;
    await eventually(() => rx.batches.length >= hung + 2, 5000);
    rx.mode = 200;
    await eventually(() => rx.batches.at(-1)!.headers['x-sluice-attempt'] !== undefined && rx.events('connect').some((e) => e['connectionId'] === c.welcome.connectionId));
    await eventually(async () => (await metricValue(gw, 'sluice_webhook_queue_events')) === 0, 5000);
    assert.ok(await metricValue(gw, 'sluice_webhook_batches_total', '{outcome="error"}') >= 3);
    assert.equal(await metricValue(gw, 'sluice_webhook_retries_total'), await metricValue(gw, 'sluice_webhook_batches_total', '{outcome="error"}'));
    c.close();
  });
});

describe('a webhook receiver that is down', () => {
  const rx = new Receiver();
  let gw: Gateway;
  before(async () => {
    await rx.start();
    const port = rx.port;
    await rx.stop();
    rx.port = port;
    gw = await startGateway({ WS_WEBHOOK_URL: rx.url, WS_WEBHOOK_SECRET: SECRET, WS_WEBHOOK_QUEUE_MAX: '100', WS_WEBHOOK_BATCH_MAX: '10',
      WS_WEBHOOK_BATCH_MS: '20', WS_WEBHOOK_RETRY_MAX_MS: '300', WS_WEBHOOK_EVENTS: 'connect,disconnect' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await rx.stop();
  });

  test('keeps at most WS_WEBHOOK_QUEUE_MAX events, counts every one it drops, and sends the rest when the receiver is back', async () => {
    for (let i = 0; i < 15; i++) {
      const cs = await Promise.all(Array.from({ length: 10 }, () => Client.connect(gw.url())));
      for (const c of cs) c.close();
    }
    const produced = 300;
    const collected = async (): Promise<number> => (await metricValue(gw, 'sluice_webhook_events_total', '{type="connect"}')) +
      (await metricValue(gw, 'sluice_webhook_events_total', '{type="disconnect"}'));
    await eventually(async () => (await collected()) === produced, 10_000);
    // Nothing was delivered, so the node holds exactly WS_WEBHOOK_QUEUE_MAX (the batch being retried included) and dropped the rest.
    assert.equal(await metricValue(gw, 'sluice_webhook_queue_events'), 100);
    assert.equal(await metricValue(gw, 'sluice_webhook_events_dropped_total'), produced - 100);
    assert.ok(await metricValue(gw, 'sluice_webhook_retries_total') >= 1, 'the receiver was tried, and failed');
    const pending = 100;
    assert.equal((await (await fetch(gw.admin('/health/ready'))).status), 200, 'the node is unaffected');
    await rx.start(rx.port);
    await eventually(() => rx.events().length === pending, 10_000);
    assert.equal(new Set(rx.events().map((e) => e['id'])).size, pending);
    // The newest events are the ones kept: the last disconnects made are there.
    assert.equal(rx.events().at(-1)!['type'], 'disconnect');
  });
});
