import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  decodeClientFrame, encodeError, encodeEvent, encodeEventFrame, encodePong, eventFrameData, encodeRejection, encodeReplyError, encodeReplyOk,
  peekRef, PEEK_REF_BYTES, rawMember, welcomeFrame, welcomePrefix,
} from '../src/codec.ts';
import type { DecodeResult } from '../src/codec.ts';
import { EventClass } from '../src/frames.ts';
import type { ClientFrame, Limits, PublishFrame } from '../src/frames.ts';
import { ErrorReasons } from '../src/reasons.ts';
import { parseEventId } from '../src/event-id.ts';

// A small seeded PRNG (mulberry32), so the randomized loops below are reproducible.
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

function decodeOk(frame: unknown): ClientFrame {
  const r = decodeClientFrame(JSON.stringify(frame));
  if (!r.ok) assert.fail(`expected ${JSON.stringify(frame)} to decode, got: ${r.message}`);
  return r.frame;
}

function decodePublishOk(frame: Record<string, unknown>): PublishFrame {
  const f = decodeOk({ type: 'publish', topic: 'room:42', ...frame });
  assert.equal(f.type, 'publish');
  return f as PublishFrame;
}

/** Asserts the frame is rejected as bad_request with a message, and with exactly `ref` (undefined = answered by `error`). */
function assertRejected(text: string, ref: string | undefined): void {
  const r: DecodeResult = decodeClientFrame(text);
  if (r.ok) assert.fail(`expected ${text} to be rejected, got ${JSON.stringify(r.frame)}`);
  assert.equal(r.reason, 'bad_request');
  assert.equal(typeof r.message, 'string');
  assert.ok(r.message.length > 0, 'a rejection explains itself');
  assert.equal(r.ref, ref, `ref of the rejection of ${text}`);
}

const rejects = (frame: Record<string, unknown>, ref: string | undefined = 'r1'): void =>
  assertRejected(JSON.stringify(ref === undefined ? frame : { ref, ...frame }), ref);

describe('decodeClientFrame: every frame of PROTOCOL.md decodes', () => {
  test('join without since', () => {
    assert.deepEqual(decodeOk({ type: 'join', ref: '1', topic: 'room:42' }),
      { type: 'join', ref: '1', topic: 'room:42', since: undefined });
  });

  test('join with since', () => {
    assert.deepEqual(decodeOk({ type: 'join', ref: '1', topic: 'room:42', since: '1732900000000-0' }),
      { type: 'join', ref: '1', topic: 'room:42', since: '1732900000000-0' });
  });

  test('leave', () => {
    assert.deepEqual(decodeOk({ type: 'leave', ref: '2', topic: 'room:42' }), { type: 'leave', ref: '2', topic: 'room:42' });
  });

  test('durable publish with idempotencyKey', () => {
    assert.deepEqual(decodeOk({ type: 'publish', ref: '3', topic: 'room:42', data: { text: 'hi' }, idempotencyKey: 'c1-0001' }), {
      type: 'publish', ref: '3', topic: 'room:42', dataJson: '{"text":"hi"}', cls: EventClass.Durable,
      key: undefined, idempotencyKey: 'c1-0001', traceparent: undefined,
    });
  });

  test('keyed publish', () => {
    assert.deepEqual(decodeOk({ type: 'publish', ref: '4', topic: 'prices:BTC-USD', data: { p: 97000.5 }, key: 'BTC-USD' }), {
      type: 'publish', ref: '4', topic: 'prices:BTC-USD', dataJson: '{"p":97000.5}', cls: EventClass.Keyed,
      key: 'BTC-USD', idempotencyKey: undefined, traceparent: undefined,
    });
  });

  test('ephemeral publish', () => {
    assert.deepEqual(decodeOk({ type: 'publish', ref: '5', topic: 'room:42', data: { typing: true }, ephemeral: true }), {
      type: 'publish', ref: '5', topic: 'room:42', dataJson: '{"typing":true}', cls: EventClass.Ephemeral,
      key: undefined, idempotencyKey: undefined, traceparent: undefined,
    });
  });

  test('publish with traceparent keeps it', () => {
    assert.equal(decodePublishOk({ data: 1, traceparent: TRACEPARENT }).traceparent, TRACEPARENT);
    assert.equal(decodePublishOk({ data: 1, key: 'k', traceparent: TRACEPARENT }).traceparent, TRACEPARENT);
    assert.equal(decodePublishOk({ data: 1, ephemeral: true, traceparent: TRACEPARENT }).traceparent, TRACEPARENT);
  });

  test('ephemeral: false is a durable publish, and with a key a keyed one', () => {
    assert.equal(decodePublishOk({ data: 1, ephemeral: false }).cls, EventClass.Durable);
    assert.equal(decodePublishOk({ data: 1, ephemeral: false, key: 'k' }).cls, EventClass.Keyed);
  });

  test('ping', () => {
    assert.deepEqual(decodeOk({ type: 'ping', ref: '6' }), { type: 'ping', ref: '6' });
  });

  test('ref is optional on every frame', () => {
    assert.equal(decodeOk({ type: 'ping' }).ref, undefined);
    assert.equal(decodeOk({ type: 'join', topic: 'a' }).ref, undefined);
    assert.equal(decodeOk({ type: 'leave', topic: 'a' }).ref, undefined);
    assert.equal(decodeOk({ type: 'publish', topic: 'a', data: 1 }).ref, undefined);
  });

  test('unknown extra fields are ignored, so clients may be newer than the server', () => {
    assert.deepEqual(decodeOk({ type: 'ping', ref: '6', future: { x: 1 }, v: 2 }), { type: 'ping', ref: '6' });
    assert.deepEqual(decodeOk({ type: 'join', topic: 'a', extra: [1, 2], priority: 'high' }),
      { type: 'join', ref: undefined, topic: 'a', since: undefined });
    const p = decodePublishOk({ data: 'x', compress: true, headers: { a: 'b' } });
    assert.equal(p.cls, EventClass.Durable);
    assert.equal(p.dataJson, '"x"');
  });

  test('whitespace around the JSON object is accepted', () => {
    const r = decodeClientFrame(' \n{ "type" : "ping" , "ref" : "7" }\t');
    assert.ok(r.ok);
    assert.deepEqual(r.frame, { type: 'ping', ref: '7' });
  });
});

describe('decodeClientFrame: frames that are not frames are answered with `error` (no ref)', () => {
  test('malformed JSON', () => {
    for (const text of ['', '{', '{"type":"ping"', 'ping', "{'type':'ping'}", '{"type":"ping",}', '\u0000', '{"ref":"1"} x']) {
      assertRejected(text, undefined);
    }
  });

  test('JSON that is not an object: array, number, null, string, boolean', () => {
    for (const text of ['[]', '[{"type":"ping","ref":"1"}]', '42', '-1.5e3', 'null', '"ping"', 'true', 'false']) {
      assertRejected(text, undefined);
    }
  });

  test('missing type, with and without ref', () => {
    assertRejected('{}', undefined);
    assertRejected('{"ref":"9"}', '9');
    assertRejected('{"ref":"9","topic":"a"}', '9');
  });

  test('unknown or non-string type keeps a usable ref', () => {
    for (const type of ['subscribe', 'PING', 'Join', '', null, 1, true, ['ping'], { t: 'ping' }, 'constructor', '__proto__']) {
      assertRejected(JSON.stringify({ type, ref: 'x' }), 'x');
    }
  });

  test('a ref that is not a string is unusable: the answer is an `error`', () => {
    for (const ref of [1, 0, null, true, ['1'], { r: '1' }]) {
      assertRejected(JSON.stringify({ type: 'ping', ref }), undefined);
      assertRejected(JSON.stringify({ type: 'join', ref, topic: 'a' }), undefined);
    }
  });

  test('a ref longer than 64 characters is unusable: the answer is an `error`', () => {
    assertRejected(JSON.stringify({ type: 'ping', ref: 'r'.repeat(65) }), undefined);
    assertRejected(JSON.stringify({ type: 'publish', ref: 'r'.repeat(1000), topic: 'a', data: 1 }), undefined);
  });

  test('a ref of exactly 64 characters, or empty, is accepted and echoed', () => {
    const ref = 'r'.repeat(64);
    assert.equal(decodeOk({ type: 'ping', ref }).ref, ref);
    assert.equal(decodeOk({ type: 'ping', ref: '' }).ref, '');
    // 64 characters that each need escaping in JSON.
    const odd = '"\\'.repeat(32);
    assert.equal(decodeOk({ type: 'ping', ref: odd }).ref, odd);
  });

  test('a usable ref is kept even when the frame is otherwise invalid', () => {
    assertRejected('{"type":"join","ref":"' + 'r'.repeat(64) + '"}', 'r'.repeat(64));
  });
});

describe('decodeClientFrame: topics', () => {
  test('every allowed character, and 200 characters, are accepted', () => {
    const all = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789:_.-';
    for (const type of ['join', 'leave']) {
      assert.equal((decodeOk({ type, topic: all }) as { topic: string }).topic, all);
      assert.equal((decodeOk({ type, topic: 't'.repeat(200) }) as { topic: string }).topic, 't'.repeat(200));
    }
    assert.equal(decodePublishOk({ topic: 't'.repeat(200), data: 1 }).topic, 't'.repeat(200));
  });

  test('empty, 201 characters, invalid characters, or not a string are rejected on join, leave and publish', () => {
    const bad: unknown[] = ['', 't'.repeat(201), 'room 42', 'room/42', 'room#1', 'é', 'room:42\n', '*', 'a,b', 'ä', undefined, null, 42, ['a']];
    for (const topic of bad) {
      for (const type of ['join', 'leave', 'publish']) {
        const frame: Record<string, unknown> = { type, data: 1 };
        if (topic !== undefined) frame.topic = topic;
        rejects(frame, 'r1');
      }
    }
  });
});

describe('decodeClientFrame: join since', () => {
  test('accepts `<ms>-<seq>` ids', () => {
    for (const since of ['0-0', '1732900000000-0', '1732900000000-17', '999999999999999-999999999999999']) {
      assert.equal((decodeOk({ type: 'join', topic: 'a', since }) as { since: string }).since, since);
    }
  });

  test('rejects malformed since', () => {
    for (const since of ['', '1732900000000', '-0', '1-', 'a-0', '1-0-0', ' 1-0', '1-0 ', '+1-0', '1.5-0', '1e3-0',
      '1000000000000000-0', '0-1000000000000000', null, 1732900000000, ['1-0'], { ms: 1 }]) {
      rejects({ type: 'join', topic: 'a', since });
    }
  });
});

describe('decodeClientFrame: publish', () => {
  test('without data is rejected', () => {
    rejects({ type: 'publish', topic: 'a' });
    rejects({ type: 'publish', topic: 'a', key: 'k' });
  });

  test('data: null is a valid payload', () => {
    assert.equal(decodePublishOk({ data: null }).dataJson, 'null');
  });

  test('every JSON value is valid data: false, 0, "", [], {}', () => {
    for (const data of [false, 0, '', [], {}, 'x', -1.25, [null]]) {
      assert.equal(decodePublishOk({ data }).dataJson, JSON.stringify(data));
    }
  });

  test('key: empty, over 200 characters, or not a string is rejected; 200 characters accepted', () => {
    for (const key of ['', 'k'.repeat(201), 5, null, true, ['k']]) rejects({ type: 'publish', topic: 'a', data: 1, key });
    assert.equal(decodePublishOk({ data: 1, key: 'k'.repeat(200) }).key, 'k'.repeat(200));
  });

  test('keys may hold any printable character, control characters are refused', () => {
    const key = 'a "quoted" \\ key / with ünïcödé 🚀 and spaces';
    const p = decodePublishOk({ data: 1, key });
    assert.equal(p.key, key);
    assert.equal(p.cls, EventClass.Keyed);
    for (const bad of ['new\nline', 'tab\tbed', 'nul\u0000', 'us\u001f', 'del\u007f']) {
      rejects({ type: 'publish', topic: 'a', data: 1, key: bad });
      rejects({ type: 'publish', topic: 'a', data: 1, idempotencyKey: bad });
    }
  });

  test('key and ephemeral together are rejected', () => {
    rejects({ type: 'publish', topic: 'a', data: 1, key: 'k', ephemeral: true });
  });

  test('ephemeral that is not a boolean is rejected', () => {
    for (const ephemeral of ['true', 1, 0, null, {}]) rejects({ type: 'publish', topic: 'a', data: 1, ephemeral });
  });

  test('idempotencyKey: 128 characters accepted, 129 rejected, empty or non-string rejected', () => {
    assert.equal(decodePublishOk({ data: 1, idempotencyKey: 'i'.repeat(128) }).idempotencyKey, 'i'.repeat(128));
    for (const idempotencyKey of ['i'.repeat(129), '', 7, null, ['x']]) {
      rejects({ type: 'publish', topic: 'a', data: 1, idempotencyKey });
    }
  });

  test('idempotencyKey on an ephemeral publish is rejected', () => {
    rejects({ type: 'publish', topic: 'a', data: 1, ephemeral: true, idempotencyKey: 'c1-0001' });
  });

  test('malformed traceparent is rejected', () => {
    const malformed = [
      '', 'not-a-traceparent', TRACEPARENT.toUpperCase(), TRACEPARENT.slice(1), TRACEPARENT + '0',
      '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01', // trace id one short
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01', // parent id one short
      '00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01',
      '00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01',
      ` ${TRACEPARENT}`, `${TRACEPARENT}\n`, 1, null, [TRACEPARENT],
    ];
    for (const traceparent of malformed) rejects({ type: 'publish', topic: 'a', data: 1, traceparent });
  });

  test('a later-version traceparent with a quote or backslash is rejected: it would write fields into the event frame', () => {
    const later = `01-${TRACEPARENT.slice(3)}`;
    assert.equal(decodePublishOk({ data: 1, traceparent: `${later}-ext` }).traceparent, `${later}-ext`);
    rejects({ type: 'publish', topic: 'a', data: 1, traceparent: `${later}-","id":"9999999999999-0","x":"` });
    rejects({ type: 'publish', topic: 'a', data: 1, traceparent: `${later}-a\\` });
  });

  test('dataJson round-trips the data of randomized JSON values', () => {
    const rnd = prng(0x5111ce);
    const strings = ['', 'a', 'hi "there"', 'back\\slash', 'ünï 🚀', '\u2028\u2029', '\u0000\u001f', '</script>', '__proto__'];
    const value = (depth: number): unknown => {
      const pick = Math.floor(rnd() * (depth > 3 ? 5 : 7));
      switch (pick) {
        case 0: return null;
        case 1: return rnd() < 0.5;
        case 2: return [0, 1, -1, 0.5, 97000.5, 1e21, -1e-7, Number.MAX_SAFE_INTEGER, 1.7976931348623157e308][Math.floor(rnd() * 9)];
        case 3: return strings[Math.floor(rnd() * strings.length)];
        case 4: return Math.floor(rnd() * 1e6);
        case 5: return Array.from({ length: Math.floor(rnd() * 4) }, () => value(depth + 1));
        default: {
          const o: Record<string, unknown> = {};
          for (let i = Math.floor(rnd() * 4); i > 0; i--) o[strings[Math.floor(rnd() * strings.length)]!] = value(depth + 1);
          return o;
        }
      }
    };
    for (let i = 0; i < 500; i++) {
      const text = `{"type":"publish","topic":"t","data":${JSON.stringify(value(0))}}`;
      const r = decodeClientFrame(text);
      assert.ok(r.ok, text);
      assert.equal(r.frame.type, 'publish');
      const sent = (JSON.parse(text) as { data: unknown }).data;
      assert.deepEqual(JSON.parse((r.frame as PublishFrame).dataJson), sent, text);
    }
  });

  test('dataJson keeps the data of a frame written with a __proto__ key', () => {
    const text = '{"type":"publish","topic":"t","data":{"__proto__":{"polluted":1},"a":2}}';
    const r = decodeClientFrame(text);
    assert.ok(r.ok);
    assert.deepEqual(JSON.parse((r.frame as PublishFrame).dataJson), (JSON.parse(text) as { data: unknown }).data);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });
});

describe('decodeClientFrame never throws', () => {
  test('on randomized text, including mutations of valid frames', () => {
    const rnd = prng(42);
    const seeds = [
      '{"type":"join","ref":"1","topic":"room:42","since":"1732900000000-0"}',
      '{"type":"publish","ref":"3","topic":"room:42","data":{"text":"hi"},"idempotencyKey":"c1-0001"}',
      '{"type":"publish","ref":"4","topic":"prices:BTC-USD","data":{"p":97000.5},"key":"BTC-USD"}',
      '{"type":"ping","ref":"6"}',
    ];
    const alphabet = '{}[]":,\\ 0123456789-.etruanlfs\u00e9\ud83d';
    for (let i = 0; i < 3000; i++) {
      let s = seeds[i % seeds.length]!;
      const edits = 1 + Math.floor(rnd() * 4);
      for (let e = 0; e < edits; e++) {
        const at = Math.floor(rnd() * (s.length + 1));
        const ch = alphabet[Math.floor(rnd() * alphabet.length)]!;
        s = rnd() < 0.5 ? s.slice(0, at) + ch + s.slice(at + 1) : s.slice(0, at) + s.slice(at + 1);
      }
      const r = decodeClientFrame(s);
      if (!r.ok) {
        assert.equal(r.reason, 'bad_request');
        assert.ok(r.message.length > 0);
        assert.ok(r.ref === undefined || (typeof r.ref === 'string' && r.ref.length <= 64));
      }
    }
  });
});

// Encoders: the output must parse as JSON and carry the fields of PROTOCOL.md, whatever the ref or key holds.
const ODD_REFS = ['1', '', 'a"b', 'back\\slash', '\\"', '"}', 'ünïcödé', '🚀', '\ud800', '\u0000\n\t', '\u2028', '</script>', 'r'.repeat(64)];

describe('encoders produce valid JSON with the documented fields', () => {
  test('encodeReplyOk', () => {
    for (const ref of ODD_REFS) {
      assert.deepEqual(JSON.parse(encodeReplyOk(ref)), { type: 'reply', ref, status: 'ok' });
      assert.deepEqual(JSON.parse(encodeReplyOk(ref, '{"recovered":true}')),
        { type: 'reply', ref, status: 'ok', data: { recovered: true } });
      assert.deepEqual(JSON.parse(encodeReplyOk(ref, '{"id":"1732900000123-0"}')),
        { type: 'reply', ref, status: 'ok', data: { id: '1732900000123-0' } });
    }
    assert.deepEqual(JSON.parse(encodeReplyOk(undefined)), { type: 'reply', status: 'ok' });
  });

  test('encodeReplyError, with retryAfterMs rounded up and never negative, and a message of any content', () => {
    for (const ref of ODD_REFS) {
      for (const reason of ErrorReasons) {
        assert.deepEqual(JSON.parse(encodeReplyError(ref, reason)), { type: 'reply', ref, status: 'error', reason });
      }
      assert.deepEqual(JSON.parse(encodeReplyError(ref, 'rate_limited', 412)),
        { type: 'reply', ref, status: 'error', reason: 'rate_limited', retryAfterMs: 412 });
      assert.deepEqual(JSON.parse(encodeReplyError(ref, 'bad_request', undefined, 'topic "x" \\ invalid')),
        { type: 'reply', ref, status: 'error', reason: 'bad_request', message: 'topic "x" \\ invalid' });
    }
    assert.equal((JSON.parse(encodeReplyError('1', 'rate_limited', 411.2)) as { retryAfterMs: number }).retryAfterMs, 412);
    assert.equal((JSON.parse(encodeReplyError('1', 'rate_limited', -5)) as { retryAfterMs: number }).retryAfterMs, 0);
    assert.deepEqual(JSON.parse(encodeReplyError(undefined, 'internal')), { type: 'reply', status: 'error', reason: 'internal' });
  });

  test('encodeError carries no ref', () => {
    assert.deepEqual(JSON.parse(encodeError('bad_request')), { type: 'error', reason: 'bad_request' });
    for (const reason of ErrorReasons) assert.deepEqual(JSON.parse(encodeError(reason)), { type: 'error', reason });
    assert.deepEqual(JSON.parse(encodeError('tenant_rate_limited', 0.1, 'ünï "q"')),
      { type: 'error', reason: 'tenant_rate_limited', retryAfterMs: 1, message: 'ünï "q"' });
  });

  test('encodeRejection is a reply when there is a ref, an error otherwise', () => {
    for (const ref of ODD_REFS) {
      assert.deepEqual(JSON.parse(encodeRejection(ref, 'rate_limited', 412, 'slow down')),
        { type: 'reply', ref, status: 'error', reason: 'rate_limited', retryAfterMs: 412, message: 'slow down' });
    }
    assert.deepEqual(JSON.parse(encodeRejection(undefined, 'payload_too_large')), { type: 'error', reason: 'payload_too_large' });
  });

  test('encodePong', () => {
    for (const ref of ODD_REFS) assert.deepEqual(JSON.parse(encodePong(ref)), { type: 'pong', ref });
    assert.deepEqual(JSON.parse(encodePong(undefined)), { type: 'pong' });
  });

  test('encodeEvent: durable, keyed with odd keys, ephemeral, with traceparent', () => {
    assert.deepEqual(JSON.parse(encodeEvent({ topic: 'room:42', id: '1732900000123-0', key: undefined, dataJson: '{"text":"hi"}', traceparent: undefined })),
      { type: 'event', topic: 'room:42', id: '1732900000123-0', data: { text: 'hi' } });
    for (const key of ['BTC-USD', 'a"b', 'back\\slash', 'ünï 🚀', '\ud800', '\u0000\n', '"}', 'k'.repeat(200)]) {
      assert.deepEqual(JSON.parse(encodeEvent({ topic: 'prices:BTC-USD', id: undefined, key, dataJson: '{"p":97000.5}', traceparent: undefined })),
        { type: 'event', topic: 'prices:BTC-USD', key, data: { p: 97000.5 } });
    }
    assert.deepEqual(JSON.parse(encodeEvent({ topic: 'room:42', id: undefined, key: undefined, dataJson: 'null', traceparent: TRACEPARENT })),
      { type: 'event', topic: 'room:42', traceparent: TRACEPARENT, data: null });
  });

  test('encodeEvent carries what decodeClientFrame accepted, for every accepted publish', () => {
    const frames = [
      { type: 'publish', topic: 'a.b_c-d:E', data: { nested: ['x', { y: null }] }, key: 'odd "key" \\ ü', traceparent: TRACEPARENT },
      { type: 'publish', topic: 't'.repeat(200), data: 'line\u2028sep' },
      { type: 'publish', topic: 'z', data: [], ephemeral: true },
    ];
    for (const frame of frames) {
      const p = decodeOk(frame) as PublishFrame;
      const ev = JSON.parse(encodeEvent({ topic: p.topic, id: '1-0', key: p.key, dataJson: p.dataJson, traceparent: p.traceparent })) as Record<string, unknown>;
      assert.equal(ev.type, 'event');
      assert.equal(ev.topic, frame.topic);
      assert.equal(ev.key, frame.key);
      assert.equal(ev.traceparent, frame.traceparent);
      assert.deepEqual(ev.data, frame.data);
    }
  });

  test('welcomeFrame(welcomePrefix(...), id) is the documented welcome', () => {
    const limits: Limits = { maxFrameBytes: 131072, hardMaxFrameBytes: 1048576, maxMessages: 20, rateWindowMs: 1000, maxJoins: 50 };
    const prefix = welcomePrefix(25000, limits);
    for (const id of ['abc', 'c0ffee-01', '0123456789abcdef0123456789abcdef']) {
      assert.deepEqual(JSON.parse(welcomeFrame(prefix, id)), { type: 'welcome', connectionId: id, heartbeatMs: 25000, limits });
    }
    // The prefix is built once and shared: each frame carries its own id.
    assert.notEqual(welcomeFrame(prefix, 'a'), welcomeFrame(prefix, 'b'));
  });
});

describe('eventFrameData', () => {
  test('gives back the data JSON as spliced in, for any data, key, id and traceparent', () => {
    fc.assert(fc.property(
      fc.jsonValue(), fc.option(fc.string()), fc.option(fc.constant('1732900000123-7')), fc.option(fc.constant(TRACEPARENT)),
      (data, key, id, traceparent) => {
        const dataJson = JSON.stringify(data);
        const frame = encodeEventFrame({ topic: 'room:42', key: key ?? undefined, dataJson, traceparent: traceparent ?? undefined }, id ?? undefined);
        assert.equal(eventFrameData(frame), dataJson);
      },
    ));
  });

  test('a key that holds the text of a data field does not fool it', () => {
    for (const key of [',"data":1}', '","data":"x', '\\",\\"data\\":', '"}', 'data']) {
      const frame = encodeEventFrame({ topic: 't', key, dataJson: '{"n":1}', traceparent: undefined }, undefined);
      assert.equal(eventFrameData(frame), '{"n":1}', key);
    }
  });

  test('undefined for what is not an event frame', () => {
    for (const s of ['', '{}', '{"type":"reply","status":"ok","data":1}', '{"type":"event","topic":"t"}', '{"type":"event","topic":"t","data":1']) {
      assert.equal(eventFrameData(s), undefined, s);
    }
  });
});

describe('peekRef', () => {
  test('finds ref when it comes first', () => {
    assert.equal(peekRef('{"ref":"1","type":"ping"}'), '1');
    assert.equal(peekRef('  {  "ref" :  "abc" , "type":"publish"'), 'abc');
    assert.equal(peekRef('{"ref":""}'), '');
  });

  test('finds ref right after type, as the SDK writes frames', () => {
    assert.equal(peekRef('{"type":"publish","ref":"3","topic":"room:42","data":{"text":"hi"}}'), '3');
    assert.equal(peekRef('{ "type" : "join" , "ref" : "r-1" }'), 'r-1');
  });

  test('finds it in the first PEEK_REF_BYTES bytes of a frame truncated there', () => {
    const frame = `{"type":"publish","ref":"${'r'.repeat(64)}","topic":"room:42","data":"${'x'.repeat(1000)}"}`;
    assert.equal(peekRef(frame.slice(0, PEEK_REF_BYTES)), 'r'.repeat(64));
  });

  test('does not find ref anywhere else', () => {
    for (const head of [
      '{"topic":"a","ref":"1"}',
      '{"type":"publish","topic":"a","ref":"1"}',
      '{"data":{"ref":"1"}}',
      '[{"ref":"1"}]',
      '"ref":"1"',
      '{"type":"ping","ref":1}',
      '{"ref":null}',
      '',
    ]) assert.equal(peekRef(head), undefined, head);
  });

  test('does not find a ref longer than 64 characters, finds one of exactly 64', () => {
    assert.equal(peekRef(`{"ref":"${'r'.repeat(64)}"}`), 'r'.repeat(64));
    assert.equal(peekRef(`{"ref":"${'r'.repeat(65)}"}`), undefined);
    assert.equal(peekRef(`{"type":"ping","ref":"${'r'.repeat(65)}"}`), undefined);
  });

  test('does not return a ref that needs unescaping (answered without ref rather than with a wrong one)', () => {
    assert.equal(peekRef('{"ref":"a\\"b"}'), undefined);
    assert.equal(peekRef('{"ref":"a\\u0041"}'), undefined);
  });

  test('whatever it returns is the frame\'s own ref, for ASCII refs', () => {
    const rnd = prng(7);
    const chars = 'abcXYZ019-_:. !#$%&\'()*+,/;<=>?@[]^`{|}~';
    for (let i = 0; i < 500; i++) {
      const ref = Array.from({ length: Math.floor(rnd() * 70) }, () => chars[Math.floor(rnd() * chars.length)]).join('');
      const frame = rnd() < 0.5 ? JSON.stringify({ ref, type: 'ping' }) : JSON.stringify({ type: 'ping', ref });
      const peeked = peekRef(Buffer.from(frame, 'utf8').subarray(0, PEEK_REF_BYTES).toString('latin1'));
      assert.equal(peeked, ref.length <= 64 ? ref : undefined, frame);
    }
  });

  // The gateway hands peekRef the frame's first bytes decoded as latin1 (shard.ts), so a
  // non-ASCII ref arrives as mojibake: echoing it would answer with a ref the client never sent.
  test('never echoes a ref other than the one the client sent: non-ASCII refs read as latin1', () => {
    for (const ref of ['é', 'ünï', '🚀', '日本', 'a\u00a0b']) {
      const head = Buffer.from(JSON.stringify({ type: 'publish', ref, topic: 'a' }), 'utf8').subarray(0, PEEK_REF_BYTES).toString('latin1');
      const peeked = peekRef(head);
      assert.ok(peeked === undefined || peeked === ref, `ref ${JSON.stringify(ref)} was peeked as ${JSON.stringify(peeked)}`);
    }
  });

  test('never throws on arbitrary strings', () => {
    const rnd = prng(99);
    const alphabet = '{}[]":,\\ \t\nreftypingpublish0123456789\u00e9\u0000\ud83d\ude80';
    const starts = ['', '{"ref":"', '{"type":"ping","ref":"', ' { "type" : "'];
    for (let i = 0; i < 5000; i++) {
      let s = starts[i % starts.length]!;
      const len = Math.floor(rnd() * 200);
      for (let j = 0; j < len; j++) s += alphabet[Math.floor(rnd() * alphabet.length)];
      const r = peekRef(s);
      assert.ok(r === undefined || (typeof r === 'string' && r.length <= 64 && !r.includes('"') && !r.includes('\\')));
    }
  });
});

describe('parseEventId', () => {
  test('parses <ms>-<seq>', () => {
    assert.deepEqual(parseEventId('1732900000123-0'), { ms: 1732900000123, seq: 0 });
    assert.deepEqual(parseEventId('0-0'), { ms: 0, seq: 0 });
    assert.deepEqual(parseEventId('5-42'), { ms: 5, seq: 42 });
    assert.deepEqual(parseEventId('999999999999999-999999999999999'), { ms: 999999999999999, seq: 999999999999999 });
  });

  test('leading zeros parse to the same numbers', () => {
    assert.deepEqual(parseEventId('007-01'), { ms: 7, seq: 1 });
  });

  test('undefined when malformed', () => {
    for (const id of ['', '1', '1-', '-1', 'a-0', '1-0-0', ' 1-0', '1-0\n', '1.5-0', '1e3-0', '-1-0', '1000000000000000-0', '0x1-0']) {
      assert.equal(parseEventId(id), undefined, JSON.stringify(id));
    }
  });
});

describe('decodeClientFrame: hostile shapes', () => {
  test('data nested deeper than JSON.stringify can recurse is bad_request, not a thrown RangeError', () => {
    const depth = 200_000;
    const text = `{"type":"publish","ref":"deep","topic":"t","data":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    const r = decodeClientFrame(text);
    assert.equal(r.ok, false);
    assert.ok(!r.ok && r.reason === 'bad_request' && r.ref === 'deep' && /nested too deeply/.test(r.message ?? ''));
    // Ordinary nesting is kept as it was sent.
    const ok = decodeClientFrame(`{"type":"publish","topic":"t","data":${'['.repeat(100)}1${']'.repeat(100)}}`);
    assert.ok(ok.ok && ok.frame.type === 'publish' && ok.frame.dataJson === `${'['.repeat(100)}1${']'.repeat(100)}`);
  });
});

describe('decodeClientFrame: a publish\'s data is the text the client sent (rawMember)', () => {
  const dataOf = (text: string): string => {
    const r = decodeClientFrame(text);
    assert.ok(r.ok && r.frame.type === 'publish', text);
    return (r.frame as PublishFrame).dataJson;
  };

  test('the value\'s own characters: its inner whitespace kept, the whitespace around it not', () => {
    assert.equal(dataOf('{"type":"publish","topic":"t","data":{"a": [1, 2.50, "x"] }}'), '{"a": [1, 2.50, "x"] }');
    assert.equal(dataOf('{ "data" :\n\t[ 1 ,2 ]\r\n , "type" : "publish" , "topic":"t" }'), '[ 1 ,2 ]');
    assert.equal(dataOf('{"type":"publish","topic":"t","data":1e400}'), '1e400', 'a number is not rounded through a double');
    assert.equal(dataOf('{"type":"publish","topic":"t","data":"\\u00fc \\ud800"}'), '"\\u00fc \\ud800"');
  });

  test('strings that hold quotes, backslashes, braces or "data": are skipped whole', () => {
    assert.equal(dataOf('{"type":"publish","x":"\\"data\\":5}","topic":"t","data":"a\\\\\\"}b\\\\","y":"\\\\"}'), '"a\\\\\\"}b\\\\"');
    assert.equal(dataOf('{"type":"publish","meta":{"data":9,"s":"}"},"topic":"t","data":[{"data":1}]}'), '[{"data":1}]');
    assert.equal(rawMember('{"type":"publish","meta":{"data":9},"topic":"t"}', 'data'), undefined, 'a nested "data" is not the member');
  });

  test('a repeated member is the last, as JSON.parse takes it; a name written with an escape leaves it to JSON.stringify', () => {
    assert.equal(dataOf('{"type":"publish","topic":"t","data":1,"data":[2]}'), '[2]');
    assert.equal(rawMember('{"type":"publish","topic":"t","data":1,"d\\u0061ta":[2]}', 'data'), undefined);
    assert.equal(dataOf('{"type":"publish","topic":"t","data":1,"d\\u0061ta":[ 2 ]}'), '[2]', 'serialized from the parsed value');
    assert.equal(dataOf('{"type":"publish","topic":"t","data":{"k":1},"\\"":0}'), '{"k":1}');
  });

  test('deep nesting past 512 levels is serialized from the parsed value', () => {
    const deep = `${'['.repeat(600)}1${']'.repeat(600)}`;
    assert.equal(rawMember(`{"type":"publish","topic":"t","data":${deep}}`, 'data'), undefined);
    assert.equal(dataOf(`{"type":"publish","topic":"t","data":${deep}}`), deep);
  });

  test('for any JSON frame: the data\'s text, valid JSON equal to what JSON.parse read, and an event made of it has only its own members', () => {
    const space = fc.constantFrom('', ' ', '\n', '\t ', '\r\n  ');
    const name = fc.constantFrom('data', 'type', 'topic', 'meta', 'x', 'd', 'datum', 'Data', '__proto__', '');
    const member = fc.tuple(name, fc.jsonValue({ maxDepth: 4 }), space, space, fc.boolean());
    fc.assert(fc.property(fc.array(member, { maxLength: 6 }), fc.jsonValue({ maxDepth: 4 }), fc.nat(6), space,
      (extra, data, at, ws) => {
        const members = extra.filter(([n]) => n !== 'type' && n !== 'topic')
          .map(([n, v, a, b, indent]) => `${a}${JSON.stringify(n)}${b}:${a}${JSON.stringify(v, null, indent ? 2 : undefined)}${b}`);
        const dataText = JSON.stringify(data, null, at % 2 === 0 ? undefined : 1);
        members.splice(Math.min(at, members.length), 0, `${ws}"data"${ws}:${ws}${dataText}${ws}`);
        const text = `{"type":"publish",${ws}"topic":"t",${members.join(',')}}`;
        const parsed = JSON.parse(text) as { data: unknown };
        const r = decodeClientFrame(text);
        assert.ok(r.ok && r.frame.type === 'publish');
        const got = (r.frame as PublishFrame).dataJson;
        assert.deepEqual(JSON.parse(got), parsed.data);
        const lastData = members.filter((m) => /^\s*"data"/.test(m)).at(-1)!;
        assert.equal(got, lastData.slice(lastData.indexOf(':') + 1).trim(), 'the last data member\'s text');
        const ev = JSON.parse(encodeEventFrame({ topic: 't', key: undefined, dataJson: got, traceparent: undefined }, '1-0')) as Record<string, unknown>;
        assert.deepEqual(Object.keys(ev), ['type', 'topic', 'id', 'data']);
        assert.deepEqual(ev.data, parsed.data);
      }), { numRuns: 2000, seed: 0x51ce });
  });
});
