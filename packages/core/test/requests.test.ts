import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { PendingRequests, RequestFailed, type RequestTimers } from '../src/requests.ts';

/** A hand-driven clock: timers fire when the test advances it. */
function fakeTimers(): RequestTimers & { advance(ms: number): void; readonly live: number } {
  let now = 0;
  const due = new Map<number, { at: number; fn: () => void }>();
  let next = 0;
  return {
    set(fn, ms) {
      due.set(++next, { at: now + ms, fn });
      return next;
    },
    clear(h) {
      due.delete(h as number);
    },
    advance(ms) {
      now += ms;
      for (const [h, t] of [...due]) {
        if (t.at <= now) {
          due.delete(h);
          t.fn();
        }
      }
    },
    get live() {
      return due.size;
    },
  };
}

describe('PendingRequests', () => {
  test('an answer settles the request it names; ids start at 1 and increase', async () => {
    const r = new PendingRequests<string>();
    const sent: number[] = [];
    const a = r.request((rid) => sent.push(rid));
    const b = r.request((rid) => sent.push(rid));
    assert.deepEqual(sent, [1, 2]);
    assert.equal(r.answer(2, 'two'), true);
    assert.equal(r.answer(1, 'one'), true);
    assert.equal(r.answer(1, 'again'), false, 'answered once');
    assert.equal(r.answer(99, 'x'), false, 'unknown id ignored');
    assert.deepEqual(await Promise.all([a, b]), ['one', 'two']);
    assert.equal(r.size, 0);
  });

  test('a timeout resolves with the fallback value, or rejects with RequestFailed; a late answer is ignored', async () => {
    const timers = fakeTimers();
    const r = new PendingRequests<string | undefined>(timers);
    let rid = 0;
    const withValue = r.request((id) => (rid = id), { timeoutMs: 100, fail: { value: undefined } });
    const rejecting = r.request(() => {}, { timeoutMs: 200 });
    timers.advance(100);
    assert.equal(await withValue, undefined);
    assert.equal(r.answer(rid, 'late'), false);
    timers.advance(100);
    await assert.rejects(rejecting, (err: unknown) => err instanceof RequestFailed && err.code === 'timeout');
    assert.equal(timers.live, 0);
  });

  test('an answer clears its timer', async () => {
    const timers = fakeTimers();
    const r = new PendingRequests<number>(timers);
    const p = r.request((rid) => queueMicrotask(() => r.answer(rid, 7)), { timeoutMs: 50 });
    assert.equal(await p, 7);
    assert.equal(timers.live, 0);
  });

  test('close fails every pending request as each says, and later ones at once without sending', async () => {
    const timers = fakeTimers();
    const r = new PendingRequests<string>(timers);
    const gone = new Error('shard 1 is unavailable');
    const a = r.request(() => {}, { fail: { value: 'unavailable' } });
    const b = r.request(() => {}, { fail: { error: gone }, timeoutMs: 1000 });
    const c = r.request(() => {});
    assert.equal(r.close('peer gone'), 3);
    assert.equal(await a, 'unavailable');
    await assert.rejects(b, (err) => err === gone);
    await assert.rejects(c, (err: unknown) => err instanceof RequestFailed && err.code === 'closed' && err.message === 'peer gone');
    assert.equal(timers.live, 0);
    let sent = false;
    assert.equal(await r.request(() => (sent = true), { fail: { value: 'unavailable' } }), 'unavailable');
    assert.equal(sent, false);
  });

  test('a send that throws rejects and leaves nothing pending; a timeout without timers is refused', async () => {
    const r = new PendingRequests();
    await assert.rejects(r.request(() => {
      throw new Error('port closed');
    }), /port closed/);
    assert.equal(r.size, 0);
    assert.throws(() => r.request(() => {}, { timeoutMs: 1 }), /needs timers/);
  });

  test('call: done gets the answer at once (no microtask), or the fallback on timeout, close, or a closed channel', () => {
    const timers = fakeTimers();
    const r = new PendingRequests<string>(timers);
    const got: string[] = [];
    const sent: number[] = [];
    r.call((rid) => sent.push(rid), { fail: { value: 'gone' } }, (v) => got.push(`a:${v}`));
    r.call((rid) => sent.push(rid), { fail: { value: 'late' }, timeoutMs: 10 }, (v) => got.push(`b:${v}`));
    r.call((rid) => sent.push(rid), { fail: { value: 'gone' } }, (v) => got.push(`c:${v}`));
    assert.deepEqual(sent, [1, 2, 3]);
    assert.equal(r.answer(1, 'one'), true);
    assert.deepEqual(got, ['a:one'], 'done ran inside answer()');
    timers.advance(10);
    assert.deepEqual(got, ['a:one', 'b:late']);
    assert.equal(r.answer(2, 'two'), false, 'a late answer is ignored');
    assert.equal(r.close(), 1);
    assert.deepEqual(got, ['a:one', 'b:late', 'c:gone']);
    r.call(() => assert.fail('sent on a closed channel'), { fail: { value: 'closed' } }, (v) => got.push(`d:${v}`));
    assert.deepEqual(got, ['a:one', 'b:late', 'c:gone', 'd:closed'], 'a closed channel answers before call returns');
    assert.equal(timers.live, 0);
    assert.equal(r.size, 0);
  });

  test('close: a callback that throws does not leave the others unanswered; its error comes out after', () => {
    const r = new PendingRequests<string>();
    const got: string[] = [];
    r.call(() => undefined, { fail: { value: 'a' } }, (v) => got.push(v));
    r.call(() => undefined, { fail: { value: 'b' } }, () => { throw new Error('bad callback'); });
    r.call(() => undefined, { fail: { value: 'c' } }, (v) => got.push(v));
    assert.throws(() => r.close(), /bad callback/);
    assert.deepEqual(got, ['a', 'c']);
    assert.equal(r.size, 0);
  });

  test('call: a send that throws leaves nothing pending and done is never called', () => {
    const r = new PendingRequests<string>();
    let called = 0;
    assert.throws(() => r.call(() => { throw new Error('port closed'); }, { fail: { value: 'x' } }, () => called++), /port closed/);
    assert.equal(r.size, 0);
    assert.equal(r.close(), 0);
    assert.equal(called, 0);
  });

  test('property: any order of answers, timeouts and a close settles every request exactly once', async () => {
    await fc.assert(fc.asyncProperty(fc.array(fc.oneof(
      fc.record({ op: fc.constant('req' as const), timeout: fc.option(fc.integer({ min: 1, max: 5 }), { nil: undefined }) }),
      fc.record({ op: fc.constant('answer' as const), pick: fc.nat() }),
      fc.record({ op: fc.constant('tick' as const) }),
      fc.record({ op: fc.constant('close' as const) }),
    ), { maxLength: 40 }), async (ops) => {
      const timers = fakeTimers();
      const r = new PendingRequests<number>(timers);
      const settled = new Map<number, number>();
      const promises: Promise<void>[] = [];
      const ids: number[] = [];
      for (const o of ops) {
        if (o.op === 'req') {
          const key = promises.length;
          const p = r.request((rid) => void ids.push(rid), { timeoutMs: o.timeout, fail: { value: -1 } });
          promises.push(p.then(() => void settled.set(key, (settled.get(key) ?? 0) + 1)));
        } else if (o.op === 'answer' && ids.length > 0) r.answer(ids[o.pick % ids.length]!, 1);
        else if (o.op === 'tick') timers.advance(1);
        else if (o.op === 'close') r.close();
      }
      r.close();
      await Promise.all(promises);
      assert.equal(promises.length, settled.size);
      for (const n of settled.values()) assert.equal(n, 1);
      assert.equal(r.size, 0);
      assert.equal(timers.live, 0);
    }));
  });
});
