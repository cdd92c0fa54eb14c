// The page's pure helpers (numbers, input parsing, chart geometry). The
// page itself is tested in a browser elsewhere; these run with node:test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { breakdown, formatBreakdown, formatBytes, formatDuration, formatMiB, formatRate, parseJson, parseUserList, secondsAgo, sum } from '../src/format.ts';
import { query, tenantName, tenantOf } from '../src/ctx.ts';

test('formatBytes: binary units, three significant digits', () => {
  assert.equal(formatBytes(0), '0 B');
  assert.equal(formatBytes(1023), '1023 B');
  assert.equal(formatBytes(1536), '1.5 KiB');
  assert.equal(formatBytes(12.34 * 1024 * 1024), '12.3 MiB');
  assert.equal(formatBytes(300 * 1024 * 1024), '300 MiB');
  assert.equal(formatBytes(1.5 * 1024 ** 3), '1.5 GiB');
  assert.equal(formatBytes(Number.NaN), '–');
  assert.equal(formatMiB(64 * 1024 * 1024), '64');
});

test('formatRate and breakdowns', () => {
  assert.equal(formatRate(0), '0');
  assert.equal(formatRate(0.256), '0.26');
  assert.equal(formatRate(12.34), '12.3');
  assert.equal(formatRate(1250.4), '1250');
  const by = { accepted: 12, over_budget: 3.5, unauthorized: 0 };
  assert.equal(sum(by), 15.5);
  assert.equal(sum(undefined), 0);
  assert.deepEqual(breakdown(by), [['accepted', 12], ['over_budget', 3.5]]);
  assert.equal(formatBreakdown(by), 'accepted 12 · over_budget 3.5');
  assert.equal(formatBreakdown({ accepted: 0 }), 'none');
});

test('formatDuration and secondsAgo', () => {
  assert.equal(formatDuration(850), '850 ms');
  assert.equal(formatDuration(12_000), '12 s');
  assert.equal(formatDuration(185_000), '3 min 5 s');
  assert.equal(formatDuration(2 * 3600_000 + 4 * 60_000), '2 h 4 min');
  assert.equal(formatDuration(73 * 3600_000), '3 d 1 h');
  assert.equal(secondsAgo(1000, 4999), 3);
  assert.equal(secondsAgo(5000, 1000), 0);
});

test('parseUserList: trimmed, no empties, no repeats', () => {
  assert.deepEqual(parseUserList(' u1, u2 ,,u1,  '), ['u1', 'u2']);
  assert.deepEqual(parseUserList(' , '), []);
});

test('parseJson: a value, or a message that says why not', () => {
  assert.deepEqual(parseJson('{"a": 1}'), { ok: true, value: { a: 1 } });
  assert.deepEqual(parseJson('"hi"'), { ok: true, value: 'hi' });
  const bad = parseJson('{a: 1}');
  assert.equal(bad.ok, false);
  assert.match(bad.ok ? '' : bad.message, /^Data is not valid JSON: /);
  assert.equal(parseJson('  ').ok, false);
});

test('tenant fields and queries', () => {
  assert.equal(tenantOf('  '), undefined);
  assert.equal(tenantOf(' acme '), 'acme');
  assert.equal(tenantName(''), 'default');
  assert.equal(query({ limit: 20, tenant: undefined }), '?limit=20');
  assert.equal(query({ tenant: 'a b', topic: 'room.1' }), '?tenant=a+b&topic=room.1');
  assert.equal(query({}), '');
});
