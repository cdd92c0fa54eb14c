import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MapPass } from '../src/map-pass.ts';

test('MapPass visits a budget at a time from where it stopped, restarts after the end, and sees deletions and additions', () => {
  const m = new Map([['a', 1], ['b', 2], ['c', 3]]);
  const pass = new MapPass(m);
  const seen: string[] = [];
  const visit = (k: string): void => {
    seen.push(k);
  };
  pass.next(2, visit);
  assert.deepEqual(seen, ['a', 'b']);
  m.set('d', 4);
  m.delete('c');
  pass.next(5, visit);
  assert.deepEqual(seen, ['a', 'b', 'd'], 'the pass ends at the end of the map: c deleted, d added meanwhile');
  pass.next(1, visit);
  assert.deepEqual(seen, ['a', 'b', 'd', 'a'], 'a new pass');
  // Deleting the entry being visited does not stop the pass.
  pass.next(3, (k) => {
    seen.push(k);
    m.delete(k);
  });
  assert.deepEqual(seen, ['a', 'b', 'd', 'a', 'b', 'd']);
  assert.deepEqual([...m.keys()], ['a']);
  pass.next(0, visit);
  assert.equal(seen.length, 6, 'a budget of 0 visits nothing');
});
