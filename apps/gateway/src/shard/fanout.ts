/**
 * Fan-out: every event the broker delivers to this shard goes to its
 * subscribed sockets. Healthy sockets get it through the uWS topic (one
 * serialization, corked native writes); congested ones through their
 * mailbox in the slow lane; sockets replaying history through their
 * recovery. WS_COALESCE_INTERVAL_MS holds keyed events first.
 */
import { Coalescer, type Delivery } from '@sluice/core';
import { EventClass } from '@sluice/protocol';
import type { TemplatedApp } from '@sluice/uws';
import type { SlowLane } from '../slow-lane.ts';
import type { ShardContext } from './context.ts';
import type { ShardMetrics } from './metrics.ts';
import type { Recoveries, Recovery } from './recovery.ts';
import type { Socket, SocketData } from './socket-data.ts';
import type { Topics } from './topics.ts';

/**
 * How often congested sockets are looked for while events flow: a socket on
 * the native lane can pass the soft limit by at most what its topics deliver
 * in this time before it moves to its mailbox.
 */
const LANE_SWEEP_MS = 10;
/**
 * The sweep's period while nothing is delivered: slow-lane sockets still
 * need their congestion timers checked, but a shard at rest wakes 10 times a
 * second, not 100 (each wake-up of a uWS thread costs about 30 us of CPU
 * whatever it does: idle nodes were 4% of a core, issue 20's S8 and S16).
 */
const LANE_IDLE_SWEEP_MS = 100;
/**
 * A sweep looks at a slice of the shard's sockets, not all of them: at most
 * SWEEP_SLICE_MIN sockets, or a SWEEP_PASS_TICKS-th of them if that is more,
 * so that a shard of 50,000 sockets is not walked (one native call each) a
 * hundred times a second (S16: that walk was most of an idle node's CPU). A
 * shard of up to SWEEP_SLICE_MIN sockets is walked whole every tick, as
 * before; a larger one in passes of at most SWEEP_PASS_TICKS ticks (250 ms
 * while events flow). Sockets that had unsent bytes at their last look are
 * checked on every event anyway (SlowLane.beforeNative), and uWS's own
 * maxBackpressure (twice WS_MAX_BUFFERED_BYTES) stays the last guard.
 */
const SWEEP_SLICE_MIN = 512;
const SWEEP_PASS_TICKS = 25;

export class FanOut {
  /** WS_COALESCE_INTERVAL_MS: keyed events held per (topic, key), newest wins. */
  private readonly coalescer: Coalescer<Delivery> | null;
  private coalesceTimer: NodeJS.Timeout | undefined;
  private readonly released: Delivery[] = [];
  private laneTimer: NodeJS.Timeout | undefined;
  private deliveredSinceSweep = false;
  /** The sweep runs every LANE_IDLE_SWEEP_MS (nothing was delivered in its last tick), not every LANE_SWEEP_MS. */
  private sweepIdle = false;
  /** Unsent bytes of every socket of this shard, summed by the last whole pass. */
  bufferedBytes = 0;
  /** The pass under way: where it is in `sockets` (a Set's iterator sees deletions and additions), what it summed. */
  private pass: Iterator<Socket> | null = null;
  private passBuffered = 0;

  constructor(
    private readonly ctx: ShardContext,
    private readonly app: TemplatedApp,
    private readonly lane: SlowLane<SocketData>,
    private readonly topics: Topics<Recovery>,
    private readonly recoveries: Recoveries,
    private readonly metrics: ShardMetrics,
    private readonly sockets: ReadonlySet<Socket>,
  ) {
    const interval = ctx.cfg.coalesceIntervalMs;
    this.coalescer = interval > 0 ? new Coalescer<Delivery>(interval) : null;
  }

  start(): void {
    this.sweepEvery(LANE_SWEEP_MS);
  }

  private sweepEvery(ms: number): void {
    if (this.laneTimer !== undefined) clearInterval(this.laneTimer);
    this.sweepIdle = ms !== LANE_SWEEP_MS;
    this.laneTimer = setInterval(() => this.sweepLanes(), ms);
    this.laneTimer.unref();
  }

  stop(): void {
    // A delivery after the stop must not start the sweep again (fanOut does so when it finds the sweep idle).
    this.sweepIdle = false;
    if (this.laneTimer !== undefined) clearInterval(this.laneTimer);
    if (this.coalesceTimer !== undefined) clearTimeout(this.coalesceTimer);
  }

  /** The broker's delivery callback. */
  readonly deliver = (ev: Delivery): void => {
    const c = this.coalescer;
    if (c !== null && ev.key !== undefined && ev.cls === EventClass.Keyed) {
      const held = c.size;
      if (!c.offer(ev.topic, ev.key, ev, Date.now())) {
        // Held: at most one event per (topic, key) per interval leaves this
        // shard, so each socket gets at most one; the newest held one wins,
        // and one it replaced counts as superseded.
        if (c.size === held) this.lane.counters.dropped.superseded++;
        this.armCoalesceTimer();
        return;
      }
    }
    this.fanOut(ev);
  };

  private armCoalesceTimer(): void {
    if (this.coalesceTimer !== undefined || this.coalescer === null) return;
    const at = this.coalescer.nextDueAt();
    if (at === undefined) return;
    this.coalesceTimer = setTimeout(() => {
      this.coalesceTimer = undefined;
      const now = Date.now();
      this.coalescer!.due(now, this.released);
      for (const ev of this.released) this.fanOut(ev);
      this.released.length = 0;
      this.coalescer!.forget(now - this.ctx.cfg.coalesceIntervalMs);
      this.armCoalesceTimer();
    }, Math.max(0, at - Date.now()));
  }

  private fanOut(ev: Delivery): void {
    const now = Date.now();
    this.deliveredSinceSweep = true;
    if (this.sweepIdle) this.sweepEvery(LANE_SWEEP_MS);
    if (ev.at !== 0) this.metrics.deliveryLag.observe(ev.cls, now > ev.at ? (now - ev.at) / 1000 : 0);
    const tracing = this.ctx.tracing;
    const span = tracing === null ? undefined : tracing.fanOut(ev, this.app.numSubscribers(ev.topic));
    const buffering = this.lane.beforeNative(ev, now);
    // Native subscribers without a backlog get the event written out when uWS
    // drains its topic queue at the end of this turn; those with one (the
    // watched sockets) are counted when their buffer empties.
    this.lane.counters.sent += this.app.numSubscribers(ev.topic) - buffering;
    this.app.publish(ev.topic, ev.frame, false, this.ctx.compressEvents);
    this.lane.deliver(ev, now);
    const t = this.topics.get(ev.topic);
    if (t !== undefined) {
      if (ev.id !== undefined) t.lastLive = ev.id;
      if (t.recoveries !== null) this.recoveries.live(t.recoveries, ev);
    }
    span?.end();
  }

  /**
   * Every LANE_SWEEP_MS: moves sockets that passed the soft limit to the slow
   * lane, evicts what waited too long, and sums unsent bytes for the gauge.
   */
  private sweepLanes(): void {
    const now = Date.now();
    // While events flow, every LANE_SWEEP_MS; after a tick with nothing
    // delivered, every LANE_IDLE_SWEEP_MS until the next delivery. Each tick
    // takes the next slice of the pass (SWEEP_SLICE_MIN).
    if (!this.deliveredSinceSweep && !this.sweepIdle) this.sweepEvery(LANE_IDLE_SWEEP_MS);
    this.deliveredSinceSweep = false;
    const n = this.sockets.size;
    // One more than the slice: a shard of exactly the slice's size ends its pass in the same tick.
    let left = Math.max(SWEEP_SLICE_MIN, Math.ceil(n / SWEEP_PASS_TICKS)) + 1;
    const pass = this.pass ??= this.sockets.values();
    while (left-- > 0) {
      const next = pass.next();
      if (next.done === true) {
        this.bufferedBytes = this.passBuffered;
        this.passBuffered = 0;
        this.pass = null;
        return;
      }
      const ws = next.value;
      const d = ws.getUserData().d;
      if (!d.open) continue;
      const b = ws.getBufferedAmount();
      this.passBuffered += b;
      this.lane.countSent(ws, d, b);
      this.lane.check(ws, d, now, b);
      if (d.open) this.lane.watchIf(ws, b);
    }
  }
}
