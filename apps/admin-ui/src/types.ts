/**
 * The admin API's answers as the page reads them (docs/admin-api.openapi.json
 * on the gateway's side). Only what the page shows is typed; extra fields are
 * ignored.
 */

export type NodeState = 'ready' | 'not_ready' | 'draining' | 'unresponsive';

export interface ShardView {
  shard: number;
  sockets: number;
  lagMs: number;
  slowLane: number;
  bufferedBytes: number;
}

export interface SeriesPoint {
  t: number;
  sockets: number;
  upgrades: number;
  closes: number;
  refused: number;
  sent: number;
  lagMs: number;
  bufferedBytes: number;
}

export interface NodeRates {
  upgrades: Record<string, number>;
  closes: Record<string, number>;
  refused: Record<string, number>;
  published: number;
  sent: number;
  dropped: number;
}

export interface NodeView {
  id: string;
  self: boolean;
  state: NodeState;
  version: string;
  startedAt: number;
  sampledAt: number;
  ageMs: number;
  sockets: number;
  users: number;
  slowLane: number;
  bufferedBytes: number;
  lagMs: number;
  heapUsedBytes: number;
  rssBytes: number;
  /** `unknown`: a node that never answered. */
  redis: 'up' | 'down' | 'none' | 'unknown';
  upgradeBudget: number;
  upgradeBacklogMs: number;
  shards: ShardView[];
  rates: NodeRates;
  series: SeriesPoint[];
}

export interface NodesAnswer {
  mode: 'embedded' | 'cluster';
  self: string;
  at: number;
  features: {
    auth: 'none' | 'jwt' | 'hook';
    presenceTopics: string[];
    push: boolean;
  };
  nodes: NodeView[];
}

export interface TopicRow {
  tenant: string;
  topic: string;
  subscribers: number;
}

export interface TopicsAnswer {
  topics: TopicRow[];
  at: number;
}

export interface Connection {
  connectionId: string;
  node: string;
  shard: number;
  /** The client address (X-Forwarded-For behind WS_TRUST_PROXY). */
  ip: string;
  topics: string[];
  bufferedBytes: number;
  slow: boolean;
  /** When its token expires (ms); null without one. */
  expiresAt: number | null;
}

export interface ConnectionsAnswer {
  connections: Connection[];
  unanswered: string[];
}
