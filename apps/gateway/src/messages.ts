import type { Delivery, HistoryRead, PublishRequest, PublishResult } from '@sluice/core';
import type { MetricsJson } from '@sluice/telemetry';

/**
 * Messages between a shard and the coordinator, over one MessagePort per
 * shard. Each postMessage carries a batch (an array): both sides collect
 * what one turn of their event loop produced and send it at once.
 */
export type ToCoordinator =
  | { readonly op: 'sub'; readonly rid: number; readonly topic: string }
  | { readonly op: 'unsub'; readonly topic: string }
  | { readonly op: 'pub'; readonly rid: number; readonly req: PublishRequest }
  | { readonly op: 'hist'; readonly rid: number; readonly topic: string; readonly since: string }
  | { readonly op: 'listening'; readonly port: number }
  | { readonly op: 'metrics'; readonly rid: number; readonly json: MetricsJson };

export type ToShard =
  | { readonly op: 'ev'; readonly d: Delivery }
  | { readonly op: 'subok'; readonly rid: number }
  | { readonly op: 'pubok'; readonly rid: number; readonly res: PublishResult }
  | { readonly op: 'hist'; readonly rid: number; readonly read: HistoryRead }
  | { readonly op: 'metrics'; readonly rid: number }
  | { readonly op: 'stop' };

/** Collects messages and posts them as one batch at the end of the current event-loop turn. */
export class Batcher<M> {
  private out: M[] = [];
  private scheduled = false;

  constructor(private readonly post: (batch: M[]) => void) {}

  push(m: M): void {
    this.out.push(m);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  readonly flush = (): void => {
    this.scheduled = false;
    if (this.out.length === 0) return;
    const batch = this.out;
    this.out = [];
    this.post(batch);
  };
}
