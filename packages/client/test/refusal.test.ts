/**
 * A gateway that refuses the upgrade with 503: the client waits as told, and
 * tries another URL first; under the node's upgrade budget (WS_UPGRADE_RATE)
 * it waits its place, not a growing backoff.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, eventually, type Gateway, ofType, sdk, startGateway } from './helpers.ts';

describe('503 at the upgrade', () => {
  let full: Gateway;
  let open: Gateway;
  let occupant: Client;
  before(async () => {
    // One socket fills `full`; its 503s carry retryAfterMs in [700, 900].
    [full, open] = await Promise.all([
      startGateway({ WS_MAX_SOCKETS: '1', WS_RETRY_AFTER_MIN_MS: '700', WS_RETRY_AFTER_MAX_MS: '900' }),
      startGateway(),
    ]);
    occupant = await Client.connect(full.url());
  });
  after(async () => {
    for (const gw of [full, open]) assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('waits at least retryAfterMs between attempts, then gets in once there is room', async () => {
    const { client, tap, log } = sdk({ url: full.url(), backoff: { initialMs: 10 } });
    client.connect();
    await eventually(() => ofType(log, 'reconnecting').length >= 3, 10_000);
    occupant.close();
    await eventually(() => client.state === 'open', 10_000);
    const waits = ofType(log, 'reconnecting');
    for (const w of waits) {
      assert.equal(w.ev.status, 503);
      assert.equal(w.ev.reason, 'unavailable');
      assert.ok(w.ev.retryAfterMs! >= 700 && w.ev.retryAfterMs! <= 900, `hint ${w.ev.retryAfterMs}`);
      assert.ok(w.ev.inMs >= w.ev.retryAfterMs!, `announced ${w.ev.inMs} ms for a hint of ${w.ev.retryAfterMs}`);
    }
    // Measured between socket creations: every retry came after at least the hint the refusal before it gave.
    const starts = tap.sockets.map((s) => s.createdAt);
    assert.ok(starts.length >= 4);
    for (let i = 1; i < starts.length; i++) {
      const hint = waits[i - 1]!.ev.retryAfterMs!;
      assert.ok(starts[i]! - starts[i - 1]! >= hint, `attempt ${i + 1} came ${starts[i]! - starts[i - 1]!} ms after a ${hint} ms hint`);
    }
    assert.equal(ofType(log, 'disconnected').length, 0, 'a refused attempt is not a disconnect');
    await client.close();
  });

  test('with a list of URLs, a 503 with a hint sends the client back to the same URL (its place) 3 times in a row, then the next attempt skips it', async () => {
    occupant = await Client.connect(full.url());
    // random() = 0 picks the first candidate: `full` first, `full` 3 times more (the places its hints gave), then, skipping it, `open`.
    const { client, tap, log } = sdk({ url: [full.url(), open.url()], random: () => 0 });
    client.connect();
    await eventually(() => client.state === 'open', 15_000);
    assert.deepEqual(tap.sockets.map((s) => s.url), [full.url(), full.url(), full.url(), full.url(), open.url()]);
    assert.equal(ofType(log, 'connected')[0]!.ev.url, open.url());
    for (const { ev: wait } of ofType(log, 'reconnecting')) {
      assert.ok(wait.inMs >= wait.retryAfterMs! && wait.retryAfterMs! >= 700, 'the hint holds, here and when going elsewhere');
    }
    await client.close();
    occupant.close();
  });
});

describe('503 from the upgrade budget (WS_UPGRADE_RATE)', () => {
  const RATE = 20;
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_UPGRADE_RATE: String(RATE) });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('40 clients at once: each waits its place (the hint and at most a tenth more, however often refused), all get in, paced', async () => {
    const t0 = performance.now();
    const clients = Array.from({ length: 40 }, () => sdk({ url: gw.url() }));
    for (const { client } of clients) client.connect();
    await eventually(() => clients.every(({ client }) => client.state === 'open'), 20_000);
    const allInS = (performance.now() - t0) / 1000;
    let refusals = 0;
    for (const { log } of clients) {
      for (const w of ofType(log, 'reconnecting')) {
        refusals++;
        assert.equal(w.ev.status, 503);
        const hint = w.ev.retryAfterMs!;
        assert.ok(hint >= 1, `hint ${hint}`);
        // Not the full-jitter backoff (500 ms doubling per failure): the server's place.
        assert.ok(w.ev.inMs >= hint && w.ev.inMs <= hint + Math.max(1, Math.ceil(hint / 10)), `attempt ${w.ev.attempt}: ${w.ev.inMs} ms for a hint of ${hint}`);
      }
    }
    // The burst is 2: most were refused at least once, and came in at about 20 a second.
    assert.ok(refusals >= 40 - 2 - Math.ceil(RATE * allInS), `${refusals} refusals`);
    assert.ok(allInS >= (40 - 2 - 1) / RATE, `all in after ${allInS.toFixed(2)} s: no faster than the budget`);
    await Promise.all(clients.map(({ client }) => client.close()));
  });
});
