import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { compareEventIdStrings } from '@sluice/protocol';
import { Client, clientsOnShards, type Frame, type Gateway, startGateway } from './harness.ts';

let gw: Gateway;
const opened: Client[] = [];
async function connect(): Promise<Client> {
  const c = await Client.connect(gw.url());
  opened.push(c);
  return c;
}

before(async () => {
  gw = await startGateway({ WS_MAX_MESSAGES: '100000' });
});
after(async () => {
  for (const c of opened) c.close();
  const code = await gw.stop();
  if (code !== 0) console.error("STDERR", gw.stderr().slice(-3000), JSON.stringify(gw.logs.slice(-6)).slice(0, 3000));
  assert.equal(code, 0);
});

describe('welcome', () => {
  test('is the first frame, with the connection id, heartbeat and limits', async () => {
    const c = await connect();
    assert.match(String(c.welcome.connectionId), /^[0-9a-f]{8}\.\d+\.\d+\.[0-9a-z]+$/);
    assert.equal(c.welcome.heartbeatMs, 25000);
    assert.deepEqual(c.welcome.limits, {
      maxFrameBytes: 131072, hardMaxFrameBytes: 1048576, maxMessages: 100000, rateWindowMs: 1000, maxJoins: 50,
    });
  });

  test('the server answers the sluice.v1 subprotocol', async () => {
    const c = await connect();
    assert.equal(c.ws.protocol, 'sluice.v1');
  });
});

describe('ping', () => {
  test('answers pong with the ref', async () => {
    const c = await connect();
    assert.deepEqual(await c.request({ type: 'ping', ref: 'p-1' }), { type: 'pong', ref: 'p-1' });
  });
});

describe('join, publish, leave across shards', () => {
  test('a durable publish on one shard reaches subscribers on both shards, with one id', async () => {
    const [a, b] = await clientsOnShards(gw.url(), [0, 1]);
    opened.push(a!, b!);
    const joined = await a!.request({ type: 'join', ref: 'j-a', topic: 'x:room' });
    const position = (joined.data as { position: string }).position;
    assert.deepEqual(joined, { type: 'reply', ref: 'j-a', status: 'ok', data: { position } });
    assert.match(position, /^\d+-\d+$/);
    assert.equal((await b!.request({ type: 'join', topic: 'x:room' })).status, 'ok');
    const ack = await b!.request({ type: 'publish', topic: 'x:room', data: { text: 'hi' } });
    assert.equal(ack.status, 'ok');
    const id = (ack.data as { id: string }).id;
    assert.match(id, /^\d+-\d+$/);
    assert.ok(compareEventIdStrings(id, position)! > 0, `${id} is above the join position ${position}`);
    for (const c of [a!, b!]) {
      assert.deepEqual(await c.next((f) => f.type === 'event'), { type: 'event', topic: 'x:room', id, data: { text: 'hi' } });
    }
  });

  test('keyed events carry their key and no id; ephemeral events carry neither', async () => {
    const [a, b] = await clientsOnShards(gw.url(), [0, 1]);
    opened.push(a!, b!);
    await a!.request({ type: 'join', topic: 'prices:BTC-USD' });
    const keyed = await b!.request({ type: 'publish', topic: 'prices:BTC-USD', data: { p: 97000.5 }, key: 'BTC-USD' });
    assert.deepEqual(keyed.data, undefined);
    assert.equal(keyed.status, 'ok');
    assert.deepEqual(await a!.next((f) => f.type === 'event'),
      { type: 'event', topic: 'prices:BTC-USD', key: 'BTC-USD', data: { p: 97000.5 } });
    const eph = await b!.request({ type: 'publish', topic: 'prices:BTC-USD', data: { typing: true }, ephemeral: true });
    assert.equal(eph.status, 'ok');
    assert.deepEqual(await a!.next((f) => f.type === 'event'), { type: 'event', topic: 'prices:BTC-USD', data: { typing: true } });
  });

  test('traceparent travels with the event', async () => {
    const c = await connect();
    await c.request({ type: 'join', topic: 'traced' });
    const tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await c.request({ type: 'publish', topic: 'traced', data: 1, traceparent: tp });
    assert.equal((await c.next((f) => f.type === 'event')).traceparent, tp);
  });

  test('after leave no more events arrive; leaving a topic not joined answers not_joined', async () => {
    const [a, b] = await clientsOnShards(gw.url(), [0, 1]);
    opened.push(a!, b!);
    await a!.request({ type: 'join', topic: 'leave:t' });
    assert.equal((await a!.request({ type: 'leave', topic: 'leave:t' })).status, 'ok');
    const nj = await a!.request({ type: 'leave', topic: 'leave:t' });
    assert.equal(nj.status, 'error');
    assert.equal(nj.reason, 'not_joined');
    // b joins after a left: a marker published after both proves a got nothing in between.
    await b!.request({ type: 'join', topic: 'leave:t' });
    await b!.request({ type: 'publish', topic: 'leave:t', data: 'after-leave' });
    await b!.next((f) => f.type === 'event');
    assert.equal((await a!.request({ type: 'ping' })).type, 'pong');
    assert.deepEqual(a!.takeEvents('leave:t'), []);
  });

  test('a publish to a topic with no subscribers is acknowledged and stored', async () => {
    const c = await connect();
    const ack = await c.request({ type: 'publish', topic: 'nobody:here', data: [1, 2, 3] });
    assert.equal(ack.status, 'ok');
    const id = (ack.data as { id: string }).id;
    // It is in history: a join from just before it replays it.
    const r = await connect();
    const [ms, seq] = id.split('-').map(Number);
    const since = seq! > 0 ? `${ms}-${seq! - 1}` : `${ms! - 1}-0`;
    const reply = await r.request({ type: 'join', topic: 'nobody:here', since });
    assert.deepEqual(reply.data, { recovered: true });
    assert.deepEqual(r.takeEvents('nobody:here').map((e) => e.data), [[1, 2, 3]]);
  });

  test('joining a topic twice is answered ok once more and delivers each event once', async () => {
    const c = await connect();
    await c.request({ type: 'join', topic: 'twice' });
    assert.equal((await c.request({ type: 'join', topic: 'twice' })).status, 'ok');
    await c.request({ type: 'publish', topic: 'twice', data: 'one' });
    await c.next((f) => f.type === 'event');
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    assert.deepEqual(c.takeEvents('twice'), []);
  });
});

describe('idempotency', () => {
  test('a repeated idempotencyKey is acked with the first id, duplicate:true, and not delivered again', async () => {
    const [a, b] = await clientsOnShards(gw.url(), [0, 1]);
    opened.push(a!, b!);
    await a!.request({ type: 'join', topic: 'idem' });
    const first = await b!.request({ type: 'publish', topic: 'idem', data: 1, idempotencyKey: 'c1-0001' });
    assert.equal((await a!.next((f) => f.type === 'event')).data, 1);
    const again = await a!.request({ type: 'publish', topic: 'idem', data: 2, idempotencyKey: 'c1-0001' });
    assert.deepEqual(again.data, { id: (first.data as { id: string }).id, duplicate: true });
    await b!.request({ type: 'publish', topic: 'idem', data: 3 });
    await a!.next((f) => f.type === 'event' && f.data === 3);
    assert.deepEqual(a!.takeEvents('idem').map((e) => e.data), []);
  });
});

describe('the position of a join without since', () => {
  for (const [name, earlier] of [['a topic with no event yet', 0], ['a topic with events', 3]] as const) {
    test(`${name}: every event after it reaches the socket, and a join with it as since replays exactly those`, async () => {
      const topic = `pos:${earlier}`;
      const [a, b] = await clientsOnShards(gw.url(), [0, 1]);
      opened.push(a!, b!);
      const ids: string[] = [];
      const publish = async (n: number): Promise<void> => {
        const ack = await b!.request({ type: 'publish', topic, data: n });
        ids.push((ack.data as { id: string }).id);
      };
      const eventIds = async (c: Client, n: number): Promise<unknown[]> => {
        const out: unknown[] = [];
        for (let i = 0; i < n; i++) out.push((await c.next((f) => f.type === 'event' && f.topic === topic)).id);
        return out;
      };
      for (let i = 0; i < earlier; i++) await publish(i);
      const position = ((await a!.request({ type: 'join', topic })).data as { position: string }).position;
      if (earlier > 0) assert.equal(position, ids.at(-1), 'the newest id');
      // Repeated: the topic is already subscribed on this shard, the position is the same.
      const [c] = await clientsOnShards(gw.url(), [0]);
      opened.push(c!);
      assert.deepEqual((await c!.request({ type: 'join', topic })).data, { position });
      for (let i = 0; i < 3; i++) await publish(100 + i);
      const after = ids.slice(earlier);
      assert.deepEqual(await eventIds(a!, 3), after);
      // A socket that was cut off right after the join: it rejoins with the position and misses nothing.
      const [late] = await clientsOnShards(gw.url(), [1]);
      opened.push(late!);
      const replay = await late!.request({ type: 'join', topic, since: position });
      assert.deepEqual(replay.data, { recovered: true });
      assert.deepEqual(await eventIds(late!, 3), after, 'replayed before the reply');
      assert.deepEqual(late!.takeEvents(topic), [], 'and nothing else');
    });
  }
});

describe('recovery with since', () => {
  test('replays every event after since, then the reply, then live events: no gap, no duplicate', async () => {
    const pub = await connect();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const ack = await pub.request({ type: 'publish', topic: 'rec:a', data: i });
      ids.push((ack.data as { id: string }).id);
    }
    const sub = await connect();
    sub.send({ type: 'join', ref: 'j', topic: 'rec:a', since: ids[1] });
    const replayed: Frame[] = [];
    for (;;) {
      const f = await sub.next();
      if (f.type === 'reply') {
        assert.deepEqual(f, { type: 'reply', ref: 'j', status: 'ok', data: { recovered: true } });
        break;
      }
      replayed.push(f);
    }
    assert.deepEqual(replayed.map((e) => e.id), ids.slice(2));
    assert.deepEqual(replayed.map((e) => e.data), [2, 3, 4]);
    const live = await pub.request({ type: 'publish', topic: 'rec:a', data: 5 });
    const ev = await sub.next((f) => f.type === 'event');
    assert.equal(ev.id, (live.data as { id: string }).id);
  });

  test('joining with since while events stream in loses none and repeats none', async () => {
    const [pub, sub] = await clientsOnShards(gw.url(), [0, 1]);
    opened.push(pub!, sub!);
    const first = await pub!.request({ type: 'publish', topic: 'rec:race', data: -1 });
    const since = (first.data as { id: string }).id;
    const acked: string[] = [];
    let n = 0;
    let stop = false;
    const publishing = (async () => {
      while (!stop && n < 400) {
        const ack = await pub!.request({ type: 'publish', topic: 'rec:race', data: n++ });
        acked.push((ack.data as { id: string }).id);
      }
    })();
    await new Promise((r) => setTimeout(r, 30));
    const reply = await sub!.request({ type: 'join', topic: 'rec:race', since });
    assert.deepEqual(reply.data, { recovered: true });
    await new Promise((r) => setTimeout(r, 30));
    stop = true;
    await publishing;
    const last = acked.at(-1)!;
    await sub!.next((f) => f.type === 'event' && f.id === last, 5000).then((f) => sub!.frames.push(f));
    const got = sub!.takeEvents('rec:race').map((e) => e.id as string);
    assert.ok(acked.length > 10, `published ${acked.length}`);
    assert.deepEqual(got, acked);
  });

  test('recovered is false when history no longer reaches back to since', async () => {
    const small = await startGateway({ WS_HISTORY_SIZE: '3', WS_MAX_MESSAGES: '1000' });
    try {
      const pub = await Client.connect(small.url());
      const ids: string[] = [];
      for (let i = 0; i < 6; i++) ids.push(((await pub.request({ type: 'publish', topic: 'short', data: i })).data as { id: string }).id);
      const sub = await Client.connect(small.url());
      const reply = await sub.request({ type: 'join', topic: 'short', since: ids[0] });
      assert.deepEqual(reply.data, { recovered: false });
      // What history still holds is replayed before the reply.
      assert.deepEqual(sub.takeEvents('short').map((e) => e.id), ids.slice(3));
      const ok = await sub.request({ type: 'join', topic: 'short2', since: ids[5] });
      assert.equal(ok.status, 'ok');
      pub.close();
      sub.close();
    } finally {
      assert.equal(await small.stop(), 0);
    }
  });
});

describe('bad input gets an answer and the socket stays usable', () => {
  const cases: [string, string | object, Partial<Frame>][] = [
    ['malformed JSON', '{"type":"join",', { type: 'error', reason: 'bad_request' }],
    ['a JSON array', '[1,2]', { type: 'error', reason: 'bad_request' }],
    ['a JSON string', '"hello"', { type: 'error', reason: 'bad_request' }],
    ['an unknown type', { type: 'subscribe', ref: 'u1', topic: 't' }, { type: 'reply', ref: 'u1', status: 'error', reason: 'bad_request' }],
    ['no type', { ref: 'u2' }, { type: 'reply', ref: 'u2', status: 'error', reason: 'bad_request' }],
    ['a topic of the wrong type', { type: 'join', ref: 'u3', topic: 42 }, { type: 'reply', ref: 'u3', status: 'error', reason: 'bad_request' }],
    ['a topic with bad characters', { type: 'join', ref: 'u4', topic: 'a b' }, { type: 'reply', ref: 'u4', status: 'error', reason: 'bad_request' }],
    ['a topic of 201 characters', { type: 'join', ref: 'u5', topic: 'a'.repeat(201) }, { type: 'reply', ref: 'u5', status: 'error', reason: 'bad_request' }],
    ['a ref of 65 characters', { type: 'ping', ref: 'r'.repeat(65) }, { type: 'error', reason: 'bad_request' }],
    ['a ref that is a number', { type: 'ping', ref: 7 }, { type: 'error', reason: 'bad_request' }],
    ['a publish without data', { type: 'publish', ref: 'u6', topic: 't' }, { type: 'reply', ref: 'u6', status: 'error', reason: 'bad_request' }],
    ['ephemeral of the wrong type', { type: 'publish', ref: 'u7', topic: 't', data: 1, ephemeral: 'yes' }, { type: 'reply', ref: 'u7', status: 'error', reason: 'bad_request' }],
    ['a malformed since', { type: 'join', ref: 'u8', topic: 't', since: 'yesterday' }, { type: 'reply', ref: 'u8', status: 'error', reason: 'bad_request' }],
    ['an idempotencyKey of 129 characters', { type: 'publish', ref: 'u9', topic: 't', data: 1, idempotencyKey: 'k'.repeat(129) }, { type: 'reply', ref: 'u9', status: 'error', reason: 'bad_request' }],
  ];
  for (const [name, frame, expected] of cases) {
    test(`${name}`, async () => {
      const c = await connect();
      c.send(frame);
      const got = await c.next((f) => f.type === 'error' || f.type === 'reply');
      for (const [k, v] of Object.entries(expected)) assert.equal(got[k], v, `${k} of ${JSON.stringify(got)}`);
      assert.equal(typeof got.message, 'string');
      assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    });
  }

  test('a binary frame is refused with bad_request', async () => {
    const c = await connect();
    c.ws.send(Buffer.from('{"type":"ping","ref":"b"}'), { binary: true });
    const got = await c.next((f) => f.type === 'error');
    assert.equal(got.reason, 'bad_request');
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
  });

  test('a ref of exactly 64 characters is echoed', async () => {
    const c = await connect();
    const ref = 'r'.repeat(64);
    assert.deepEqual(await c.request({ type: 'ping', ref }), { type: 'pong', ref });
  });

  test('a client that disconnects mid-publish costs nothing: the event is stored and delivered', async () => {
    const sub = await connect();
    await sub.request({ type: 'join', topic: 'mid' });
    const ws = new WebSocket(gw.url(), ['sluice.v1']);
    await new Promise((r) => ws.once('message', r));
    ws.send(JSON.stringify({ type: 'publish', ref: 'gone', topic: 'mid', data: 'bye' }));
    ws.terminate();
    const ev = await sub.next((f) => f.type === 'event');
    assert.equal(ev.data, 'bye');
    assert.equal((await sub.request({ type: 'ping' })).type, 'pong');
  });
});

describe('join with since, left before its history arrived', () => {
  test('still gets its reply (the join happened; the leave undid it), like a plain join', async () => {
    const { ownerOf, topicKey } = await import('@sluice/core');
    const owned = (): string => {
      for (let i = 0; ; i++) if (ownerOf(topicKey('default', `jl:${i}`), 2) === 1) return `jl:${i}`;
    };
    const topic = owned();
    // The holder, on shard 1, joins first: the topic is shard 1's.
    const [holder] = await clientsOnShards(gw.url(), [1]);
    const [c] = await clientsOnShards(gw.url(), [0]);
    opened.push(holder!, c!);
    assert.equal((await holder!.request({ type: 'join', topic })).status, 'ok');
    // History is asked of shard 1; the leave is handled on shard 0 before the answer comes back.
    c!.send({ type: 'join', ref: 'j', topic, since: '0-0' });
    c!.send({ type: 'leave', ref: 'l', topic });
    const replies = [await c!.next((f) => f.type === 'reply' && f.ref === 'l'), await c!.next((f) => f.type === 'reply' && f.ref === 'j')];
    assert.deepEqual(replies.map((r) => r.status), ['ok', 'ok']);
    // And the socket is not joined: a publish on the topic does not reach it.
    await holder!.request({ type: 'publish', topic, data: 'after' });
    await holder!.next((f) => f.type === 'event' && f.data === 'after');
    assert.equal((await c!.request({ type: 'ping' })).type, 'pong');
    assert.deepEqual(c!.takeEvents(topic), []);
  });
});
