import type { MessagePort } from 'node:worker_threads';
import type { ControlCommand, HistoryRequest, HistoryResult, PublishRequest, PublishResult, WindowHit, WindowState } from '@sluice/core';
import type { MetricsJson } from '@sluice/telemetry';

/**
 * Messages between the coordinator and one shard, on the shard's control
 * port. Rare (start, stop, scrapes, admin publishes, restarts), so they are
 * plain objects; the per-event traffic goes between shards (messages.ts).
 */
/** One open socket of a user, as GET /v1/connections answers it. */
export interface ConnectionView {
  readonly connectionId: string;
  readonly node: string;
  readonly shard: number;
  /** The client address (X-Forwarded-For behind WS_TRUST_PROXY). */
  readonly ip: string;
  /** Joined topics, by the names the client used. */
  readonly topics: readonly string[];
  /** Bytes written to the socket and not yet sent. */
  readonly bufferedBytes: number;
  /** In the slow lane (a mailbox instead of native topics). */
  readonly slow: boolean;
  /** When its token expires (ms); null without one. */
  readonly expiresAt: number | null;
}

export type ToShardControl =
  | { readonly op: 'stop' }
  /** The drain is closing sockets: stop listening, and close up to `close` sockets now. */
  | { readonly op: 'drain'; readonly close: number }
  | { readonly op: 'metrics'; readonly rid: number }
  | { readonly op: 'publish'; readonly rid: number; readonly req: PublishRequest }
  /** An admin history read (GET /v1/history). */
  | { readonly op: 'history'; readonly rid: number; readonly req: HistoryRequest }
  /** An admin action (revoke, disconnect, subscribe, unsubscribe) for this shard's sockets. */
  | { readonly op: 'control'; readonly rid: number; readonly cmd: ControlCommand }
  /** A publish to users: send `frame` to this shard's open sockets of `users` of `tenant`. */
  | { readonly op: 'users'; readonly rid: number; readonly tenant: string; readonly users: readonly string[]; readonly frame: string }
  /** GET /v1/presence: the topic's presence, from its owner (this shard, or through the mesh). */
  | { readonly op: 'presence'; readonly rid: number; readonly key: string }
  /** GET /v1/topics: this shard's `limit` largest topics (of `tenant` only, when given). */
  | { readonly op: 'topics'; readonly rid: number; readonly limit: number; readonly tenant: string | undefined }
  /** GET /v1/connections: this shard's open sockets of a user. */
  | { readonly op: 'connections'; readonly rid: number; readonly tenant: string; readonly user: string }
  /** Cluster mode: the nodes alive changed (their leases); `gone` ended theirs. */
  | { readonly op: 'nodes'; readonly live: readonly string[]; readonly gone: readonly string[]; readonly joined: readonly string[] }
  /** A (re)started peer shard: talk to it on this port from now on. */
  | { readonly op: 'peer'; readonly shard: number; readonly port: MessagePort }
  /** The node's memory window store answered a shard's settle. */
  | { readonly op: 'settled'; readonly rid: number; readonly states: readonly WindowState[] }
  /** The node's user-socket store answered a shard's claims (embedded mode). */
  | { readonly op: 'claimed'; readonly rid: number; readonly fits: readonly boolean[] };

export type FromShardControl =
  | { readonly op: 'listening'; readonly port: number }
  /** WS_WEBHOOK_URL: lifecycle events (JSON objects) for the node's webhook queue. */
  | { readonly op: 'webhook'; readonly events: readonly string[] }
  | { readonly op: 'metrics'; readonly rid: number; readonly json: MetricsJson }
  | { readonly op: 'published'; readonly rid: number; readonly res: PublishResult }
  | { readonly op: 'history'; readonly rid: number; readonly res: HistoryResult }
  /** How many sockets the control command reached here. */
  | { readonly op: 'controlled'; readonly rid: number; readonly sockets: number }
  /** A topic's presence `data` (JSON), or undefined when its owner is unavailable. */
  | { readonly op: 'presenceData'; readonly rid: number; readonly data: string | undefined }
  /** The users of a publish to users that have an open socket on this shard. */
  | { readonly op: 'usersSent'; readonly rid: number; readonly online: readonly string[] }
  /** This shard's largest topics, [tenant-scoped key, sockets], largest first. */
  | { readonly op: 'topicsTop'; readonly rid: number; readonly top: readonly (readonly [string, number])[] }
  | { readonly op: 'connectionsOf'; readonly rid: number; readonly connections: readonly ConnectionView[] }
  /** Limits: a batch of hits for the node's memory window store (embedded mode, or Redis unavailable). */
  /** WS_MAX_USER_SOCKETS in embedded mode: the node's user-socket store (MemoryUserSockets) in the coordinator. */
  | { readonly op: 'claim'; readonly rid: number; readonly holder: string; readonly keys: readonly string[]; readonly max: number;
    readonly now: number }
  | { readonly op: 'release'; readonly holder: string; readonly counts: readonly (readonly [string, number])[]; readonly now: number }
  | { readonly op: 'beat'; readonly holder: string; readonly now: number }
  | {
    readonly op: 'settle'; readonly rid: number; readonly hits: readonly WindowHit[]; readonly limit: number; readonly windowMs: number;
    readonly now: number;
  };
