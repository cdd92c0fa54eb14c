// `topics` in POST /v1/publish (PROTOCOL.md, additions of 2026-12): one
// request publishes to each topic in turn, on a node of two shards (so that
// the topics' owners differ), answers the ids of durable events, keeps the
// idempotency key per topic, and refuses every bad list with a 400 that
// publishes nothing. The 503 part way through is in admin.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, clientsOnShards, type Gateway, startGateway } from './harness.ts';

describe('POST /v1/publish with topics, one node with two shards', () => {
  let gw: Gateway;
  let subs: Client[];
  const rooms = ['bc:1', 'bc:2', 'bc:3', 'bc:4'];
  before(async () => {
    gw = await startGateway({ WS_WORKERS: '2' });
    // Two sockets on different shards, each joined to every room.
    subs = await clientsOnShards(gw.url(), [0, 1]);
    for (const c of subs) for (const t of rooms) assert.equal((await c.request({ type: 'join', topic: t })).status, 'ok');
  });
  after(async () => {
    for (const c of subs) c.close();
    assert.equal(await gw.stop(), 0);
  });

  /**
   * Sends a marker to every room and waits for it on every socket: per
   * topic, events arrive in order, so whatever was published before it has
   * arrived.
   */
  async function settle(tag: string): Promise<void> {
    assert.equal((await gw.adminPost('/v1/publish', { topics: rooms, data: tag })).status, 200);
    for (const c of subs) for (const t of rooms) await c.next((f) => f.type === 'event' && f.topic === t && f.data === tag);
  }

  test('each listed topic gets the event once, with the id the answer names; a topic not listed gets nothing', async () => {
    const res = await gw.adminPost('/v1/publish', { topics: ['bc:1', 'bc:2', 'bc:3'], data: { n: 1 } });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { ids: Record<string, string> };
    assert.deepEqual(Object.keys(body.ids), ['bc:1', 'bc:2', 'bc:3']);
    await settle('after-1');
    for (const c of subs) {
      for (const t of ['bc:1', 'bc:2', 'bc:3']) {
        const evs = c.takeEvents(t).filter((f) => f.data !== 'after-1');
        assert.equal(evs.length, 1, `${t} once`);
        assert.deepEqual(evs[0]!.data, { n: 1 });
        assert.equal(evs[0]!.id, body.ids[t]);
      }
      assert.deepEqual(c.takeEvents('bc:4').filter((f) => f.data !== 'after-1'), []);
    }
  });

  test('ephemeral: delivered without ids, answered {}', async () => {
    const res = await gw.adminPost('/v1/publish', { topics: ['bc:2', 'bc:4'], data: 'typing', ephemeral: true });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), {});
    for (const c of subs) {
      for (const t of ['bc:2', 'bc:4']) {
        const ev = await c.next((f) => f.type === 'event' && f.topic === t && f.data === 'typing');
        assert.equal(ev.id, undefined);
      }
    }
    await settle('after-2');
    for (const c of subs) for (const t of rooms) c.takeEvents(t);
  });

  test('a repeated idempotencyKey answers the same ids and delivers once per topic', async () => {
    const req = { topics: ['bc:1', 'bc:3'], data: 'once', idempotencyKey: 'bc-key-1' };
    const first = (await (await gw.adminPost('/v1/publish', req)).json()) as { ids: Record<string, string> };
    const again = await gw.adminPost('/v1/publish', req);
    assert.equal(again.status, 200);
    assert.deepEqual(await again.json(), first);
    // Ids are per topic (a stream's `ms-seq`), so two topics' ids may be
    // equal when both were written in one millisecond: that the key is per
    // topic shows in each topic getting its own event, with its own answer.
    assert.deepEqual(Object.keys(first.ids), ['bc:1', 'bc:3']);
    await settle('after-3');
    for (const c of subs) {
      for (const t of ['bc:1', 'bc:3']) {
        const evs = c.takeEvents(t).filter((f) => f.data === 'once');
        assert.equal(evs.length, 1, `${t}: once`);
        assert.equal(evs[0]!.id, first.ids[t], `${t}: the id the answer names`);
      }
    }
  });

  test('every bad list is a 400 with a message, and nothing is published', async () => {
    const many = Array.from({ length: 101 }, (_, i) => `bc:m${i}`);
    const bad: [unknown, RegExp][] = [
      [{ topics: [], data: 1 }, /1 to 100/],
      [{ topics: many, data: 1 }, /1 to 100/],
      [{ topics: 'bc:1', data: 1 }, /array/],
      [{ topics: ['bc:1', 7], data: 1 }, /topics\[1\] is not a string/],
      [{ topics: ['bc:1', 'bad topic'], data: 1 }, /topics\[1\]/],
      [{ topics: ['bc:1', 'bc:1'], data: 1 }, /given twice/],
      [{ topics: ['bc:1'], topic: 'bc:2', data: 1 }, /not both/],
      [{ topics: ['bc:1', 'bc:2'] }, /data/],
    ];
    for (const [body, message] of bad) {
      const res = await gw.adminPost('/v1/publish', body);
      assert.equal(res.status, 400, JSON.stringify(body).slice(0, 80));
      const answer = (await res.json()) as { reason: string; message: string };
      assert.equal(answer.reason, 'bad_request');
      assert.match(answer.message, message);
    }
    await settle('after-4');
    for (const c of subs) {
      for (const t of rooms) assert.deepEqual(c.takeEvents(t).filter((f) => f.data !== 'after-4'), [], `nothing on ${t}`);
    }
  });
});
