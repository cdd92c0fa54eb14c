import type { CongestionState, Delivery, MailItem, OutboundLimits } from '@sluice/core';
import { decideOutbound, Mailbox, onDrained } from '@sluice/core';
import type { CloseReason } from '@sluice/protocol';
import type { WebSocket } from '@sluice/uws';
import type { UserSlot } from './user-slot.ts';

/** What the slow lane needs of a socket's user data. */
export interface LaneData extends CongestionState {
  open: boolean;
  /** Joined topics: client name to tenant-scoped key. */
  topics: Map<string, string> | null;
  /** Set while the socket is in the slow lane. */
  mailbox: Mailbox<MailItem> | null;
  /** Events handed to uWS for this socket that may still sit in its buffer: counted sent once it is empty. */
  unsent: number;
}

export interface LaneCounters {
  dropped: { ephemeral: number; superseded: number; evicted: number };
  /** Events written out to the kernel (not merely handed to a buffer). */
  sent: number;
}

/**
 * The JavaScript slow lane of one shard. A healthy socket receives through
 * uWS topics (one serialization, corked native writes). A socket whose
 * unsent bytes pass the soft limit leaves its native topics and gets a
 * mailbox, where the per-class rules of the protocol apply. When it has
 * drained, the mailbox is flushed in order and the socket rejoins its native
 * topics in the same synchronous block: nothing reordered, lost or doubled.
 */
export class SlowLane<D extends LaneData> {
  private readonly byTopic = new Map<string, Set<WebSocket<UserSlot<D>>>>();
  /** Native-lane sockets that had unsent bytes at the last sweep. */
  private readonly watch = new Set<WebSocket<UserSlot<D>>>();
  readonly counters: LaneCounters = { dropped: { ephemeral: 0, superseded: 0, evicted: 0 }, sent: 0 };

  constructor(
    private readonly limits: OutboundLimits,
    private readonly queue: { ephemeralDropLen: number; slowConsumerLen: number },
    private readonly close: (ws: WebSocket<UserSlot<D>>, d: D, reason: CloseReason) => void,
    /** WS_COMPRESSION is on: events go out with uWS's `compress` flag. */
    private readonly compress = false,
  ) {}

  /** Sockets in the slow lane now. */
  sockets = 0;

  /**
   * Checks a socket of the fast lane. Called by the shard's sweep and after
   * direct sends: a socket at the hard limit is closed, a congested one moves
   * to the slow lane.
   */
  check(ws: WebSocket<UserSlot<D>>, d: D, now: number, buffered: number = ws.getBufferedAmount()): void {
    if (d.mailbox !== null) {
      this.tick(ws, d, now);
      return;
    }
    if (buffered < this.limits.slowBufferBytes) return;
    const out = decideOutbound(d, buffered, now, this.limits);
    if (out === 'close_buffer_limit') {
      this.close(ws, d, 'buffer_limit');
      return;
    }
    this.enter(ws, d);
  }

  /**
   * Before an event goes out on the native lane: sockets that had unsent
   * bytes at the last look are checked again, so that a socket filling up
   * between two sweeps moves to the slow lane before the event is queued
   * natively for it. Sockets with nothing unsent are not looked at per event.
   */
  beforeNative(ev: Delivery, now: number): number {
    if (this.watch.size === 0) return 0;
    let buffering = 0;
    for (const ws of this.watch) {
      const d = ws.getUserData().d;
      if (!d.open || d.mailbox !== null) {
        this.watch.delete(ws);
        continue;
      }
      if (!ws.isSubscribed(ev.topic)) continue;
      this.check(ws, d, now);
      if (d.open && d.mailbox === null) {
        // Still native, with unsent bytes: this event waits in uWS's buffer.
        d.unsent++;
        buffering++;
      }
    }
    return buffering;
  }

  /**
   * Events that uWS had buffered for a socket count as sent once its buffer
   * is empty (when uWS says it is writable, or a sweep finds it so).
   */
  countSent(ws: WebSocket<UserSlot<D>>, d: D, buffered: number): void {
    if (d.unsent > 0 && buffered === 0) {
      this.counters.sent += d.unsent;
      d.unsent = 0;
    }
  }

  /**
   * The sweep saw this socket's unsent bytes: watch it per event once they
   * reach a quarter of the soft limit, or stop. A socket with a few unsent
   * bytes is merely busy; watching every such socket would put a loop over
   * them on every event of a broadcast.
   */
  watchIf(ws: WebSocket<UserSlot<D>>, buffered: number): void {
    if (buffered >= this.limits.slowBufferBytes / 4 && ws.getUserData().d.mailbox === null) this.watch.add(ws);
    else this.watch.delete(ws);
  }

  /** Events of a topic for its sockets in the slow lane. */
  deliver(ev: Delivery, now: number): void {
    if (this.byTopic.size === 0) return;
    const set = this.byTopic.get(ev.topic);
    if (set === undefined) return;
    for (const ws of set) {
      const d = ws.getUserData().d;
      if (d.open && d.mailbox !== null) this.offer(ws, d, ev, now);
    }
  }

  /**
   * An event for one socket outside its topics (a `$user` event): written
   * now, or offered to its mailbox while it is in the slow lane, so that it
   * keeps its place behind what waits there.
   */
  sendTo(ws: WebSocket<UserSlot<D>>, d: D, ev: MailItem, now: number): void {
    if (d.mailbox !== null) {
      this.offer(ws, d, ev, now);
      return;
    }
    if (ws.send(ev.frame, false, this.compress) === 0) this.counters.sent++;
    else d.unsent++;
  }

  /** uWS's `drain` event: some of the socket's buffer went out, it is writable again. */
  writable(ws: WebSocket<UserSlot<D>>, d: D, now: number): void {
    if (d.mailbox !== null) this.tick(ws, d, now);
    this.countSent(ws, d, ws.getBufferedAmount());
  }

  /** A joined topic of a socket: native when healthy, in the mailbox's care when slow. */
  subscribe(ws: WebSocket<UserSlot<D>>, d: D, key: string): void {
    if (d.mailbox === null) {
      ws.subscribe(key);
      return;
    }
    let set = this.byTopic.get(key);
    if (set === undefined) this.byTopic.set(key, (set = new Set()));
    set.add(ws);
  }

  unsubscribe(ws: WebSocket<UserSlot<D>>, key: string): void {
    const set = this.byTopic.get(key);
    if (set !== undefined && set.delete(ws) && set.size === 0) this.byTopic.delete(key);
    if (ws.getUserData().d.mailbox === null && ws.isSubscribed(key)) ws.unsubscribe(key);
  }

  /** The socket closed: forget it. Whatever its mailbox held counts as evicted. */
  forget(ws: WebSocket<UserSlot<D>>, d: D): void {
    this.watch.delete(ws);
    // What uWS still held for a socket that closed never reached it.
    this.counters.dropped.evicted += d.unsent;
    d.unsent = 0;
    if (d.mailbox === null) return;
    this.counters.dropped.evicted += d.mailbox.size;
    d.mailbox = null;
    this.sockets--;
    if (d.topics === null) return;
    for (const key of d.topics.values()) {
      const set = this.byTopic.get(key);
      if (set !== undefined && set.delete(ws) && set.size === 0) this.byTopic.delete(key);
    }
  }

  private enter(ws: WebSocket<UserSlot<D>>, d: D): void {
    // uWS hands topic messages to a socket lazily, on its next send: a ping
    // makes it take what was published to it so far before it unsubscribes,
    // so nothing published before this moment is lost or overtaken.
    ws.ping();
    this.watch.delete(ws);
    d.mailbox = new Mailbox(this.queue);
    this.sockets++;
    if (d.topics === null) return;
    for (const key of d.topics.values()) {
      if (!ws.isSubscribed(key)) continue;
      ws.unsubscribe(key);
      let set = this.byTopic.get(key);
      if (set === undefined) this.byTopic.set(key, (set = new Set()));
      set.add(ws);
    }
  }

  private offer(ws: WebSocket<UserSlot<D>>, d: D, ev: MailItem, now: number): void {
    const mailbox = d.mailbox!;
    switch (decideOutbound(d, ws.getBufferedAmount(), now, this.limits)) {
      case 'close_buffer_limit':
        this.close(ws, d, 'buffer_limit');
        return;
      case 'close_congested':
        this.close(ws, d, 'congested');
        return;
      case 'mailbox':
        switch (mailbox.offer(ev)) {
          case 'dropped':
            this.counters.dropped.ephemeral++;
            return;
          case 'superseded':
            this.counters.dropped.superseded++;
            return;
          case 'overflow':
            this.close(ws, d, 'slow_consumer');
            return;
          case 'queued':
            return;
        }
        return;
      case 'send':
        // Room again: what waited goes first, then this event.
        if (mailbox.offer(ev) === 'superseded') this.counters.dropped.superseded++;
        this.flush(ws, d);
        return;
    }
  }

  /** Time or a drain: evict what waited too long, flush what fits, leave the lane when empty. */
  private tick(ws: WebSocket<UserSlot<D>>, d: D, now: number): void {
    const buffered = ws.getBufferedAmount();
    const out = decideOutbound(d, buffered, now, this.limits);
    if (out === 'close_buffer_limit') this.close(ws, d, 'buffer_limit');
    else if (out === 'close_congested') this.close(ws, d, 'congested');
    else if (onDrained(d, buffered, now, this.limits)) this.flush(ws, d);
  }

  /** Sends from the mailbox while the socket has room; rejoins the fast lane once it is empty. */
  private flush(ws: WebSocket<UserSlot<D>>, d: D): void {
    const mailbox = d.mailbox!;
    const soft = this.limits.slowBufferBytes;
    let sent = 0;
    ws.cork(() => {
      while (mailbox.size > 0 && ws.getBufferedAmount() < soft) {
        // 0: written to the kernel; 1: buffered by uWS (sent when it drains).
        if (ws.send(mailbox.shift()!.frame, false, this.compress) === 0) sent++;
        else d.unsent++;
      }
      if (mailbox.size === 0) {
        d.mailbox = null;
        this.sockets--;
        d.congestedSince = -1;
        if (d.topics !== null) {
          // Only the topics the lane held: a topic still replaying history
          // is subscribed natively by its recovery when that ends.
          for (const key of d.topics.values()) {
            const set = this.byTopic.get(key);
            if (set === undefined || !set.delete(ws)) continue;
            if (set.size === 0) this.byTopic.delete(key);
            ws.subscribe(key);
          }
        }
      }
    });
    this.counters.sent += sent;
  }
}
