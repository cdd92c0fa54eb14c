import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { CloseCode, closeCodeOf, closeSpecs, encodeCloseReason, MAX_CLOSE_REASON_BYTES } from '../src/closes.ts';
import type { CloseReason } from '../src/closes.ts';
import { ErrorReasons, isStrike } from '../src/reasons.ts';

const reasons = Object.keys(closeSpecs) as CloseReason[];
const byteLength = (s: string): number => new TextEncoder().encode(s).byteLength;

describe('close reasons fit in a close frame and parse back', () => {
  test('MAX_CLOSE_REASON_BYTES is the RFC 6455 limit of 123 bytes', () => {
    assert.equal(MAX_CLOSE_REASON_BYTES, 123);
  });

  test('every reason without retryAfterMs', () => {
    for (const reason of reasons) {
      const s = encodeCloseReason(reason);
      assert.ok(byteLength(s) <= MAX_CLOSE_REASON_BYTES, `${reason}: ${byteLength(s)} bytes`);
      assert.deepEqual(JSON.parse(s), { reason });
    }
  });

  test('every reason with retryAfterMs, small and large', () => {
    for (const reason of reasons) {
      for (const retryAfterMs of [0, 1, 1000, 6000, 3_600_000, 86_400_000, Number.MAX_SAFE_INTEGER]) {
        const s = encodeCloseReason(reason, retryAfterMs);
        assert.ok(byteLength(s) <= MAX_CLOSE_REASON_BYTES, `${reason}/${retryAfterMs}: ${byteLength(s)} bytes`);
        assert.deepEqual(JSON.parse(s), { reason, retryAfterMs });
      }
    }
  });

  test('retryAfterMs is a whole, non-negative number of milliseconds', () => {
    assert.deepEqual(JSON.parse(encodeCloseReason('unavailable', 2400.4)), { reason: 'unavailable', retryAfterMs: 2400 });
    assert.deepEqual(JSON.parse(encodeCloseReason('unavailable', 2400.6)), { reason: 'unavailable', retryAfterMs: 2401 });
    assert.deepEqual(JSON.parse(encodeCloseReason('congested', -50)), { reason: 'congested', retryAfterMs: 0 });
  });

  test('the documented example encodes exactly', () => {
    assert.equal(encodeCloseReason('unavailable', 2400), '{"reason":"unavailable","retryAfterMs":2400}');
    assert.equal(encodeCloseReason('abusive'), '{"reason":"abusive"}');
  });
});

describe('close codes match the table of PROTOCOL.md', () => {
  // The close table of PROTOCOL.md, reason by reason.
  const documented: Record<string, number> = {
    abusive: 1008,
    forbidden: 1008,
    payload_too_large: 1009, // "frame above the hard cap"
    unavailable: 1012,
    buffer_limit: 1013,
    congested: 1013,
    token_expired: 4001,
    slow_consumer: 4503,
    // Additions of 2026-12.
    token_revoked: 4003,
    disconnected: 1008,
  };

  test('every documented reason has its documented code', () => {
    for (const [reason, code] of Object.entries(documented)) {
      assert.ok(reason in closeSpecs, `${reason} is missing from closeSpecs`);
      assert.equal(closeSpecs[reason as CloseReason].code, code, reason);
    }
  });

  test('the only reason beyond the table is internal, with the standard 1011', () => {
    // 1011 is RFC 6455 "internal error"; PROTOCOL.md's table does not list it (shard failure close).
    assert.deepEqual(reasons.filter((r) => !(r in documented)), ['internal']);
    assert.equal(closeSpecs.internal.code, 1011);
    assert.equal(CloseCode.Internal, 1011);
  });

  test('reconnect is false exactly for the 1008 reasons', () => {
    for (const reason of reasons) {
      assert.equal(closeSpecs[reason].reconnect, closeSpecs[reason].code !== 1008, reason);
    }
    assert.deepEqual(reasons.filter((r) => !closeSpecs[r].reconnect).sort(), ['abusive', 'disconnected', 'forbidden']);
  });

  test('disconnected is 1008 without retryAfterMs and 4000 with it; no other reason changes code', () => {
    assert.equal(closeCodeOf('disconnected'), 1008);
    assert.equal(closeCodeOf('disconnected', 1500), 4000);
    assert.deepEqual(JSON.parse(encodeCloseReason('disconnected', 1500)), { reason: 'disconnected', retryAfterMs: 1500 });
    for (const reason of reasons.filter((r) => r !== 'disconnected')) {
      assert.equal(closeCodeOf(reason, 100), closeSpecs[reason].code, reason);
      assert.equal(closeSpecs[reason].retryCode, undefined, reason);
    }
  });

  test('the reasons PROTOCOL.md shows with retryAfterMs carry it', () => {
    for (const reason of ['unavailable', 'buffer_limit', 'congested', 'slow_consumer'] as const) {
      assert.equal(closeSpecs[reason].retryAfter, true, reason);
    }
    for (const reason of ['abusive', 'forbidden'] as const) assert.equal(closeSpecs[reason].retryAfter, false, reason);
  });

  test('closeSpecs cannot be changed at run time', () => {
    assert.ok(Object.isFrozen(closeSpecs));
  });
});

describe('error reasons', () => {
  test('ErrorReasons is exactly the list of PROTOCOL.md', () => {
    assert.deepEqual([...ErrorReasons].sort(), [
      'bad_request', 'payload_too_large', 'rate_limited', 'tenant_rate_limited', 'too_many_joins',
      'forbidden', 'not_joined', 'unavailable', 'internal', 'unauthorized', 'user_rate_limited',
    ].sort());
    assert.equal(new Set(ErrorReasons).size, ErrorReasons.length);
  });

  test('isStrike is false only for the server\'s own faults (unavailable, internal) and the tenant- and user-wide windows', () => {
    for (const reason of ErrorReasons) {
      assert.equal(isStrike(reason), !['unavailable', 'internal', 'tenant_rate_limited', 'user_rate_limited'].includes(reason), reason);
    }
  });
});
