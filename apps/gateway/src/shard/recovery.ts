/**
 * One socket's join with `since`: history replayed, then live delivery,
 * with no gap and no duplicate. Touches of the socket data: `open` and
 * `topics` (is it still joined), and the lane's slice when it goes native.
 */
import { type Broker, type Delivery, type HistoryRead, ReplaySplice, SpliceEmit, SpliceHeld, SplicePast, type StoredEvent } from '@sluice/core';
import { encodeRejection, encodeReplyOk, type JoinFrame, parseEventId } from '@sluice/protocol';
import { endSpan, type Span } from '@sluice/telemetry';
import type { SlowLane } from '../slow-lane.ts';
import type { ShardContext } from './context.ts';
import type { Socket, SocketData } from './socket-data.ts';
import type { Topics } from './topics.ts';

/** A join with `since` whose replay is not yet spliced onto the topic's live delivery (see `ReplaySplice`). */
export interface Recovery {
  readonly ws: Socket;
  readonly d: SocketData;
  readonly topic: string;
  readonly key: string;
  readonly splice: ReplaySplice<Delivery | StoredEvent>;
}

export class Recoveries {
  /** Sent after a join's reply, in the same cork (presence_state). */
  afterReply: (ws: Socket, d: SocketData, key: string) => void = () => {};

  constructor(
    private readonly ctx: ShardContext,
    private readonly broker: Pick<Broker, 'history'>,
    private readonly topics: Topics<Recovery>,
    private readonly lane: SlowLane<SocketData>,
  ) {}

  /**
   * Replays history after `since`, then goes live with no gap and no
   * duplicate: the broker subscription is already up, so live events that
   * arrive while the history is fetched are held, and those the replay
   * already covered are dropped. Everything before the join's reply is
   * replay; everything after is live.
   */
  start(ws: Socket, d: SocketData, f: JoinFrame, key: string, since: string, span: Span | undefined): void {
    const rec: Recovery = { ws, d, topic: f.topic, key, splice: new ReplaySplice(since) };
    rec.splice.hold();
    this.topics.addRecovery(key, rec);
    const done = (): boolean => {
      if (this.topics.removeRecovery(key, rec)) return d.open && d.topics?.get(f.topic) === key;
      // Left meanwhile: as for a plain join, the join happened and the leave
      // undid it, and the join still gets its reply. (Closed: nobody to tell.)
      if (d.open) ws.cork(() => ws.send(encodeReplyOk(f.ref), false));
      return false;
    };
    const tracing = this.ctx.tracing;
    const readSpan = span === undefined ? undefined : tracing!.child(span, 'sluice.history');
    this.broker.history(key, since).then((read: HistoryRead) => {
      readSpan?.setAttributes({ 'sluice.replayed': read.events.length, 'sluice.recovered': read.recovered });
      readSpan?.end();
      if (!done()) {
        endSpan(span);
        return;
      }
      this.replay(rec, f, read);
      span?.setAttributes({ 'sluice.replayed': read.events.length, 'sluice.recovered': read.recovered });
      span?.end();
    }, (err: unknown) => {
      // The topic's owner is unavailable: the join fails, the socket goes on.
      endSpan(readSpan, 'unavailable');
      if (!done()) {
        endSpan(span);
        return;
      }
      endSpan(span, 'unavailable');
      this.ctx.lines.degraded.write({ topic: key, err }, 'history unavailable for a join');
      d.topics!.delete(f.topic);
      this.topics.release(key);
      ws.cork(() => ws.send(encodeRejection(f.ref, 'unavailable'), false));
    });
  }

  private replay(rec: Recovery, f: JoinFrame, read: HistoryRead): void {
    const { ws, d, key, splice } = rec;
    const compress = this.ctx.compressEvents;
    const send = (e: { readonly frame: string }): void => {
      ws.send(e.frame, false, compress);
    };
    ws.cork(() => {
      splice.replay(read.events, send);
      ws.send(encodeReplyOk(f.ref, `{"recovered":${read.recovered}}`), false);
      this.afterReply(ws, d, key);
      // In cluster mode the read and the live events come over two Redis
      // connections: the pub/sub message of an event the read returned may
      // still be on its way. Until live delivery has passed the replay's
      // end, the socket gets live events one by one through the splice,
      // without those the replay covered; then it goes native (`live`).
      if (splice.release(send, this.topics.get(key)?.lastLive)) this.lane.subscribe(ws, d, key);
      else this.topics.addRecovery(key, rec);
    });
  }

  /** A live event of a topic with recoveries, parsed once for all of them. */
  live(recs: ReadonlySet<Recovery>, ev: Delivery): void {
    const id = ev.id === undefined ? undefined : parseEventId(ev.id);
    for (const rec of recs) {
      const r = rec.splice.live(ev, id);
      if (r === SpliceHeld) continue;
      const past = (r & SplicePast) !== 0;
      if (rec.d.open) {
        rec.ws.cork(() => {
          if ((r & SpliceEmit) !== 0) rec.ws.send(ev.frame, false, this.ctx.compressEvents);
          if (past) this.lane.subscribe(rec.ws, rec.d, rec.key);
        });
      }
      if (past) this.topics.removeRecovery(rec.key, rec);
    }
  }

  /** The socket left the topic or closed: its replay, if any, is dropped. */
  cancel(d: SocketData, key: string): void {
    this.topics.cancelRecoveries(key, (rec) => rec.d === d);
  }
}
