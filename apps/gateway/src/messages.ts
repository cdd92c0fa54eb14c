import type { Delivery, HistoryRead, PresenceChange, PresenceFlush, PublishFields, PublishResult } from '@sluice/core';
import type { EventClass } from '@sluice/protocol';

/**
 * Messages between shards, over one MessagePort per pair of shards. A shard
 * sends requests (`ToOwner`) to the owner of a topic and gets answers and
 * events back (`FromOwner`); each shard is both. Each postMessage carries one
 * string: the messages one turn of the event loop produced, joined by RS
 * (\x1e), their fields joined by US (\x1f). A string crosses threads as one
 * copy, where structured clone walks every object: measured here, 1.2 us per
 * message against 3 us for objects.
 * No field can hold a control character: frames and data are JSON (which
 * escapes them), topics and tenants match TOPIC_PATTERN, and the codec
 * refuses keys and idempotency keys that contain one. Empty = undefined.
 * An `rid` of 0 asks for no answer.
 */
export type ToOwner =
  | { readonly op: 'sub'; readonly rid: number; readonly topic: string }
  | { readonly op: 'unsub'; readonly topic: string }
  | { readonly op: 'pub'; readonly rid: number; readonly tenant: string; readonly req: PublishFields }
  /** A durable publish with an idempotency key, sent to the key's owner. */
  | { readonly op: 'once'; readonly rid: number; readonly tenant: string; readonly req: PublishFields }
  /** `since` undefined: the newest `limit` events; `limit` undefined: no limit. */
  | { readonly op: 'hist'; readonly rid: number; readonly topic: string; readonly since: string | undefined; readonly limit: number | undefined }
  /** Presence: this shard's count of a user's sockets on a presence topic (0: none left). */
  | { readonly op: 'pset'; readonly topic: string; readonly user: string; readonly n: number }
  /** Presence: the topic's state now, as the `data` of a presence answer. */
  | { readonly op: 'pread'; readonly rid: number; readonly topic: string };

export type FromOwner =
  | { readonly op: 'ev'; readonly ev: Delivery }
  /** `position`: see Broker.subscribe. */
  | { readonly op: 'subok'; readonly rid: number; readonly position: string }
  | { readonly op: 'pubok'; readonly rid: number; readonly res: PublishResult }
  | { readonly op: 'histok'; readonly rid: number; readonly read: HistoryRead }
  /** Presence: a subscriber's starting replica (sent before `subok`), or a flush of the topic's table. */
  | { readonly op: 'pflush'; readonly topic: string; readonly snapshot: boolean; readonly flush: PresenceFlush }
  | { readonly op: 'pdata'; readonly rid: number; readonly data: string };

export type PeerMessage = ToOwner | FromOwner;

const US = '\x1f';
const RS = '\x1e';
const opt = (v: string | undefined): string => v ?? '';
const und = (v: string | undefined): string | undefined => (v === '' || v === undefined ? undefined : v);

export function encodePeer(m: PeerMessage): string {
  switch (m.op) {
    case 'pub':
    case 'once': {
      const r = m.req;
      return `${m.op === 'pub' ? 'p' : 'o'}${US}${m.rid}${US}${m.tenant}${US}${r.topic}${US}${r.cls}${US}${opt(r.key)}${US}${opt(r.idempotencyKey)}${US}${opt(r.traceparent)}${US}${r.dataJson}`;
    }
    case 'sub':
      return `s${US}${m.rid}${US}${m.topic}`;
    case 'unsub':
      return `u${US}${m.topic}`;
    case 'hist':
      return `h${US}${m.rid}${US}${m.topic}${US}${opt(m.since)}${US}${m.limit ?? ''}`;
    case 'ev':
      return encodeDelivery(m.ev);
    case 'pset':
      return `c${US}${m.topic}${US}${m.user}${US}${m.n}`;
    case 'pread':
      return `q${US}${m.rid}${US}${m.topic}`;
    case 'pdata':
      return `Q${US}${m.rid}${US}${m.data}`;
    case 'pflush': {
      let s = `F${US}${m.topic}${US}${m.snapshot ? 1 : 0}${US}${m.flush.full ? 1 : 0}`;
      for (const [u, n] of m.flush.changes) s += `${US}${u}${US}${n}`;
      return s;
    }
    case 'pubok': {
      const r = m.res;
      return r.ok ? `a${US}${m.rid}${US}ok${US}${opt(r.id)}${US}${r.duplicate ? 1 : 0}` : `a${US}${m.rid}${US}${r.reason}`;
    }
    case 'subok':
      return `k${US}${m.rid}${US}${m.position}`;
    case 'histok': {
      let s = `H${US}${m.rid}${US}${m.read.recovered ? 1 : 0}`;
      for (const e of m.read.events) s += `${US}${e.id}${US}${e.frame}`;
      return s;
    }
  }
}

export function encodeDelivery(ev: Delivery): string {
  return `e${US}${ev.topic}${US}${ev.cls}${US}${opt(ev.id)}${US}${opt(ev.key)}${US}${ev.at}${US}${ev.frame}`;
}

export function decodePeer(s: string): PeerMessage {
  const f = s.split(US);
  switch (f[0]) {
    case 'p':
    case 'o':
      return {
        op: f[0] === 'p' ? 'pub' : 'once', rid: Number(f[1]), tenant: f[2]!,
        req: { topic: f[3]!, cls: Number(f[4]) as EventClass, key: und(f[5]), idempotencyKey: und(f[6]),
          traceparent: und(f[7]), dataJson: f[8]! },
      };
    case 's':
      return { op: 'sub', rid: Number(f[1]), topic: f[2]! };
    case 'u':
      return { op: 'unsub', topic: f[1]! };
    case 'h':
      return { op: 'hist', rid: Number(f[1]), topic: f[2]!, since: und(f[3]), limit: f[4] === undefined || f[4] === '' ? undefined : Number(f[4]) };
    case 'e':
      return { op: 'ev', ev: { topic: f[1]!, cls: Number(f[2]) as EventClass, id: und(f[3]), key: und(f[4]), at: Number(f[5]), frame: f[6]! } };
    case 'c':
      return { op: 'pset', topic: f[1]!, user: f[2]!, n: Number(f[3]) };
    case 'q':
      return { op: 'pread', rid: Number(f[1]), topic: f[2]! };
    case 'Q':
      return { op: 'pdata', rid: Number(f[1]), data: f[2]! };
    case 'F': {
      const changes: PresenceChange[] = [];
      for (let i = 4; i + 1 < f.length; i += 2) changes.push([f[i]!, Number(f[i + 1])]);
      return { op: 'pflush', topic: f[1]!, snapshot: f[2] === '1', flush: { full: f[3] === '1', changes } };
    }
    case 'a':
      return {
        op: 'pubok', rid: Number(f[1]),
        res: f[2] === 'ok' ? { ok: true, id: und(f[3]), duplicate: f[4] === '1' } : { ok: false, reason: f[2] as 'unavailable' | 'internal' },
      };
    case 'k':
      return { op: 'subok', rid: Number(f[1]), position: f[2]! };
    case 'H': {
      const events = [];
      for (let i = 3; i + 1 < f.length; i += 2) events.push({ id: f[i]!, frame: f[i + 1]! });
      return { op: 'histok', rid: Number(f[1]), read: { recovered: f[2] === '1', events } };
    }
    default:
      throw new Error(`unknown message from a peer shard: ${JSON.stringify(s.slice(0, 40))}`);
  }
}

/** Collects encoded messages and posts them as one string at the end of the current event-loop turn. */
export class Batcher<M> {
  private out: string[] = [];
  private scheduled = false;

  constructor(
    private readonly encode: (m: M) => string,
    private readonly post: (batch: string) => void,
  ) {}

  push(m: M): void {
    this.pushEncoded(this.encode(m));
  }

  pushEncoded(s: string): void {
    this.out.push(s);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  readonly flush = (): void => {
    this.scheduled = false;
    if (this.out.length === 0) return;
    const batch = this.out.join(RS);
    this.out = [];
    this.post(batch);
  };
}

/** Calls `each` with every message of a posted batch. */
export function forEachMessage<M>(batch: string, decode: (s: string) => M, each: (m: M) => void): void {
  for (const s of batch.split(RS)) each(decode(s));
}
