import { test } from 'node:test';
import assert from 'node:assert/strict';
import { coords, pathOf } from '../src/geometry.ts';

test('coords: time left to right, 0 at the bottom, max at the top', () => {
  assert.deepEqual(coords([[0, 0], [50, 5], [100, 10]], 0, 100, 10, 100, 12), [[0, 11], [50, 6], [100, 1]]);
  // One instant: drawn at the right edge; negative values at the bottom.
  assert.deepEqual(coords([[7, -3]], 7, 7, 0, 100, 12), [[100, 11]]);
  assert.equal(pathOf([[0, 0], [100, 10]], 0, 100, 10, 100, 12), '0.0,11.0 100.0,1.0');
});
