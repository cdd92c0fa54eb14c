/**
 * One socket's join with `since`: history replayed, then live delivery,
 * with no gap and no duplicate. Touches of the socket data: `open` and
 * `topics` (is it still joined), and the lane's slice when it goes native.
 */
import type { Broker, Delivery, HistoryRead } from '@sluice/core';
import { compareEventIds, type EventId, encodeRejection, encodeReplyOk, type JoinFrame,
  parseEventId } from '@sluice/protocol';
import { endSpan, type Span } from '@sluice/telemetry';
import type { SlowLane } from '../slow-lane.ts';
import type { ShardContext } from './context.ts';
import type { Socket, SocketData } from './socket-data.ts';
import type { Topics } from './topics.ts';

/**
 * A join with `since` whose replay is on its way: live events meanwhile wait
 * in `buffered`. After the replay, until this shard's live delivery of the
 * topic reaches the last replayed id (`after`), live events go to the socket
 * one by one, those not after `after` left out (see `live`).
 */
export interface Recovery {
  readonly ws: Socket;
  readonly d: SocketData;
  readonly topic: string;
  readonly key: string;
  readonly buffered: Delivery[];
  after: EventId | undefined;
}

export class Recoveries {
  constructor(
    private readonly ctx: ShardContext,
    private readonly broker: Pick<Broker, 'history'>,
    private readonly topics: Topics<Recovery>,
    private readonly lane: SlowLane<SocketData>,
  ) {}

  /**
   * Replays history after `since`, then goes live with no gap and no
   * duplicate: the broker subscription is already up, so live events that
   * arrive while the history is fetched are buffered, and those the replay
   * already covered (id not above the last replayed id) are dropped.
   * Everything before the join's reply is replay; everything after is live.
   */
  start(ws: Socket, d: SocketData, f: JoinFrame, key: string, since: string, span: Span | undefined): void {
    const rec: Recovery = { ws, d, topic: f.topic, key, buffered: [], after: undefined };
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
      this.replay(rec, f, since, read);
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

  private replay(rec: Recovery, f: JoinFrame, since: string, read: HistoryRead): void {
    const { ws, d, key } = rec;
    let last: EventId = parseEventId(since)!;
    const lastReplayed = read.events.at(-1)?.id;
    if (lastReplayed !== undefined) last = parseEventId(lastReplayed)!;
    ws.cork(() => {
      for (const e of read.events) ws.send(e.frame, false);
      ws.send(encodeReplyOk(f.ref, `{"recovered":${read.recovered}}`), false);
      for (const ev of rec.buffered) {
        if (ev.id === undefined || compareEventIds(parseEventId(ev.id)!, last) > 0) ws.send(ev.frame, false);
      }
      // In cluster mode the read and the live events come over two Redis
      // connections: the pub/sub message of an event the read returned may
      // still be on its way. Until live delivery has reached the last
      // replayed id, the socket gets live events one by one, without those
      // the replay covered; then it goes native (`live`).
      const live = this.topics.get(key)?.lastLive;
      if (live !== undefined && compareEventIds(parseEventId(live)!, last) >= 0) this.lane.subscribe(ws, d, key);
      else {
        rec.after = last;
        rec.buffered.length = 0;
        this.topics.addRecovery(key, rec);
      }
    });
  }

  /** A live event of a topic with recoveries: buffered while the read is out, else forwarded (`forward`). */
  live(recs: ReadonlySet<Recovery>, ev: Delivery): void {
    const id = ev.id === undefined ? undefined : parseEventId(ev.id);
    for (const rec of recs) {
      if (rec.after === undefined) rec.buffered.push(ev);
      else this.forward(rec, ev, id);
    }
  }

  /** A live event for a socket whose replay is done but whose topic's live delivery had not reached the replay's end. */
  private forward(rec: Recovery, ev: Delivery, id: EventId | undefined): void {
    const after = rec.after!;
    const caughtUp = id !== undefined && compareEventIds(id, after) >= 0;
    if (rec.d.open) {
      rec.ws.cork(() => {
        if (id === undefined || compareEventIds(id, after) > 0) rec.ws.send(ev.frame, false);
        if (caughtUp) this.lane.subscribe(rec.ws, rec.d, rec.key);
      });
    }
    if (caughtUp) this.topics.removeRecovery(rec.key, rec);
  }

  /** The socket left the topic or closed: its replay, if any, is dropped. */
  cancel(d: SocketData, key: string): void {
    this.topics.cancelRecoveries(key, (rec) => rec.d === d);
  }
}
