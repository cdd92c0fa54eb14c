// Messages between the orchestrator and its load-generator processes.

import type { Target } from '../lib/conn.ts';
import type { AuthSpec } from '../lib/jwt.ts';

export type Request =
  /** Open `count` sockets, `concurrency` handshakes at a time, socket i from sources[i % sources.length]. */
  | { op: 'connect'; target: Target; count: number; idBase: number; sources: string[]; concurrency: number; timeoutMs: number; withTokens?: boolean }
  /**
   * Signs tokens ahead of the timed part: `upgrade`, one for each socket id of
   * [idBase, idBase + count), taken by the next connect with `withTokens`
   * (sent as `?token=`); `refresh`, one of round `round` for every ready socket.
   */
  | { op: 'sign'; purpose: 'upgrade'; auth: AuthSpec; idBase: number; count: number }
  | { op: 'sign'; purpose: 'refresh'; auth: AuthSpec; round: number }
  /** Every ready socket sends one `refresh` with its signed token, `concurrency` awaiting their reply at most; resolves when all answered. */
  | { op: 'refresh'; concurrency: number; timeoutMs: number }
  /** Every ready socket joins `topic`, or its own topic `bench.<id>` when topic is null. */
  | { op: 'join'; topic: string | null; timeoutMs: number }
  /** Closed loop on every socket: `depth` publishes in flight to the socket's own topic, counted at the reply. */
  | { op: 'pump'; depth: number; size: number; ephemeral: boolean }
  /** Count and check events of the fan-out sequence on every socket; report progress. */
  | { op: 'track' }
  /** The first socket publishes the fan-out sequence: `depth` acks in flight, never past the credit. */
  | { op: 'publish'; topic: string; depth: number; size: number; ephemeral: boolean; credit: number }
  | { op: 'credit'; upTo: number }
  /** S6: every ready socket stops reading its TCP socket (handshake and join done); closes are still counted. */
  | { op: 'stall' }
  /** S6: read again, so that close frames queued behind the backlog are seen; wait up to timeoutMs for the sockets to close. */
  | { op: 'unstall'; timeoutMs: number }
  /**
   * S7, S12: from now on record every close of a ready socket (time, close code, reason); sockets keep reading and are never reopened.
   * `deferTeardown` (S12): a socket closed by a close frame sends its RST only at `closes`, after the wait.
   */
  | { op: 'watchCloses'; deferTeardown?: boolean }
  /** S7: wait up to timeoutMs for every ready socket to close, then hand over what watchCloses recorded. */
  | { op: 'closes'; timeoutMs: number }
  | { op: 'mark' }
  /** Stop sending; wait up to timeoutMs for outstanding replies. */
  | { op: 'stop'; timeoutMs: number }
  /** Close every socket and forget the scenario state. */
  | { op: 'reset' }
  | { op: 'exit' };

export interface ConnectResult {
  ready: number;
  failed: number;
  reasons: Record<string, number>;
  /** Connect-to-ready time (TCP connect, upgrade, first frame), us, HDR base64. */
  hist: string;
  elapsedMs: number;
}

export interface RefreshResult {
  ok: number;
  errors: number;
  /** Refreshes that got no reply in time, and sockets that closed meanwhile. */
  unanswered: number;
  /** The first error replies, as received (at most 5). */
  errorSamples: string[];
  /** Send-to-reply time, us, HDR base64. */
  hist: string;
  elapsedMs: number;
}

export interface JoinResult {
  joined: number;
  errors: number;
  elapsedMs: number;
}

/** Counters are cumulative since the scenario started; `hist` covers the time since the previous mark. */
export interface MarkResult {
  replies: number;
  replyErrors: number;
  events: number;
  publishes: number;
  gaps: number;
  duplicates: number;
  closed: number;
  closeReasons: Record<string, number>;
  hist: string;
  /** Fan-out tracking: lowest and highest last sequence over ready sockets, sockets that saw none. */
  seqMin: number;
  seqMax: number;
  seqNone: number;
}

export interface UnstallResult {
  /** Why each socket closed (`ws close <code> <reason>`, `closed by peer`, an errno), counted since `stall`. */
  closeReasons: Record<string, number>;
  /** Sockets still open when the wait ended. */
  open: number;
}

/** S7: one entry per socket closed since watchCloses, in the order seen. */
export interface ClosesResult {
  /** CLOCK_MONOTONIC us (shared by every process) when the close was seen. */
  atUs: number[];
  /** WebSocket close code, or 0 when the socket ended without a close frame. */
  codes: number[];
  /** retryAfterMs of the close reason JSON, or -1 when absent or unparsable. */
  retryAfterMs: number[];
  /** Causes other than a close frame with a parsable reason (`closed by peer`, errnos, other reasons), counted. */
  other: Record<string, number>;
  /** Sockets still open when the wait ended. */
  open: number;
}

export interface StopResult {
  outstanding: number;
}

export type Envelope = { id: number; req: Request };
export type Response = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: string };
export type ChildEvent = { event: 'hello'; pid: number } | { event: 'progress'; full: number };
