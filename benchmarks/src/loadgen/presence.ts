// What the load generator reads of presence frames (PROTOCOL.md "Presence";
// S14): which kind a frame is, the `count` of a presence_state, and how many
// joins and leaves a presence_diff carries, without parsing the JSON of every
// one. A shard encodes one diff per flush and fans the same bytes out to all
// its sockets on the topic, so a generator process sees a handful of distinct
// diffs per second, each thousands of times: the counts of the last few are
// kept and a frame equal byte for byte (memcmp) is not counted again.
//
// Per socket the generator keeps the member count it would show: the state's
// `count`, then + joins - leaves of every diff. The state lists the socket's
// own user first when the shard's replica does not hold it yet (and counts
// it); the owner's next flush then brings that user as a join, which must not
// count twice, so after such a state the diffs are searched for the socket's
// own user until one brings it. (A state that found the user in the replica,
// still there from before a leave whose flush had not reached this shard,
// lists it in its place; that flush's leave and the next one's join are then
// both counted.)
//
// One socket per process (its first to join, when the topic was all but
// empty) keeps the full set of users from the frames (`PresenceView`): what an
// SDK would show, for the kill phase's "members gone" and as a check of the
// counts.

import { indexWithin } from '../lib/codec.ts';

const STATE_AT = 18; // {"type":"presence_s... / {"type":"presence_d...
const C_s = 0x73;
const C_d = 0x64;
const COUNT_KEY = Buffer.from('"count":');
const CONNECTIONS = Buffer.from('{"connections":');
const LEAVES_KEY = Buffer.from('"leaves":{');
const EMPTY_OBJ = Buffer.from(':{}');

/** 'state' or 'diff' for a frame classified as presence (`{"type":"presence_`), null for any other. */
export function presenceKind(buf: Buffer, s: number, e: number): 'state' | 'diff' | null {
  if (e - s <= STATE_AT) return null;
  const c = buf[s + STATE_AT];
  return c === C_s ? 'state' : c === C_d ? 'diff' : null;
}

/** The `count` of a presence_state (or of a presence reply's data); -1 when absent. */
export function stateCount(buf: Buffer, s: number, e: number): number {
  const i = buf.lastIndexOf(COUNT_KEY, e - COUNT_KEY.length);
  if (i < s) return -1;
  let v = 0;
  let j = i + COUNT_KEY.length;
  const from = j;
  for (; j < e; j++) {
    const d = buf[j]! - 48;
    if (d < 0 || d > 9) break;
    v = v * 10 + d;
  }
  return j === from ? -1 : v;
}

/** Occurrences of `needle` in buf[from, to). */
export function occurrences(buf: Buffer, needle: Buffer, from: number, to: number): number {
  let n = 0;
  for (let i = indexWithin(buf, needle, from, to); i !== -1; i = indexWithin(buf, needle, i + needle.length, to)) n++;
  return n;
}

/** Users listed in a presence_state (or presence data): one `{"connections":N}` each. */
export function listedUsers(buf: Buffer, s: number, e: number): number {
  return occurrences(buf, CONNECTIONS, s, e);
}

/** Joins and leaves of a presence_diff: `"u":{"connections":N}` before `"leaves":{`, `"u":{}` after it. */
export function diffEntries(buf: Buffer, s: number, e: number): { joins: number; leaves: number } {
  const l = indexWithin(buf, LEAVES_KEY, s, e);
  if (l === -1) return { joins: occurrences(buf, CONNECTIONS, s, e), leaves: 0 };
  return { joins: occurrences(buf, CONNECTIONS, s, l), leaves: occurrences(buf, EMPTY_OBJ, l + LEAVES_KEY.length, e) };
}

interface Cached {
  readonly bytes: Buffer;
  readonly joins: number;
  readonly leaves: number;
}

/** diffEntries of the last few distinct diffs, found again by comparing bytes. */
export class DiffCache {
  private readonly items: Cached[] = [];
  /** Frames counted (not found in the cache). */
  misses = 0;

  constructor(private readonly size = 8) {}

  entries(buf: Buffer, s: number, e: number): { joins: number; leaves: number } {
    const len = e - s;
    for (let i = 0; i < this.items.length; i++) {
      const it = this.items[i]!;
      if (it.bytes.length === len && buf.compare(it.bytes, 0, len, s, e) === 0) {
        if (i > 0) { this.items.splice(i, 1); this.items.unshift(it); }
        return it;
      }
    }
    this.misses++;
    const got = diffEntries(buf, s, e);
    this.items.unshift({ bytes: Buffer.from(buf.subarray(s, e)), joins: got.joins, leaves: got.leaves });
    if (this.items.length > this.size) this.items.pop();
    return got;
  }
}

/** The users a socket would show, from its presence_state and every presence_diff after it. */
export class PresenceView {
  readonly users = new Set<string>();
  /** False when the state it started from was cut (`truncated`): the set then misses users. */
  exact = false;
  started = false;

  state(text: string): void {
    const f = JSON.parse(text) as { users?: Record<string, unknown>; truncated?: boolean };
    this.users.clear();
    for (const u of Object.keys(f.users ?? {})) this.users.add(u);
    this.exact = f.truncated !== true;
    this.started = true;
  }

  diff(text: string): void {
    if (!this.started) return;
    const f = JSON.parse(text) as { joins?: Record<string, unknown>; leaves?: Record<string, unknown> };
    for (const u of Object.keys(f.joins ?? {})) this.users.add(u);
    for (const u of Object.keys(f.leaves ?? {})) this.users.delete(u);
  }
}
