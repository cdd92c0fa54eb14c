/** A subscriber that stops reading is closed with 4503; the client waits as told and resumes with since, without a gap. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, eventually, type Gateway, ofType, sdk, startGateway } from './helpers.ts';

const PAD = 'x'.repeat(16_000);

describe('slow consumer', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({
      WS_WORKERS: '1', WS_MAX_MESSAGES: '1000000', WS_MAX_BUFFERED_BYTES: '16777216', WS_SLOW_CLIENT_BUFFER_BYTES: '32768',
      WS_SLOW_CONSUMER_QUEUE_LEN: '50', WS_HISTORY_SIZE: '5000', WS_RETRY_AFTER_MIN_MS: '400', WS_RETRY_AFTER_MAX_MS: '800',
    });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('4503: reconnects no sooner than retryAfterMs, rejoins with since = the last id it got, recovered, every event once and in order', async () => {
    const { client, tap, log } = sdk({ url: gw.url() });
    const got: string[] = [];
    const sub = client.subscribe('slow:1', (e) => got.push(e.id!));
    client.connect();
    await sub.ready;
    const pub = await Client.connect(gw.url());
    tap.last.pauseReading();
    // 400 durable events as fast as acks come back, 8 in flight.
    const ids: string[] = [];
    for (let i = 0; i < 400; i++) {
      pub.send({ type: 'publish', ref: `f${i}`, topic: 'slow:1', data: { i, pad: PAD } });
      if (i >= 8) ids.push(((await pub.next((f) => f.type === 'reply' && f.ref === `f${i - 8}`, 30_000)).data as { id: string }).id);
    }
    for (let i = 392; i < 400; i++) ids.push(((await pub.next((f) => f.type === 'reply' && f.ref === `f${i}`, 30_000)).data as { id: string }).id);
    tap.last.resumeReading();
    await eventually(() => got.length === 400, 30_000);
    assert.deepEqual(got, ids, 'every event once, in order, across the close');

    const disc = ofType(log, 'disconnected');
    assert.equal(disc.length, 1);
    assert.equal(disc[0]!.ev.code, 4503);
    assert.equal(disc[0]!.ev.reason, 'slow_consumer');
    const hint = disc[0]!.ev.retryAfterMs!;
    assert.ok(hint >= 400 && hint <= 800);
    assert.equal(tap.sockets.length, 2);
    assert.ok(tap.sockets[1]!.createdAt - disc[0]!.at >= hint, `reconnected ${tap.sockets[1]!.createdAt - disc[0]!.at} ms after a ${hint} ms hint`);
    const rejoin = tap.sentOfType('join').at(-1)!.frame;
    const seenOnFirst = tap.received.filter((w) => w.at <= disc[0]!.at && w.frame.type === 'event').map((w) => w.frame.id);
    assert.equal(rejoin.since, seenOnFirst.at(-1), 'since is the last id the first socket delivered');
    assert.ok(seenOnFirst.length < 400, 'the close did cut the stream');
    assert.deepEqual(ofType(log, 'recovered').map((r) => r.ev), [{ topic: 'slow:1', recovered: true, since: rejoin.since }]);
    assert.equal(sub.lastId, ids.at(-1));
    pub.close();
    await client.close();
  });
});
