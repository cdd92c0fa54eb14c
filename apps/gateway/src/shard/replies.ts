/**
 * Acks answered outside the socket's own message handler (the broker
 * answered later, from another shard or from Redis): those of one broker
 * batch go out together, one corked write per socket instead of one per
 * ack. A corked send also drains what app.publish queued for that socket,
 * so an event and its ack share the write. The flush runs as a microtask
 * queued after the acks' own continuations.
 */
import type { Socket } from './socket-data.ts';

export class Replies {
  private readonly queued = new Map<Socket, string[]>();
  private flushQueued = false;

  queue(ws: Socket, frame: string): void {
    const list = this.queued.get(ws);
    if (list === undefined) this.queued.set(ws, [frame]);
    else list.push(frame);
    if (!this.flushQueued) {
      this.flushQueued = true;
      queueMicrotask(this.flush);
    }
  }

  private readonly flush = (): void => {
    this.flushQueued = false;
    for (const [ws, frames] of this.queued) {
      if (!ws.getUserData().d.open) continue;
      ws.cork(() => {
        for (const f of frames) ws.send(f, false);
      });
    }
    this.queued.clear();
  };
}
