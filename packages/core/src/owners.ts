import { fnv1a } from './broker.ts';

/** Slots of the owner table: 2^18 of two bytes (512 KiB per node, whose pages the OS gives as topics claim them). */
export const OWNER_SLOTS = 1 << 18;
const MASK = OWNER_SLOTS - 1;

/**
 * Which shard owns a topic in embedded mode, decided once by whoever
 * touches it first: the first subscribe, publish, history or presence read
 * of a topic on a shard claims the topic's slot for that shard, so a topic
 * is owned where its first subscriber (usually its publisher too) is, and a
 * publish to it from there does not cross threads. The coordinator, which
 * owns nothing, claims for the hash's shard (`ownerOf`).
 *
 * The table is one SharedArrayBuffer of the node, made by the coordinator
 * and given to every shard (a restarted shard gets the same one, so it owns
 * what its earlier life owned, as with the hash). A slot holds its owner + 1
 * (0: unclaimed) and is claimed with one compare-and-swap: of two shards
 * claiming at once one wins, and both see the winner. A claimed slot never
 * changes for the life of the node, so a topic has one owner, its sequencer,
 * from its first touch on: the order a topic's events are given in is the
 * owner's, as it was with the hash. Topics are hashed (FNV-1a) into the
 * slots: two topics in one slot share its owner.
 *
 * Slots are not released (a release races a publish already on its way to
 * the old owner); a node that has touched a great many topics (of the order
 * of the slot count) finds most slots claimed, and a new topic's owner is
 * then whoever first touched its slot: as random as the hash, no worse.
 */
export class TopicOwners {
  private readonly slots: Uint16Array;

  constructor(
    readonly shards: number,
    readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(OWNER_SLOTS * 2),
  ) {
    if (buffer.byteLength !== OWNER_SLOTS * 2) throw new Error(`the owner table takes ${OWNER_SLOTS * 2} bytes, not ${buffer.byteLength}`);
    this.slots = new Uint16Array(buffer);
  }

  /** The owner of the topic key; a topic no shard owns yet becomes `claimant`'s. */
  claim(key: string, claimant: number): number {
    return this.claimSlot(fnv1a(key), claimant);
  }

  /** The owner of the topic key, claiming an unclaimed one for the hash's shard (for the coordinator, which owns nothing). */
  ownerOf(key: string): number {
    const h = fnv1a(key);
    return this.claimSlot(h, h % this.shards);
  }

  private claimSlot(h: number, claimant: number): number {
    const slot = h & MASK;
    const cur = Atomics.load(this.slots, slot);
    if (cur !== 0) return cur - 1;
    const prev = Atomics.compareExchange(this.slots, slot, 0, claimant + 1);
    return prev === 0 ? claimant : prev - 1;
  }

  /** The owner of the topic key, or -1 while no shard has claimed it. */
  peek(key: string): number {
    return Atomics.load(this.slots, fnv1a(key) & MASK) - 1;
  }

  /** Slots claimed: a scan of the table (0.7 ms on this machine, busy), for the metric, not the hot path. */
  claimedSlots(): number {
    let n = 0;
    const slots = this.slots;
    for (let i = 0; i < OWNER_SLOTS; i++) if (slots[i] !== 0) n++;
    return n;
  }
}
