/**
 * A shard's counters and its Prometheus registry. The counters are plain
 * numbers bumped on the hot path; the registry reads them at scrape time
 * (counterFrom/gaugeFrom), so nothing is observed per frame but the two
 * latency histograms.
 */
import type { ControlAction } from '@sluice/core';
import { type ErrorReason, ErrorReasons, type UpgradeRefusal, UpgradeRefusals } from '@sluice/protocol';
import { counterFrom, gaugeFrom, IndexedHistogram, Registry, type SuppressedCounts } from '@sluice/telemetry';
import type { BrokerStats } from '../shard-broker.ts';
import type { LaneCounters } from '../slow-lane.ts';

/** The `class` label of the latency histograms, indexed by EventClass. */
export const CLASS_LABELS = ['durable', 'keyed', 'ephemeral'];

export interface ShardCounters {
  framesIn: number;
  /** Sockets closed by the node's drain (1012). */
  drained: number;
  readonly rejections: Record<ErrorReason, number>;
  /** By outcome: `over_budget` is a 503 `unavailable` for WS_UPGRADE_RATE, counted apart from the drain's and the cap's. */
  readonly upgrades: Record<UpgradeRefusal | 'accepted' | 'aborted' | 'over_budget', number>;
  readonly closes: Record<string, number>;
  /** `refresh` frames, by outcome: ok, or the reason of the refusal. */
  readonly refreshes: Record<'ok' | 'unauthorized' | 'forbidden' | 'bad_request' | 'unavailable', number>;
  /** Sockets each admin action closed (revoke, disconnect), joined (subscribe) or made leave (unsubscribe). */
  readonly adminSockets: Record<ControlAction, number>;
  /** `$user` events written (or queued) to sockets. */
  userDeliveries: number;
}

export function newCounters(): ShardCounters {
  return {
    framesIn: 0,
    drained: 0,
    rejections: zeros(ErrorReasons),
    upgrades: zeros(['accepted', ...UpgradeRefusals, 'aborted', 'over_budget']),
    closes: { abusive: 0, payload_too_large: 0, unavailable: 0, internal: 0, buffer_limit: 0, congested: 0, slow_consumer: 0,
      token_expired: 0, token_revoked: 0, disconnected: 0 },
    refreshes: { ok: 0, unauthorized: 0, forbidden: 0, bad_request: 0, unavailable: 0 },
    adminSockets: { revoke: 0, disconnect: 0, subscribe: 0, unsubscribe: 0 },
    userDeliveries: 0,
  };
}

function zeros<K extends string>(keys: readonly K[]): Record<K, number> {
  return Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;
}

/** What the registry reads from the other parts at scrape time. */
export interface MetricSources {
  readonly counters: ShardCounters;
  readonly sockets: () => number;
  readonly users: () => number;
  readonly lane: { readonly counters: LaneCounters; readonly sockets: number };
  readonly bufferedBytes: () => number;
  readonly broker: BrokerStats;
  readonly limits: {
    readonly redisCommands: number;
    readonly stats: { readonly settles: Record<string, number>; readonly settled: Record<string, number>; readonly fallbacks: number };
  };
  readonly suppressed: SuppressedCounts;
  /** WS_MAX_USER_SOCKETS (null when off). */
  readonly cap: { readonly stats: { readonly failedOpen: number } } | null;
  /** WS_PRESENCE_TOPICS (null when off): the shard's replicas and the tables it owns. */
  readonly presence: { readonly diffs: number; readonly diffSockets: number } | null;
  readonly presenceTables: { readonly members: number; readonly flushesSent: number } | null;
  /** Cluster mode: Redis calls for presence, by operation. */
  readonly presenceRedis: { readonly write: number; readonly read: number; readonly renew: number; readonly subscribe: number;
    readonly errors: number } | null;
}

export class ShardMetrics {
  readonly registry = new Registry();
  readonly ackLatency = new IndexedHistogram(this.registry, 'sluice_publish_ack_seconds',
    'From a client publish frame received to its ok ack written, by class.', 'class', CLASS_LABELS);
  readonly deliveryLag = new IndexedHistogram(this.registry, 'sluice_delivery_lag_seconds',
    'From an event accepted by the broker (stored, for a durable one) to its fan-out by a subscribed shard, by class.', 'class', CLASS_LABELS);

  register(s: MetricSources): void {
    const r = this.registry;
    const m = s.counters;
    counterFrom(r, 'sluice_frames_in_total', 'Client frames received, accepted or not.', undefined, () => m.framesIn);
    counterFrom(r, 'sluice_limit_rejections_total', 'Client frames rejected, by reason.', 'reason', () => m.rejections);
    counterFrom(r, 'sluice_upgrades_total', 'WebSocket upgrades, by outcome.', 'outcome', () => m.upgrades);
    counterFrom(r, 'sluice_clients_closed_total', 'Sockets the server closed, by reason.', 'reason', () => m.closes);
    gaugeFrom(r, 'sluice_connected_sockets', 'Open WebSocket connections.', s.sockets);
    counterFrom(r, 'sluice_refreshes_total', 'Token refreshes on open sockets (refresh frames), by outcome: ok or the refusal\'s reason.',
      'outcome', () => m.refreshes);
    counterFrom(r, 'sluice_admin_sockets_total',
      'Sockets an admin action reached on this node, by action: closed (revoke: 4003, disconnect: 1008 or 4000), joined (subscribe) or made to leave (unsubscribe).',
      'action', () => m.adminSockets);
    counterFrom(r, 'sluice_user_deliveries_total', '`$user` events (publishes to users) sent to sockets of this node.', undefined,
      () => m.userDeliveries);
    gaugeFrom(r, 'sluice_users_connected', 'Users with at least one open socket on this node (summed over shards: a user on two shards counts twice).',
      s.users);
    counterFrom(r, 'sluice_drained_sockets_total', 'Sockets closed by a drain (1012).', undefined, () => m.drained);
    counterFrom(r, 'sluice_messages_sent_total',
      'Events sent to sockets. For a socket with a backlog (a quarter of the soft limit unsent, or in the slow lane) an event counts once its buffer is empty.',
      undefined, () => s.lane.counters.sent);
    counterFrom(r, 'sluice_messages_dropped_total', 'Events not delivered to a congested socket, by reason.', 'reason',
      () => s.lane.counters.dropped);
    gaugeFrom(r, 'sluice_buffered_bytes', 'Bytes written to sockets and not yet sent, all sockets (sampled).', s.bufferedBytes);
    gaugeFrom(r, 'sluice_slow_lane_sockets', 'Sockets in the slow lane (a mailbox instead of native topics).', () => s.lane.sockets);
    const stats = s.broker;
    const limits = s.limits;
    counterFrom(r, 'sluice_messages_published_total', 'Events accepted by the broker, by class.', 'class', () => stats.published);
    counterFrom(r, 'sluice_publish_duplicates_total', 'Publishes answered from the idempotency table.', undefined, () => stats.duplicates);
    gaugeFrom(r, 'sluice_history_topics', 'Topics with history held in memory (embedded mode).', () => stats.historyTopics);
    counterFrom(r, 'sluice_redis_commands_total', 'Redis commands sent (cluster mode): bus, history and limits.', undefined,
      () => stats.redisCommands + limits.redisCommands);
    counterFrom(r, 'sluice_redis_errors_total', 'Redis commands that failed: unreachable, timed out or refused (cluster mode).', undefined,
      () => stats.redisErrors);
    counterFrom(r, 'sluice_redis_replica_ack_failures_total',
      'Durable publishes Redis stored but WS_REDIS_ACK_REPLICAS replicas did not confirm in WS_REDIS_ACK_TIMEOUT_MS (answered unavailable).', undefined,
      () => stats.replicaAckFailures);
    counterFrom(r, 'sluice_position_marks_total',
      '`position` frames of quiet topics (WS_POSITION_REFRESH_MS): marks sent by the topics this node owns (embedded), or asked of Redis (cluster). ' +
      'A mark goes to every socket joined to its topic; those count in sluice_messages_sent_total.', undefined, () => stats.positionMarks);
    counterFrom(r, 'sluice_limiter_settles_total', 'Batches of tenant and IP limit hits settled with a window store, by store.', 'store',
      () => limits.stats.settles);
    counterFrom(r, 'sluice_limiter_redis_commands_total', 'Redis commands sent to settle tenant and IP limits (part of sluice_redis_commands_total).',
      undefined, () => limits.redisCommands);
    counterFrom(r, 'sluice_limiter_settled_hits_total', 'Keys (tenants, addresses) settled in those batches, by store.', 'store',
      () => limits.stats.settled);
    counterFrom(r, 'sluice_log_lines_suppressed_total', 'Log lines left out by the per-kind log throttle (a flood of bad input), by level.',
      'level', () => s.suppressed);
    counterFrom(r, 'sluice_user_socket_cap_skipped_total',
      'Upgrades let through without the WS_MAX_USER_SOCKETS check because the store (Redis) did not answer.', undefined,
      () => s.cap?.stats.failedOpen ?? 0);
    if (s.presence !== null && s.presenceTables !== null) {
      const p = s.presence;
      const t = s.presenceTables;
      gaugeFrom(r, 'sluice_presence_members', 'Users present on presence topics, per topic, in the tables this node\'s shards own (a user on two topics counts twice).',
        () => t.members);
      counterFrom(r, 'sluice_presence_diffs_total', 'presence_diff frames fanned out (one per topic per shard per flush).', undefined, () => p.diffs);
      counterFrom(r, 'sluice_presence_diff_deliveries_total', 'presence_diff frames sent to sockets (each fan-out times the topic\'s sockets on the shard).',
        undefined, () => p.diffSockets);
      counterFrom(r, 'sluice_presence_flushes_total', 'Flushes of presence tables sent to subscribed shards (at most one per topic per shard per WS_PRESENCE_DIFF_MS).',
        undefined, () => t.flushesSent);
    }
    if (s.presenceRedis !== null) {
      const c = s.presenceRedis;
      counterFrom(r, 'sluice_presence_redis_calls_total',
        'Redis calls for presence (cluster mode), by operation: write (one script per topic per flush with changes), read (the other nodes\' entries), renew (expiry), subscribe.',
        'op', () => ({ write: c.write, read: c.read, renew: c.renew, subscribe: c.subscribe }));
      counterFrom(r, 'sluice_presence_redis_errors_total', 'Redis calls for presence that failed.', undefined, () => c.errors);
    }
    counterFrom(r, 'sluice_limiter_fallbacks_total', 'Limit settles Redis failed and this node\'s memory store took.', undefined,
      () => limits.stats.fallbacks);
  }
}
