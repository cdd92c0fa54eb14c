// What every peer shares: event ids, the welcome frame, reply frames, and the
// event-loop stall gauge (the same measure the gateway exports as
// sluice_eventloop_stall_max_seconds).

import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';

export interface PeerHandle {
  readonly port: number;
  close(): Promise<void>;
}

export interface PublishFrame {
  type: 'publish';
  ref?: string;
  topic: string;
  data: unknown;
  ephemeral?: boolean;
}

export interface JoinFrame {
  type: 'join';
  ref?: string;
  topic: string;
}

/** Ids shaped like the gateway's (`<ms>-<seq>`), so frames have the same length. */
export function idGenerator(): () => string {
  let lastMs = 0;
  let seq = 0;
  return () => {
    const ms = Date.now();
    if (ms === lastMs) seq++; else { lastMs = ms; seq = 0; }
    return `${ms}-${seq}`;
  };
}

export const WELCOME = JSON.stringify({
  type: 'welcome',
  connectionId: 'peer',
  heartbeatMs: 25000,
  limits: { maxFrameBytes: 131072, hardMaxFrameBytes: 1048576, maxMessages: 1000000, rateWindowMs: 1000, maxJoins: 50 },
});

export function replyOk(ref: string | undefined, data: unknown): string {
  return JSON.stringify({ type: 'reply', ref, status: 'ok', data });
}

export function replyError(ref: string | undefined, reason: string): string {
  return JSON.stringify({ type: 'reply', ref, status: 'error', reason });
}

export const BAD_REQUEST = JSON.stringify({ type: 'error', reason: 'bad_request' });

/** Parses a client frame; undefined for anything that is not a join or publish with a topic. */
export function parseClientFrame(text: string): PublishFrame | JoinFrame | undefined {
  let v: unknown;
  try { v = JSON.parse(text); } catch { return undefined; }
  if (typeof v !== 'object' || v === null) return undefined;
  const f = v as { type?: unknown; topic?: unknown };
  if (typeof f.topic !== 'string') return undefined;
  if (f.type === 'publish' || f.type === 'join') return v as PublishFrame | JoinFrame;
  return undefined;
}

export class StallGauge {
  private readonly h: IntervalHistogram = monitorEventLoopDelay({ resolution: 10 });
  constructor() { this.h.enable(); }
  /** Longest event-loop delay since start, in ms. */
  maxMs(): number { return this.h.max / 1e6; }
  stop(): void { this.h.disable(); }
}

export function statsJson(gauge: StallGauge): string {
  return JSON.stringify({ stallMaxMs: gauge.maxMs(), rss: process.memoryUsage.rss() });
}
