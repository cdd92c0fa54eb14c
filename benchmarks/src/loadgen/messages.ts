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
  /** S15 (WS_AUTH=hook): the "token" of socket id is the plain string `<prefix><id>`, which the bench backend answers as the user. */
  | { op: 'sign'; purpose: 'ids'; prefix: string; idBase: number; count: number }
  /**
   * S15: every ready socket sends `action` (join or leave) for each of `topics`, `concurrency` awaiting their reply at most
   * (each frame's ref its send time); resolves when all answered. Result: a RefreshResult.
   */
  | { op: 'topics'; action: 'join' | 'leave'; topics: string[]; concurrency: number; timeoutMs: number }
  /** Every ready socket sends one `refresh` with its signed token, `concurrency` awaiting their reply at most; resolves when all answered. */
  | { op: 'refresh'; concurrency: number; timeoutMs: number }
  /** Every ready socket joins `topic`, or its own topic `bench.<id>` when topic is null. */
  | { op: 'join'; /** null: each socket its own topic, `<prefix>.<socket id>` (prefix default `bench`). */ topic: string | null; timeoutMs: number; prefix?: string }
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
  /**
   * S14: from now on read every presence frame (counts, bytes, each socket's
   * member count, gaps between diffs); the first socket to join keeps the full
   * set of users. `userPrefix`: a socket's user is `<userPrefix><id>`.
   */
  | { op: 'presenceWatch'; userPrefix: string }
  /**
   * S14: every ready socket not joined yet joins `topic`, `perSecond` joins a
   * second at most; resolves when all answered. `presence` false: a topic
   * without presence (the sockets count as not joined to the presence topic
   * afterwards, and no observer is picked).
   */
  | { op: 'paceJoin'; topic: string; perSecond: number; timeoutMs: number; presence: boolean }
  /**
   * S14: the last `count` joined sockets (never the first) churn: `perSecond`
   * leaves a second, round-robin, each socket rejoining `holdMs` after its
   * leave's reply, for `durationMs`; then every one out rejoins; resolves
   * when all are back.
   */
  | { op: 'churn'; topic: string; count: number; perSecond: number; holdMs: number; durationMs: number; timeoutMs: number }
  /** S14: the presence counters so far (cumulative). */
  | { op: 'presenceStats' }
  /**
   * S14: checks every joined socket's member count against `expected`; with
   * `take`, hands over (then clears) the latency and diff-gap histograms and
   * the observer's changes since the last take.
   */
  | { op: 'presenceCheck'; expected: number; take: boolean }
  /** S14: one new socket of user `<userPrefix><id>` connects to `target`, joins `topic`, times its presence_state, asks `presence` once, and closes. */
  | { op: 'probe'; target: Target; auth: AuthSpec; id: number; topic: string; timeoutMs: number }
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
  /** Reads (socket 'data' events) of this process's connections. */
  reads: number;
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

/** S14: paceJoin and churn. */
export interface PacedResult {
  joinsSent: number;
  joinsOk: number;
  joinErrors: number;
  leavesSent: number;
  leavesOk: number;
  leaveErrors: number;
  /** Leaves due that found no joined socket to take (every churner out or on its way). */
  leavesSkipped: number;
  /** Sockets that never answered in time. */
  unanswered: number;
  /** The first error replies, as received (at most 5). */
  errorSamples: string[];
  elapsedMs: number;
}

/** S14: cumulative presence counters of one generator process. */
export interface PresenceStats {
  stateFrames: number;
  stateBytes: number;
  diffFrames: number;
  diffBytes: number;
  /** Joins and leaves the diffs received carried, summed over the sockets that received them. */
  diffJoins: number;
  diffLeaves: number;
  /** Distinct diffs (counted; the rest were byte-equal to one of the last few). */
  distinctDiffs: number;
  joinsSent: number;
  leavesSent: number;
  /** Sockets joined now. */
  joined: number;
  /** Ready sockets that closed. */
  closed: number;
  closeReasons: Record<string, number>;
  /** The observer's set of users now, and whether it started from a full list; -1 without an observer. */
  observerSize: number;
  observerExact: boolean;
}

export interface PresenceCheck {
  /** Joined sockets whose count was checked, and those that showed another than `expected`. */
  checked: number;
  wrong: number;
  /** Some of the wrong counts (at most 5), and how far every wrong one was off (count - expected: sockets). */
  wrongSamples: number[];
  offBy: Record<string, number>;
  /** Sockets joined but without a presence_state yet. */
  noState: number;
  /** The latest time (monotonic us) a joined socket's count moved, and the median over sockets. */
  lastChangeMaxUs: number;
  lastChangeP50Us: number;
  /** Join sent to its reply, join sent to its presence_state, and the gap between two diffs on one socket, us, HDR base64, since the last check. */
  joinHist: string;
  stateHist: string;
  gapHist: string;
  /** Each diff that changed the observer's set since the last check: when (monotonic us) and the size after it. */
  observer: Array<{ atUs: number; size: number }>;
  observerSize: number;
  observerExact: boolean;
}

export interface ProbeResult {
  connectMs: number;
  /** Join sent to its reply, and to its presence_state. */
  replyMs: number;
  stateMs: number;
  stateBytes: number;
  count: number;
  listed: number;
  truncated: boolean;
  /** The `presence` frame sent once the state came: to its reply. */
  queryMs: number;
  queryBytes: number;
  queryCount: number;
  error?: string;
}

export interface StopResult {
  outstanding: number;
}

export type Envelope = { id: number; req: Request };
export type Response = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: string };
export type ChildEvent = { event: 'hello'; pid: number } | { event: 'progress'; full: number };
