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

test('threads claiming the same topics at once are all told one owner per topic: the compare-and-swap\'s winner', async (t) => {
  const shards = 4;
  const keys = 60_000;
  const owners = new TopicOwners(shards);
  const barrier = new SharedArrayBuffer(4);
  const outs = Array.from({ length: shards }, () => new SharedArrayBuffer(keys * 2));
  const lost = Array.from({ length: shards }, () => new SharedArrayBuffer(4));
  const workers = outs.map((out, shard) => new Worker(new URL('./fixtures/owners-claimer.mjs', import.meta.url), {
    workerData: { table: owners.buffer, barrier, shard, shards, keys, batch: 256, out, lost: lost[shard] },
  }));
  await Promise.all(workers.map((w) => new Promise((resolve, reject) => { w.once('exit', resolve); w.once('error', reject); })));
  const got = outs.map((o) => new Int16Array(o));
  for (let i = 0; i < keys; i++) {
    const owner = owners.peek(`room:${i}`);
    assert.ok(owner >= 0 && owner < shards, `room:${i} is claimed`);
    for (let s = 0; s < shards; s++) if (got[s]![i] !== owner) assert.fail(`room:${i}: thread ${s} was told ${got[s]![i]}, the table says ${owner}`);
  }
  // Who won how many depends on the OS's scheduling, not on the table: reported, not asserted.
  const won = Array.from({ length: shards }, (_, s) => got[s]!.reduce((n, o) => n + (o === s ? 1 : 0), 0));
  t.diagnostic(`topics won per thread: ${won.join(', ')}; races lost (unclaimed when looked at, another's when claimed): ${lost.map((l) => new Int32Array(l)[0]).join(', ')}`);
});
