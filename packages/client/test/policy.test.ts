/** The pure policies: the close table, refusals, backoff, and the pacer against a model of the server's window. */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { closeSpecs, type CloseReason, encodeCloseReason } from '@sluice/protocol';
import { hitFixedWindow } from '@sluice/core';
import { afterClose, afterRefusal, fullJitter, Pacer, parseReason, reconnectDelay } from '../src/index.ts';
import { marginFor } from '../src/pacer.ts';

describe('close table (PROTOCOL.md, seen from the client)', () => {
  test('every close reason of the protocol gets the action its spec names', () => {
    for (const [reason, spec] of Object.entries(closeSpecs) as [CloseReason, (typeof closeSpecs)[CloseReason]][]) {
      const text = encodeCloseReason(reason, spec.retryAfter ? 2345 : undefined);
      const d = afterClose(spec.code, text);
      assert.equal(d.kind === 'reconnect', spec.reconnect, `${spec.code} ${reason}`);
      if (d.kind === 'reconnect') {
        assert.equal(d.retryAfterMs, spec.retryAfter ? 2345 : undefined, `${reason}: the hint is kept`);
        assert.equal(d.reason, reason);
      }
      // The reason with a second code (disconnected: 4000) comes back after its retryAfterMs when sent with it.
      if (spec.retryCode !== undefined) {
        const retry = afterClose(spec.retryCode, encodeCloseReason(reason, 2345));
        assert.ok(retry.kind === 'reconnect' && retry.retryAfterMs === 2345 && retry.reason === reason, `${spec.retryCode} ${reason}`);
      }
    }
  });

  test('1008 stops whatever its reason; abusive and forbidden are surfaced as such', () => {
    assert.deepEqual(afterClose(1008, '{"reason":"abusive"}'), { kind: 'stop', error: 'abusive', reason: 'abusive' });
    assert.deepEqual(afterClose(1008, '{"reason":"forbidden"}'), { kind: 'stop', error: 'forbidden', reason: 'forbidden' });
    assert.equal(afterClose(1008, 'policy').kind, 'stop');
  });

  test('1009 drops the oversized frame; 4001 refreshes the token; 1012, 1013 and 4503 wait for the hint', () => {
    const tooBig = afterClose(1009, '{"reason":"payload_too_large"}');
    assert.ok(tooBig.kind === 'reconnect' && tooBig.dropOversized && !tooBig.refreshToken);
    const expired = afterClose(4001, '{"reason":"token_expired"}');
    assert.ok(expired.kind === 'reconnect' && expired.refreshToken && !expired.dropOversized && expired.retryAfterMs === undefined);
    for (const [code, reason] of [[1012, 'unavailable'], [1013, 'congested'], [1013, 'buffer_limit'], [4503, 'slow_consumer']] as const) {
      const d = afterClose(code, `{"reason":"${reason}","retryAfterMs":1500}`);
      assert.ok(d.kind === 'reconnect' && d.retryAfterMs === 1500 && !d.refreshToken && !d.dropOversized, `${code}`);
    }
  });

  test('4003 token_revoked asks for a new token, told token_revoked, and reconnects with plain backoff', () => {
    assert.deepEqual(afterClose(4003, '{"reason":"token_revoked"}'), {
      kind: 'reconnect', retryAfterMs: undefined, hintExact: false, refreshToken: true, tokenReason: 'token_revoked', dropOversized: false, report: undefined,
      reason: 'token_revoked',
    });
    // The code decides, as for 4001: a 4003 whose reason is not JSON still wants a new token.
    const bare = afterClose(4003, '');
    assert.ok(bare.kind === 'reconnect' && bare.refreshToken && bare.tokenReason === 'token_revoked');
    const expired = afterClose(4001, '{"reason":"token_expired"}');
    assert.ok(expired.kind === 'reconnect' && expired.tokenReason === 'token_expired', 'and 4001 is still token_expired');
  });

  test('4000 disconnected with retryAfterMs reconnects no sooner than the hint, as 1012 does; without one, plain backoff', () => {
    assert.deepEqual(afterClose(4000, '{"reason":"disconnected","retryAfterMs":3100}'), {
      kind: 'reconnect', retryAfterMs: 3100, hintExact: true, refreshToken: false, tokenReason: undefined, dropOversized: false, report: undefined, reason: 'disconnected',
    });
    assert.deepEqual({ ...afterClose(4000, '{"reason":"disconnected","retryAfterMs":3100}'), reason: 'x' },
      { ...afterClose(1012, '{"reason":"unavailable","retryAfterMs":3100}'), reason: 'x' }, 'the same as 1012');
    const noHint = afterClose(4000, '{"reason":"disconnected"}');
    assert.ok(noHint.kind === 'reconnect' && noHint.retryAfterMs === undefined && !noHint.refreshToken);
  });

  test('1008 disconnected stops with the error disconnected; on another code it stops unless it carries retryAfterMs', () => {
    assert.deepEqual(afterClose(1008, '{"reason":"disconnected"}'), { kind: 'stop', error: 'disconnected', reason: 'disconnected' });
    // Even with a hint: 1008 is "stay away".
    assert.deepEqual(afterClose(1008, '{"reason":"disconnected","retryAfterMs":500}'), { kind: 'stop', error: 'disconnected', reason: 'disconnected' });
    assert.deepEqual(afterClose(1000, '{"reason":"disconnected"}'), { kind: 'stop', error: 'disconnected', reason: 'disconnected' });
    const withHint = afterClose(1000, '{"reason":"disconnected","retryAfterMs":700}');
    assert.ok(withHint.kind === 'reconnect' && withHint.retryAfterMs === 700);
  });

  test('a cut connection (1006) and codes the table does not name reconnect with plain backoff', () => {
    for (const code of [1000, 1001, 1006, 1011, 4000, 4999]) {
      const d = afterClose(code, '');
      assert.ok(d.kind === 'reconnect' && d.retryAfterMs === undefined && !d.refreshToken && !d.dropOversized, String(code));
    }
  });

  test('close reasons that are not JSON, or carry a bad retryAfterMs, give no hint', () => {
    assert.deepEqual(parseReason('going away'), { reason: 'going away', retryAfterMs: undefined });
    assert.deepEqual(parseReason('{"reason":"unavailable","retryAfterMs":-5}'), { reason: 'unavailable', retryAfterMs: undefined });
    assert.deepEqual(parseReason('{"reason":"unavailable","retryAfterMs":"12"}'), { reason: 'unavailable', retryAfterMs: undefined });
    assert.deepEqual(parseReason(''), { reason: undefined, retryAfterMs: undefined });
  });
});

describe('refusals at the upgrade', () => {
  test('503 and 429 wait for the body\'s retryAfterMs, or for Retry-After in seconds without a body', () => {
    assert.deepEqual(afterRefusal(503, '{"reason":"unavailable","retryAfterMs":1234}', '2'),
      { kind: 'reconnect', retryAfterMs: 1234, hintExact: true, refreshToken: false, tokenReason: undefined, dropOversized: false, report: undefined,
        reason: 'unavailable' });
    const noBody = afterRefusal(429, '', '3');
    assert.ok(noBody.kind === 'reconnect' && noBody.retryAfterMs === 3000 && !noBody.hintExact, 'whole seconds from the header: not exact');
    const ip = afterRefusal(429, '{"reason":"ip_rate_limited","retryAfterMs":800}', '1');
    assert.ok(ip.kind === 'reconnect' && ip.retryAfterMs === 800 && ip.reason === 'ip_rate_limited');
  });

  test('401 asks for a fresh token and reports unauthorized; 403 (origin) stops', () => {
    const unauth = afterRefusal(401, '{"reason":"unauthorized"}', undefined);
    assert.ok(unauth.kind === 'reconnect' && unauth.refreshToken && unauth.report === 'unauthorized' && unauth.tokenReason === 'unauthorized');
    const noBody = afterRefusal(401, '', undefined);
    assert.ok(noBody.kind === 'reconnect' && noBody.refreshToken && noBody.tokenReason === 'unauthorized' && noBody.reason === 'unauthorized');
    assert.deepEqual(afterRefusal(403, '{"reason":"forbidden_origin"}', undefined), { kind: 'stop', error: 'forbidden_origin', reason: 'forbidden_origin' });
    assert.deepEqual(afterRefusal(403, '{"reason":"forbidden","message":"banned"}', undefined), { kind: 'stop', error: 'forbidden', reason: 'forbidden' },
      'the connect hook refused with 403');
  });

  test('401 token_revoked: a new token, asked as token_revoked, reported as token_revoked, plain backoff', () => {
    assert.deepEqual(afterRefusal(401, '{"reason":"token_revoked"}', undefined), {
      kind: 'reconnect', retryAfterMs: undefined, hintExact: false, refreshToken: true, tokenReason: 'token_revoked', dropOversized: false, report: 'token_revoked',
      reason: 'token_revoked',
    });
  });

  test('429 tenant_rate_limited waits its hint (body, else Retry-After); 429 too_many_sockets has none: plain backoff, no new token', () => {
    const tenant = afterRefusal(429, '{"reason":"tenant_rate_limited","retryAfterMs":640}', '1');
    assert.ok(tenant.kind === 'reconnect' && tenant.retryAfterMs === 640 && tenant.reason === 'tenant_rate_limited' && !tenant.refreshToken);
    const headerOnly = afterRefusal(429, '{"reason":"tenant_rate_limited"}', '2');
    assert.ok(headerOnly.kind === 'reconnect' && headerOnly.retryAfterMs === 2000);
    assert.deepEqual(afterRefusal(429, '{"reason":"too_many_sockets"}', undefined), {
      kind: 'reconnect', retryAfterMs: undefined, hintExact: false, refreshToken: false, tokenReason: undefined, dropOversized: false, report: undefined,
      reason: 'too_many_sockets',
    });
  });

  test('other statuses back off without a hint', () => {
    const d = afterRefusal(500, '{"reason":"internal"}', undefined);
    assert.ok(d.kind === 'reconnect' && d.retryAfterMs === undefined && !d.refreshToken);
  });
});

describe('backoff with full jitter', () => {
  const b = { initialMs: 100, maxMs: 3000 };

  test('uniform in [0, min(max, initial * 2^n)): the bounds are reached from both ends', () => {
    assert.equal(fullJitter(0, b, () => 0), 0);
    assert.equal(fullJitter(0, b, () => 0.999999), 99);
    assert.equal(fullJitter(3, b, () => 0.999999), 799);
    assert.equal(fullJitter(20, b, () => 0.999999), 2999);
    assert.equal(fullJitter(1e9, b, () => 0.5), 1500);
  });

  test('with a hint the wait is never less than the hint', () => {
    fc.assert(fc.property(fc.nat(40), fc.double({ min: 0, max: 1, noNaN: true }), fc.integer({ min: 0, max: 60_000 }), fc.boolean(), (n, r, hint, exact) => {
      const d = reconnectDelay(n, b, () => r, hint, exact);
      return d >= hint && d < hint + b.maxMs;
    }));
  });

  test('an exact hint (milliseconds from the server) gets at most a tenth more, capped at initialMs, whatever the failures', () => {
    // Not exact (Retry-After's seconds): the full-jitter spread grows with the failures.
    assert.equal(reconnectDelay(5, b, () => 0.999999, 2000, false), 2000 + 3000 - 1);
    // Exact: a tenth of 2000 is 200, above initialMs (100): at most 99 more, at 0 failures as at 30.
    assert.equal(reconnectDelay(0, b, () => 0.999999, 2000, true), 2099);
    assert.equal(reconnectDelay(30, b, () => 0.999999, 2000, true), 2099);
    assert.equal(reconnectDelay(30, b, () => 0, 2000, true), 2000);
    // A short hint: a tenth of it.
    assert.equal(reconnectDelay(7, b, () => 0.999999, 300, true), 329);
    // The budget's places: 1000 clients told 1000 different times keep their order within the spread.
    const told = Array.from({ length: 1000 }, (_, i) => 5 * i);
    const waits = told.map((t) => reconnectDelay(9, b, Math.random, t, true));
    for (const [i, w] of waits.entries()) assert.ok(w >= told[i]! && w <= told[i]! + Math.max(1, Math.ceil(told[i]! / 10)), `${told[i]} -> ${w}`);
    // Without a hint, exact means nothing: plain backoff.
    assert.equal(reconnectDelay(3, b, () => 0.5, undefined, true), 400);
  });

  test('a broken random source cannot produce a negative or endless wait', () => {
    for (const r of [-1, 2, Number.NaN, Number.POSITIVE_INFINITY]) {
      const d = fullJitter(5, b, () => r);
      assert.ok(d >= 0 && d < 3000, `${r} -> ${d}`);
    }
  });
});

describe('pacer', () => {
  test('never more than maxMessages in any window of the server, whatever the send pattern and delivery jitter within the margin', () => {
    fc.assert(fc.property(
      fc.integer({ min: 1, max: 3000 }),
      fc.integer({ min: 10, max: 2000 }),
      fc.array(fc.integer({ min: 0, max: 300 }), { minLength: 1, maxLength: 400 }),
      fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 50 }),
      fc.integer({ min: 0, max: 200 }),
      (max, windowMs, gaps, jitters, baseLatency) => {
        const pacer = new Pacer(max, windowMs);
        const margin = marginFor(windowMs);
        // The client wants to send at these times; the pacer delays each as needed.
        let want = 0;
        let clock = 0;
        const arrivals: number[] = [];
        gaps.forEach((gap, i) => {
          want += gap;
          clock = Math.max(clock, want);
          clock += pacer.wait(clock);
          assert.equal(pacer.wait(clock), 0);
          pacer.sent(clock);
          // Delivery takes baseLatency plus up to margin - 1 ms more (the server's clock counts in whole ms).
          const lat = baseLatency + jitters[i % jitters.length]! * (margin - 1);
          arrivals.push(Math.floor(clock + lat));
        });
        // The server reads frames in order (TCP), so arrival times never go back.
        for (let i = 1; i < arrivals.length; i++) arrivals[i] = Math.max(arrivals[i]!, arrivals[i - 1]!);
        const server = { windowStart: -1e12, windowCount: 0 };
        for (const at of arrivals) assert.equal(hitFixedWindow(server, at, max, windowMs), 0, `a frame at ${at} was rate_limited`);
      },
    ), { numRuns: 300 });
  });

  test('a burst of maxMessages goes at once; the next waits for the window plus the margin', () => {
    const p = new Pacer(20, 1000);
    for (let i = 0; i < 20; i++) {
      assert.equal(p.wait(5000), 0);
      p.sent(5000);
    }
    assert.equal(p.wait(5000), 1000 + marginFor(1000));
  });

  test('pauseUntil holds every frame, even with budget left', () => {
    const p = new Pacer(20, 1000);
    p.pauseUntil(1400);
    assert.equal(p.wait(1000), 400);
    assert.equal(p.wait(1400), 0);
  });

  // Sub-spans of about 1 ms meet whole-millisecond clocks, so about half the
  // limit is used: still far more than any client sends, with a 1024-entry log.
  test('very large limits keep a bounded log and still let hundreds of thousands through per window', () => {
    const p = new Pacer(1_000_000, 1000);
    let sent = 0;
    for (let t = 0; t < 1000; t++) while (p.wait(t) === 0 && sent < 2_000_000) {
      p.sent(t);
      sent++;
    }
    assert.ok(sent <= 1_000_000, `sent ${sent} in one window`);
    assert.ok(sent >= 400_000, `sent only ${sent} in one window`);
  });
});
