import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  decodeClientFrame, decodeServerFrame, decodeServerFrameObject, encodeError, encodeSubscribed, encodeUnsubscribed, encodeEvent, encodeEventFrame, encodePong, encodeRejection, encodeReplyError,
  encodeReplyOk, ErrorReasons, EVENT_ID_PATTERN, formatEventId, type Limits, MAX_REF_LENGTH, type ServerFrame, TOPIC_PATTERN,
  TRACEPARENT_PATTERN, UpgradeRefusals, USER_TOPIC, welcomeFrame, welcomePrefix,
} from '../src/index.ts';

const LIMITS: Limits = { maxFrameBytes: 131072, hardMaxFrameBytes: 1048576, maxMessages: 20, rateWindowMs: 1000, maxJoins: 50 };
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

function ok(frame: unknown): ServerFrame {
  const r = decodeServerFrame(typeof frame === 'string' ? frame : JSON.stringify(frame));
  if (!r.ok) assert.fail(`expected ${JSON.stringify(frame)} to decode, got: ${r.message}`);
  return r.frame;
}

/** Drops keys whose value is undefined: a decoded frame has only the fields it came with. */
function strip(v: unknown): unknown {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return v;
  return Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined));
}

/** The decoded frame has these fields: an absent optional field and one given as undefined are the same. */
function same(actual: unknown, expected: unknown): void {
  assert.deepEqual(strip(actual), strip(expected));
}

function rejected(frame: unknown): void {
  const text = typeof frame === 'string' ? frame : JSON.stringify(frame);
  const r = decodeServerFrame(text);
  if (r.ok) assert.fail(`expected ${text} to be rejected, got ${JSON.stringify(r.frame)}`);
  assert.ok(r.message.length > 0, 'a rejection explains itself');
}

describe('decodeServerFrame: every server frame of PROTOCOL.md decodes', () => {
  test('welcome, with and without expiresAt', () => {
    same(ok({ type: 'welcome', connectionId: '9f2c41d0.1.0.1', heartbeatMs: 25000, limits: LIMITS }),
      { type: 'welcome', connectionId: '9f2c41d0.1.0.1', heartbeatMs: 25000, limits: LIMITS, expiresAt: undefined });
    same(ok({ type: 'welcome', connectionId: 'c', heartbeatMs: 0, limits: LIMITS, expiresAt: 1796000000000 }),
      { type: 'welcome', connectionId: 'c', heartbeatMs: 0, limits: LIMITS, expiresAt: 1796000000000 });
  });

  test('welcome without limits decodes with limits undefined (a client assumes the defaults)', () => {
    assert.equal((ok({ type: 'welcome', connectionId: 'c', heartbeatMs: 0 }) as { limits: unknown }).limits, undefined);
  });

  test('replies: ok with recovered, with an id, without data; error with retryAfterMs', () => {
    same(ok({ type: 'reply', ref: '1', status: 'ok', data: { recovered: true } }),
      { type: 'reply', ref: '1', status: 'ok', data: { recovered: true } });
    same(ok({ type: 'reply', ref: '3', status: 'ok', data: { id: '1732900000123-0' } }),
      { type: 'reply', ref: '3', status: 'ok', data: { id: '1732900000123-0' } });
    same(ok({ type: 'reply', ref: '2', status: 'ok' }), { type: 'reply', ref: '2', status: 'ok', data: undefined });
    same(ok({ type: 'reply', ref: '3', status: 'error', reason: 'rate_limited', retryAfterMs: 412 }),
      { type: 'reply', ref: '3', status: 'error', reason: 'rate_limited', retryAfterMs: 412, message: undefined });
  });

  test('events: durable, keyed, with traceparent, to users', () => {
    same(ok({ type: 'event', topic: 'room:42', id: '1732900000123-0', data: { text: 'hi' } }),
      { type: 'event', topic: 'room:42', id: '1732900000123-0', key: undefined, traceparent: undefined, data: { text: 'hi' } });
    same(ok({ type: 'event', topic: 'prices:BTC-USD', key: 'BTC-USD', data: { p: 97000.5 } }),
      { type: 'event', topic: 'prices:BTC-USD', id: undefined, key: 'BTC-USD', traceparent: undefined, data: { p: 97000.5 } });
    assert.equal((ok({ type: 'event', topic: 'a', traceparent: TRACEPARENT, data: 1 }) as { traceparent: string }).traceparent, TRACEPARENT);
    assert.equal((ok({ type: 'event', topic: USER_TOPIC, data: 'dm' }) as { topic: string }).topic, '$user');
  });

  test('data: null is data', () => {
    assert.equal((ok({ type: 'event', topic: 'a', data: null }) as { data: unknown }).data, null);
  });

  test('pong and error', () => {
    same(ok({ type: 'pong', ref: '6' }), { type: 'pong', ref: '6' });
    same(ok({ type: 'pong' }), { type: 'pong', ref: undefined });
    same(ok({ type: 'error', reason: 'bad_request' }),
      { type: 'error', reason: 'bad_request', retryAfterMs: undefined, message: undefined });
  });

  test('2026-12: refresh reply, subscribed, unsubscribed', () => {
    same(ok({ type: 'reply', ref: 'r1', status: 'ok', data: { expiresAt: 1796000000000 } }),
      { type: 'reply', ref: 'r1', status: 'ok', data: { expiresAt: 1796000000000 } });
    same(ok({ type: 'subscribed', topic: 'room:42' }), { type: 'subscribed', topic: 'room:42' });
    for (const reason of ['forbidden', 'removed']) {
      same(ok({ type: 'unsubscribed', topic: 'room:42', reason }), { type: 'unsubscribed', topic: 'room:42', reason });
    }
  });

  test('2026-12: presence_state and presence_diff', () => {
    same(ok({ type: 'presence_state', topic: 'room:42', users: { u1: { connections: 2 } }, count: 1 }),
      { type: 'presence_state', topic: 'room:42', users: { u1: { connections: 2 } }, count: 1, truncated: false });
    assert.equal((ok({ type: 'presence_state', topic: 'a', users: {}, count: 5000, truncated: true }) as { truncated: boolean }).truncated, true);
    same(ok({ type: 'presence_diff', topic: 'room:42', joins: { u3: { connections: 1 } }, leaves: { u2: {} } }),
      { type: 'presence_diff', topic: 'room:42', joins: { u3: { connections: 1 } }, leaves: { u2: {} } });
  });

  test('unknown fields are left as they came (a client ignores them), and a reason a newer server adds decodes', () => {
    same(ok({ type: 'pong', ref: '6', v: 2 }), { type: 'pong', ref: '6', v: 2 });
    assert.equal((ok({ type: 'reply', ref: '1', status: 'error', reason: 'user_rate_limited', retryAfterMs: 5 }) as { reason: string }).reason,
      'user_rate_limited');
  });

  test('decodeServerFrameObject takes a parsed frame and checks it in place: an event is the very object, no copy', () => {
    assert.deepEqual(decodeServerFrameObject({ type: 'pong', ref: 'x' }), { ok: true, frame: { type: 'pong', ref: 'x' } });
    const ev = { type: 'event', topic: 'room:1', id: '1-0', data: { a: 1 } };
    const r = decodeServerFrameObject(ev);
    assert.ok(r.ok && r.frame === ev, 'the event is returned as parsed');
    // A check that normalizes makes a copy and leaves the input alone.
    const st = { type: 'presence_state', topic: 'room:1', users: {}, count: 0 };
    const s2 = decodeServerFrameObject(st);
    assert.ok(s2.ok && s2.frame !== st && (s2.frame as { truncated?: boolean }).truncated === false);
    assert.equal((st as { truncated?: boolean }).truncated, undefined);
    assert.equal(decodeServerFrameObject([]).ok, false);
  });
});

describe('decodeServerFrame: what is not a server frame is refused with a message', () => {
  test('not JSON, not an object, no or unknown type', () => {
    for (const text of ['', '{', 'pong', '[]', '42', 'null', '"event"', '{}', '{"type":"join","topic":"a"}', '{"type":1}', '{"type":"Welcome"}',
      '{"type":"__proto__"}', '{"type":"constructor"}', '{"type":"toString"}', '{"type":"reply","status":"__proto__"}']) {
      rejected(text);
    }
  });

  test('welcome: bad connectionId, heartbeatMs or expiresAt', () => {
    const w = { type: 'welcome', connectionId: 'c', heartbeatMs: 25000, limits: LIMITS };
    for (const bad of [{ connectionId: undefined }, { connectionId: '' }, { connectionId: 7 }, { heartbeatMs: undefined }, { heartbeatMs: -1 },
      { heartbeatMs: '25000' }, { expiresAt: 'soon' }]) {
      rejected({ ...w, ...bad });
    }
  });

  test('welcome with limits it cannot read: the welcome decodes, limits undefined (the client assumes the defaults)', () => {
    const w = { type: 'welcome', connectionId: 'c', heartbeatMs: 25000 };
    for (const bad of [null, [], 'x', { ...LIMITS, maxMessages: 0 }, { ...LIMITS, maxJoins: undefined }, { ...LIMITS, rateWindowMs: '1000' },
      { maxFrameBytes: 1 }]) {
      const f = ok({ ...w, limits: bad }) as { connectionId: string; limits: unknown };
      assert.equal(f.connectionId, 'c');
      assert.equal(f.limits, undefined, JSON.stringify(bad));
    }
    // Fields a later version adds are left out, the known ones kept.
    assert.deepEqual((ok({ ...w, limits: { ...LIMITS, maxPresence: 5 } }) as { limits: unknown }).limits, LIMITS);
  });

  test('reply: bad status, ref, reason, retryAfterMs or message', () => {
    for (const bad of [{ status: 'maybe' }, { status: undefined }, { ref: 1 }, { ref: null }, { status: 'error' },
      { status: 'error', reason: '' }, { status: 'error', reason: 7 }, { status: 'error', reason: 'rate_limited', retryAfterMs: -1 },
      { status: 'error', reason: 'rate_limited', retryAfterMs: '1' }, { status: 'error', reason: 'internal', message: {} }]) {
      rejected({ type: 'reply', ref: '1', status: 'ok', ...bad });
    }
  });

  test('event: no data, bad topic, id, key or traceparent', () => {
    rejected({ type: 'event', topic: 'a' });
    for (const bad of [{ topic: undefined }, { topic: '' }, { topic: 'room 42' }, { topic: '$users' }, { id: '1' }, { id: 1 }, { id: '1-0-0' },
      { key: '' }, { key: 5 }, { traceparent: 5 }]) {
      rejected({ type: 'event', topic: 'a', data: 1, ...bad });
    }
  });

  test('error, subscribed, unsubscribed: missing reason or topic; $user is not a topic to join', () => {
    rejected({ type: 'error' });
    rejected({ type: 'error', reason: 'bad_request', retryAfterMs: Number.NaN });
    rejected({ type: 'subscribed' });
    rejected({ type: 'subscribed', topic: USER_TOPIC });
    rejected({ type: 'unsubscribed', topic: 'a' });
  });

  test('presence: bad users, count, truncated, joins or leaves', () => {
    const s = { type: 'presence_state', topic: 'a', users: { u1: { connections: 1 } }, count: 1 };
    for (const bad of [{ users: undefined }, { users: [] }, { users: { u1: 1 } }, { users: { u1: {} } }, { users: { u1: { connections: 0 } } },
      { users: { u1: { connections: 1.5 } } }, { count: -1 }, { count: 1.5 }, { count: '1' }, { truncated: 'yes' }]) {
      rejected({ ...s, ...bad });
    }
    const d = { type: 'presence_diff', topic: 'a', joins: {}, leaves: {} };
    for (const bad of [{ joins: undefined }, { leaves: undefined }, { leaves: { u: null } }, { leaves: { u: 1 } }, { joins: { u: { connections: -1 } } }]) {
      rejected({ ...d, ...bad });
    }
  });
});

describe('UpgradeRefusals', () => {
  test('the refusals of PROTOCOL.md, its 2026-12 additions and the gateway\'s own, each once', () => {
    assert.deepEqual([...UpgradeRefusals].sort(), [
      'unavailable', 'unauthorized', 'forbidden_origin', 'ip_rate_limited', 'tenant_rate_limited', 'bad_request', 'headers_too_large',
      'internal', 'token_revoked', 'too_many_sockets', 'forbidden',
    ].sort());
    assert.equal(new Set(UpgradeRefusals).size, UpgradeRefusals.length);
  });
});

// Generators of what the gateway puts into frames: each as the gateway's
// decoder or config would let it through.
const ref = fc.option(fc.string({ unit: 'binary', maxLength: MAX_REF_LENGTH }), { nil: undefined });
const topic = fc.stringMatching(TOPIC_PATTERN);
const eventId = fc.option(fc.record({ ms: fc.integer({ min: 0, max: 999_999_999_999_999 }), seq: fc.integer({ min: 0, max: 1_000_000 }) })
  .map(formatEventId), { nil: undefined });
const key = fc.option(fc.string({ unit: 'binary', minLength: 1, maxLength: 200 }), { nil: undefined });
const hex = (n: number): fc.Arbitrary<string> => fc.stringMatching(new RegExp(`^[0-9a-f]{${n}}$`));
/** Every traceparent the client decoder accepts: version 00, or a later one with fields appended. */
const anyTraceparent = fc.tuple(hex(2), hex(32), hex(16), hex(2), fc.option(fc.string({ unit: fc.integer({ min: 0x21, max: 0x7e })
  .map((c) => String.fromCharCode(c)) }), { nil: undefined }))
  .map(([v, trace, span, flags, ext]) => `${v}-${trace}-${span}-${flags}${v === '00' || ext === undefined ? '' : `-${ext}`}`)
  .filter((t) => TRACEPARENT_PATTERN.test(t));
const traceparent = fc.option(anyTraceparent, { nil: undefined });
const json = fc.jsonValue();
const reason = fc.constantFrom(...ErrorReasons);
const retryAfterMs = fc.option(fc.double({ min: 0, max: 1e9, noNaN: true }), { nil: undefined });
const message = fc.option(fc.string({ unit: 'binary' }), { nil: undefined });
const positive = fc.integer({ min: 1, max: 2 ** 31 });
const limits = fc.record({ maxFrameBytes: positive, hardMaxFrameBytes: positive, maxMessages: positive, rateWindowMs: positive, maxJoins: positive });

/** What JSON makes of a value: -0 comes back as 0. */
const viaJson = (v: unknown): unknown => JSON.parse(JSON.stringify(v)) as unknown;

describe('property: every frame the encoders of codec.ts write decodes back to the same fields', () => {
  test('welcomeFrame(welcomePrefix(...), id)', () => {
    fc.assert(fc.property(fc.integer({ min: 0, max: 2 ** 31 }), limits, fc.stringMatching(/^[0-9a-f]{1,16}\.\d{1,4}\.\d{1,4}\.\d{1,9}$/),
      (heartbeatMs, l, connectionId) => {
        same(ok(welcomeFrame(welcomePrefix(heartbeatMs, l), connectionId)),
          { type: 'welcome', connectionId, heartbeatMs, limits: { ...l }, expiresAt: undefined });
      }));
  });

  test('welcomeFrame with a token\'s expiresAt', () => {
    fc.assert(fc.property(fc.integer({ min: 0, max: 2 ** 31 }), limits, fc.integer({ min: 0, max: 8_640_000_000_000_000 }),
      (heartbeatMs, l, expiresAt) => {
        same(ok(welcomeFrame(welcomePrefix(heartbeatMs, l), 'n.0.0.1', expiresAt)),
          { type: 'welcome', connectionId: 'n.0.0.1', heartbeatMs, limits: { ...l }, expiresAt });
      }));
    // Without a token (Infinity, or none) there is no expiresAt.
    const plain = ok(welcomeFrame(welcomePrefix(1, LIMITS), 'n.0.0.1', Infinity));
    assert.equal(plain.type === 'welcome' ? plain.expiresAt : 'not a welcome', undefined);
  });

  test('encodeUnsubscribed and encodeSubscribed', () => {
    fc.assert(fc.property(topic, fc.constantFrom('forbidden' as const, 'removed' as const), (t, why) => {
      same(ok(encodeUnsubscribed(t, why)), { type: 'unsubscribed', topic: t, reason: why });
      same(ok(encodeSubscribed(t)), { type: 'subscribed', topic: t });
    }));
  });

  test('encodeReplyOk', () => {
    fc.assert(fc.property(ref, fc.option(json, { nil: undefined }), (r, data) => {
      same(ok(encodeReplyOk(r, data === undefined ? undefined : JSON.stringify(data))),
        { type: 'reply', ref: r, status: 'ok', data: data === undefined ? undefined : viaJson(data) });
    }));
  });

  test('encodeReplyError, encodeError and encodeRejection', () => {
    fc.assert(fc.property(ref, reason, retryAfterMs, message, (r, why, wait, msg) => {
      const fields = { reason: why, retryAfterMs: wait === undefined ? undefined : Math.max(0, Math.ceil(wait)), message: msg };
      same(ok(encodeReplyError(r, why, wait, msg)), { type: 'reply', ref: r, status: 'error', ...fields });
      same(ok(encodeError(why, wait, msg)), { type: 'error', ...fields });
      same(ok(encodeRejection(r, why, wait, msg)),
        r === undefined ? { type: 'error', ...fields } : { type: 'reply', ref: r, status: 'error', ...fields });
    }));
  });

  test('encodePong', () => {
    fc.assert(fc.property(ref, (r) => {
      same(ok(encodePong(r)), { type: 'pong', ref: r });
    }));
  });

  test('encodeEvent and encodeEventFrame', () => {
    fc.assert(fc.property(fc.oneof(topic, fc.constant(USER_TOPIC)), eventId, key, traceparent, json, (t, id, k, tp, data) => {
      const e = { topic: t, id, key: k, dataJson: JSON.stringify(data), traceparent: tp };
      const want = { type: 'event', topic: t, id, key: k, traceparent: tp, data: viaJson(data) };
      same(ok(encodeEvent(e)), want);
      same(ok(encodeEventFrame(e, id)), want);
      if (id !== undefined) assert.match(id, EVENT_ID_PATTERN);
    }));
  });

  test('every traceparent the client decoder accepts survives the event frame: no publisher can forge its fields', () => {
    fc.assert(fc.property(anyTraceparent, (tp) => {
      const r = decodeServerFrame(encodeEvent({ topic: 'a', id: '1-0', key: undefined, dataJson: '1', traceparent: tp }));
      assert.ok(r.ok && r.frame.type === 'event' && r.frame.traceparent === tp && r.frame.id === '1-0');
    }));
  });
});

describe('the refresh frame (client to server)', () => {
  test('a token of 1 to 8192 characters decodes; anything else is bad_request with a message', () => {
    const r = decodeClientFrame('{"type":"refresh","ref":"r1","token":"a.b.c"}');
    assert.deepEqual(r, { ok: true, frame: { type: 'refresh', ref: 'r1', token: 'a.b.c' } });
    assert.ok(decodeClientFrame(JSON.stringify({ type: 'refresh', token: 'x'.repeat(8192) })).ok);
    for (const token of [undefined, '', 42, null, ['a'], 'x'.repeat(8193)]) {
      const bad = decodeClientFrame(JSON.stringify({ type: 'refresh', ref: 'r2', token }));
      assert.ok(!bad.ok && bad.reason === 'bad_request' && bad.ref === 'r2' && /token/.test(bad.message), JSON.stringify(token));
    }
  });
});
