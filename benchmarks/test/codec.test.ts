import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Kind, S_BASE, T_BASE, classify, dataJson, eventDataPos, eventS, eventT, joinFrame, patchDigits, publishTemplate, replyRef,
} from '../src/lib/codec.ts';
import { decodeFrame as unmaskClientFrame } from '@sluice/gateway/testing';
import { shardOfWelcome } from '../src/lib/conn.ts';

const kindOf = (proto: 'sluice' | 'sio', text: string): number => {
  const b = Buffer.from(text);
  return classify(proto, b, 0, b.length);
};

test('data objects have exactly the requested size and are valid JSON', () => {
  for (const [size, seq] of [[32, false], [64, true], [1024, false], [1024, true]] as const) {
    const d = dataJson(size, seq);
    assert.equal(Buffer.byteLength(d.json), size);
    const parsed = JSON.parse(d.json) as { t: number; s?: number };
    assert.equal(typeof parsed.t, 'number');
    assert.equal(seq ? typeof parsed.s : 'undefined', seq ? 'number' : 'undefined');
  }
  assert.throws(() => dataJson(10, false), /minimum/);
});

test('a patched Sluice publish is a valid frame whose ref and data.t carry the stamp', () => {
  const t = publishTemplate('sluice', 'bench.7', 64, true, true);
  const bytes = Buffer.from(t.frame.bytes);
  const stamp = T_BASE + 42;
  patchDigits(bytes, 0, t.frame, t.refPos, stamp, 15);
  patchDigits(bytes, 0, t.frame, t.tPos, stamp, 15);
  patchDigits(bytes, 0, t.frame, t.sPos, S_BASE + 9, 10);
  const f = JSON.parse(unmaskClientFrame(bytes).payload.toString()) as { type: string; ref: string; topic: string; ephemeral: boolean; data: { t: number; s: number } };
  assert.equal(f.type, 'publish');
  assert.equal(f.ref, String(stamp));
  assert.equal(f.topic, 'bench.7');
  assert.equal(f.ephemeral, true);
  assert.equal(f.data.t, stamp);
  assert.equal(f.data.s, S_BASE + 9);
});

test('a patched Socket.IO publish carries the stamp as its ack id', () => {
  const t = publishTemplate('sio', 'bench', 32, false, false);
  const bytes = Buffer.from(t.frame.bytes);
  patchDigits(bytes, 0, t.frame, t.refPos, T_BASE + 5, 15);
  const text = unmaskClientFrame(bytes).payload.toString();
  assert.match(text, /^42100000000000005\["publish",/);
  const [name, body] = JSON.parse(text.slice(2 + 15)) as [string, { topic: string }];
  assert.equal(name, 'publish');
  assert.equal(body.topic, 'bench');
});

test('Sluice frames are classified by their first bytes, with a JSON fallback', () => {
  assert.equal(kindOf('sluice', '{"type":"reply","ref":"1","status":"ok","data":{}}'), Kind.ReplyOk);
  assert.equal(kindOf('sluice', '{"type":"reply","ref":"1","status":"error","reason":"rate_limited"}'), Kind.ReplyErr);
  assert.equal(kindOf('sluice', '{"type":"event","topic":"a","data":{}}'), Kind.Event);
  assert.equal(kindOf('sluice', '{"type":"error","reason":"bad_request"}'), Kind.Error);
  assert.equal(kindOf('sluice', '{"type":"welcome","connectionId":"x"}'), Kind.Welcome);
  assert.equal(kindOf('sluice', '{"ref":"1","type":"reply","status":"ok"}'), Kind.ReplyOk);
  assert.equal(kindOf('sluice', '{"status":"error","type":"reply","reason":"rate_limited"}'), Kind.ReplyErr);
});

test('a reply status is looked for inside its own frame only', () => {
  const two = Buffer.from('{"type":"reply","ref":"1","status":"error"}{"type":"reply","ref":"2","status":"ok"}');
  const firstEnd = two.indexOf('}') + 1;
  assert.equal(classify('sluice', two, 0, firstEnd), Kind.ReplyErr);
});

test('Socket.IO packets are classified by their type digits', () => {
  assert.equal(kindOf('sio', '0{"sid":"x"}'), Kind.Open);
  assert.equal(kindOf('sio', '2'), Kind.Ping);
  assert.equal(kindOf('sio', '40{"sid":"y"}'), Kind.Welcome);
  assert.equal(kindOf('sio', '43123[{"id":"1-0"}]'), Kind.ReplyOk);
  assert.equal(kindOf('sio', '42["event",{"topic":"a"}]'), Kind.Event);
  assert.equal(kindOf('sio', '44{"message":"no"}'), Kind.Error);
});

test('refs, ack ids and event stamps are read back', () => {
  const r = Buffer.from(`{"type":"reply","ref":"${T_BASE + 7}","status":"ok"}`);
  assert.equal(replyRef('sluice', r, 0, r.length), T_BASE + 7);
  const a = Buffer.from(`43${T_BASE + 8}[{}]`);
  assert.equal(replyRef('sio', a, 0, a.length), T_BASE + 8);
  const e = Buffer.from(`{"type":"event","topic":"t","id":"1-0","data":{"t":${T_BASE + 9},"s":${S_BASE + 3},"p":"x"}}`);
  const pos = eventDataPos(e, 0, e.length);
  assert.equal(eventT(e, pos, e.length), T_BASE + 9);
  assert.equal(eventS(e, pos, e.length), S_BASE + 3);
});

test('join frames are valid for both protocols', () => {
  assert.deepEqual(JSON.parse(unmaskClientFrame(joinFrame('sluice', 'room:1')).payload.toString()), { type: 'join', ref: 'j', topic: 'room:1' });
  assert.equal(unmaskClientFrame(joinFrame('sio', 'room:1')).payload.toString(), '421["join",{"topic":"room:1"}]');
});

test('shardOfWelcome reads the shard of a welcome\'s connectionId; -1 when there is none', () => {
  const at = (text: string): number => {
    const b = Buffer.from(`xx${text}yy`);
    return shardOfWelcome(b, 2, b.length - 2);
  };
  assert.equal(at('{"type":"welcome","connectionId":"9f2c41d0.1.0.1","heartbeatMs":25000}'), 1);
  assert.equal(at('{"type":"welcome","connectionId":"9f2c41d0.12.3.a","heartbeatMs":25000}'), 12);
  assert.equal(at('{"type":"welcome","heartbeatMs":25000}'), -1);
  assert.equal(at('{"type":"welcome","connectionId":"9f2c41d0"}'), -1);
});
