/**
 * The key builders of @sluice/core against the slot function ioredis routes
 * by: the keys one script or pipeline touches together land in one Cluster
 * slot, whatever the tenant, topic, user or idempotency key.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import calculateSlot from 'cluster-key-slot';
import { hashTagOf, idempotencyRedisKey, presenceKey, topicChannel, topicKey, topicRedisKeys,
  WINDOW_PREFIX, windowRedisKey } from '@sluice/core';

// The property tests of the builders are in @sluice/core (fast-check); here a grid of awkward values meets the real slot function.
const names = ['default', 'a', 'acme:eu', 'room.1', 'x-y_z', '0'];
const free = ['', '{', '}', '%', '{}', 'a}b{c%', 'k1', 'ü{ber}', '/@u'];

test("a topic's stream, floor, channel, Cluster idempotency record and presence are in one slot", () => {
  for (const t of names) for (const p of names) for (const k of free) {
    const topic = topicKey(t, p);
    const { stream, floor } = topicRedisKeys(topic);
    const slot = calculateSlot(stream);
    for (const key of [floor, topicChannel(topic), idempotencyRedisKey(true, t, topic, k), presenceKey(topic, '0a1b2c3d')]) {
      assert.equal(calculateSlot(key), slot, key);
    }
    assert.equal(calculateSlot(hashTagOf(stream)), slot);
  }
});

test("a window's two buckets are in one slot", () => {
  for (const key of free) for (const b of [1, 28_000_000, 1e9]) {
    assert.equal(calculateSlot(windowRedisKey(WINDOW_PREFIX, key, b)), calculateSlot(windowRedisKey(WINDOW_PREFIX, key, b - 1)));
  }
});
