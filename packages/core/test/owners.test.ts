import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { fnv1a, ownerOf } from '../src/broker.ts';
import { OWNER_SLOTS, TopicOwners } from '../src/owners.ts';

test('a topic is its first claimant\'s, for good; the coordinator claims for the hash\'s shard', () => {
  const owners = new TopicOwners(4);
  assert.equal(owners.peek('t:a'), -1);
  assert.equal(owners.claim('t:a', 2), 2);
  assert.equal(owners.claim('t:a', 0), 2, 'a later claim gets the first owner');
  assert.equal(owners.ownerOf('t:a'), 2, 'and so does the coordinator');
  assert.equal(owners.peek('t:a'), 2);
  const hashed = ownerOf('t:b', 4);
  assert.equal(owners.ownerOf('t:b'), hashed, 'untouched: the hash\'s shard');
  assert.equal(owners.claim('t:b', (hashed + 1) % 4), hashed);
  // Shard 0 is stored as 1: it is a claim, not an empty slot.
  assert.equal(owners.claim('t:c', 0), 0);
  assert.equal(owners.claim('t:c', 3), 0);
  // Three slots claimed in the buffer, each holding its owner + 1.
  const held = [...new Uint16Array(owners.buffer)].filter((v) => v !== 0).sort();
  assert.deepEqual(held, [1, 3, hashed + 1].sort());
  assert.equal(owners.claimedSlots(), 3);
});

test('two topics in one slot share its owner; the table is the node\'s, shared by views of one buffer', () => {
  const a = new TopicOwners(2);
  const b = new TopicOwners(2, a.buffer);
  const slot = (k: string): number => fnv1a(k) & (OWNER_SLOTS - 1);
  const first = 'x:0';
  let twin = '';
  for (let i = 1; twin === ''; i++) if (slot(`x:${i}`) === slot(first)) twin = `x:${i}`;
  assert.equal(a.claim(first, 1), 1);
  assert.equal(b.claim(twin, 0), 1, 'the slot is shard 1\'s');
  assert.throws(() => new TopicOwners(2, new SharedArrayBuffer(16)), /owner table takes 524288 bytes/);
});

test('threads claiming the same topics at once all get one owner per topic: the compare-and-swap\'s winner', async () => {
  const shards = 4;
  const keys = 60_000;
  const owners = new TopicOwners(shards);
  const start = new SharedArrayBuffer(8);
  const outs = Array.from({ length: shards }, () => new SharedArrayBuffer(keys * 2));
  const workers = outs.map((out, shard) => new Worker(new URL('./fixtures/owners-claimer.mjs', import.meta.url), {
    workerData: { table: owners.buffer, start, shard, shards, keys, out },
  }));
  const go = new Int32Array(start);
  // Every thread is waiting on the start word before any claims.
  while (Atomics.load(go, 1) < shards) await new Promise((r) => setTimeout(r, 5));
  Atomics.store(go, 0, 1);
  Atomics.notify(go, 0);
  await Promise.all(workers.map((w) => new Promise((resolve, reject) => { w.once('exit', resolve); w.once('error', reject); })));
  const got = outs.map((o) => new Int16Array(o));
  const byShard = new Array<number>(shards).fill(0);
  for (let i = 0; i < keys; i++) {
    const owner = owners.peek(`room:${i}`);
    assert.ok(owner >= 0 && owner < shards, `room:${i} is claimed`);
    for (let s = 0; s < shards; s++) if (got[s]![i] !== owner) assert.fail(`room:${i}: thread ${s} was told ${got[s]![i]}, the table says ${owner}`);
    byShard[owner]!++;
  }
  // Each thread started on its own quarter: each won topics (the claims raced, none was shut out).
  for (let s = 0; s < shards; s++) assert.ok(byShard[s]! > keys / shards / 4, `thread ${s} owns ${byShard[s]} of ${keys}`);
});
