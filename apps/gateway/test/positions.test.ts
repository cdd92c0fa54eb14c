/**
 * Position marks (WS_POSITION_REFRESH_MS, protocol.md "Join, leave and
 * recovery with `since`") on real gateways: one embedded node of two shards
 * (a socket on each, the topic owned by one of them), and two nodes on a
 * real standalone Redis (a Cluster's marks, SPUBLISHed from the topic's
 * slot, are in broker-contract.test.ts). A topic with no durable
 * event for the interval sends its sockets `position` frames; each is newer
 * than the last, comes after every event at or below it, and a join with
 * `since` set to it replays exactly what came after, recovered. The marks'
 * rules without sockets (not sent to a topic with fresh events, not sent
 * with 0) are in broker-contract.test.ts; the SDK's use of them in
 * packages/client/test/resume-position.test.ts.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { compareEventIdStrings } from '@sluice/protocol';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, clientsOnShards, eventually, type Frame, type Gateway, startGateway } from './harness.ts';

const REFRESH = { WS_POSITION_REFRESH_MS: '1000' };

const cmp = (a: string, b: string): number => compareEventIdStrings(a, b) ?? assert.fail(`malformed ids ${a} ${b}`);

/** The positions of the `position` frames `c` got for `topic` so far, in order (left in the queue). */
function marksOf(c: Client, topic: string): string[] {
  return c.frames.flatMap((f) => (f.type === 'position' && f.topic === topic ? [f.position] : []));
}

async function publish(gw: Gateway, topic: string, data: unknown): Promise<string> {
  const res = await gw.adminPost('/v1/publish', { topic, data });
  assert.equal(res.status, 200);
  return ((await res.json()) as { id: string }).id;
}

async function join(c: Client, topic: string, since?: string): Promise<Frame> {
  const reply = await c.request({ type: 'join', topic, ...(since === undefined ? {} : { since }) });
  assert.ok(reply.type === 'reply' && reply.status === 'ok', JSON.stringify(reply));
  return reply;
}

for (const mode of ['embedded', 'standalone'] as const) {
  describe(`position marks (${mode})`, () => {
    let redis: RedisServer | undefined;
    let a: Gateway;
    let b: Gateway;
    before(async () => {
      if (mode === 'embedded') {
        a = b = await startGateway({ ...REFRESH, WS_WORKERS: '2' });
        return;
      }
      redis = await startRedis();
      const env = { ...REFRESH, REDIS_URL: redis.url };
      [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
      for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
    });
    after(async () => {
      for (const gw of new Set([a, b])) assert.equal(await gw.stop(), 0, gw.stderr());
      await redis?.stop();
    });

    test('a quiet topic\'s sockets get newer and newer positions, each after the events below it; a join since one replays what followed', async () => {
      const topic = `pos:${mode}`;
      // Embedded: a socket on each shard (one of them owns the topic). Redis: one per node.
      const [s1, s2] = mode === 'embedded' ? await clientsOnShards(a.url(), [0, 1]) : [await Client.connect(a.url()), await Client.connect(b.url())];
      const joined = [await join(s1!, topic), await join(s2!, topic)].map((r) => (r as { data: { position: string } }).data.position);
      // Keyed events only, as on a price feed: they carry no id and move no position.
      assert.equal((await s1!.request({ type: 'publish', topic, key: 'k', data: 1 })).type, 'reply');
      for (const [i, c] of [s1!, s2!].entries()) {
        await eventually(() => marksOf(c, topic).length >= 2, 10_000);
        const marks = marksOf(c, topic);
        assert.ok(cmp(marks[0]!, joined[i]!) > 0, `the first mark ${marks[0]} is newer than the join position ${joined[i]}`);
        for (let k = 1; k < marks.length; k++) assert.ok(cmp(marks[k]!, marks[k - 1]!) > 0, `marks only grow: ${marks.join(' ')}`);
      }

      // A durable event, then the marks go on: the first mark at or above its id comes after it, on both sockets.
      const id = await publish(a, topic, 'e1');
      for (const c of [s1!, s2!]) {
        await eventually(() => marksOf(c, topic).some((m) => cmp(m, id) >= 0), 10_000);
        const at = c.frames.findIndex((f) => f.type === 'event' && f.id === id);
        const mark = c.frames.findIndex((f) => f.type === 'position' && cmp(f.position, id) >= 0);
        assert.ok(at >= 0 && at < mark, `the event (frame ${at}) before the first mark above it (frame ${mark})`);
      }

      // Resume from the newest mark: exactly the event published after it, recovered.
      const newest = marksOf(s2!, topic).at(-1)!;
      const later = await publish(b, topic, 'e2');
      assert.ok(cmp(later, newest) > 0, 'an event stored after a mark has a higher id');
      const s3 = await Client.connect(a.url());
      const reply = await join(s3, topic, newest);
      assert.deepEqual(reply.type === 'reply' && reply.status === 'ok' ? reply.data : undefined, { recovered: true });
      assert.deepEqual(s3.takeEvents(topic).map((f) => (f.type === 'event' ? [f.id, f.data] : [])), [[later, 'e2']]);
      for (const c of [s1!, s2!, s3]) c.close();
    });
  });
}
