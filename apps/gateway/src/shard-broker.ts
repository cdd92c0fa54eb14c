import type { MessagePort } from 'node:worker_threads';
import type { Broker, PublishFields, PublishResult } from '@sluice/core';

/** What a shard needs from its broker, embedded or Redis. */
export interface ShardBroker extends Broker {
  /**
   * `publish` with its answer to a callback (no promise on the hot path).
   * `key` is `topicKey(tenant, req.topic)` when the caller holds it (a
   * joined socket's: a string already hashed, used for every lookup of the
   * publish); made here when not given.
   */
  publishThen(tenant: string, req: PublishFields, done: (res: PublishResult) => void, key?: string): void;
  sweep(now: number): void;
  flush(): void;
  addPeer(shard: number, port: MessagePort): void;
  /** Lets go of every port and connection (the shard is stopping or crashed). */
  close(): void;
  readonly stats: BrokerStats;
}

export interface BrokerStats {
  readonly published: { readonly durable: number; readonly keyed: number; readonly ephemeral: number };
  readonly duplicates: number;
  /** Topics with history in this thread's memory (embedded mode). */
  readonly historyTopics: number;
  /** Redis commands sent by this thread. */
  readonly redisCommands: number;
  /** Redis commands that failed (unreachable, timed out, refused). */
  readonly redisErrors: number;
  /** Durable publishes stored but not confirmed by WS_REDIS_ACK_REPLICAS replicas in time (answered `unavailable`). */
  readonly replicaAckFailures: number;
  /** Position marks (WS_POSITION_REFRESH_MS): sent by the topics this thread owns (embedded), asked of Redis by this thread (cluster). */
  readonly positionMarks: number;
}
