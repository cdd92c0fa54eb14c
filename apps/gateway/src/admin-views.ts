/**
 * The admin page's views of the cluster (GET /v1/nodes, /v1/topics,
 * /v1/connections) and the drain of a named node, made from the answers of
 * every node to one question on the control channel (control-plane.ts):
 * nothing is written to Redis for them, and nothing is asked while nobody
 * looks. Embedded mode: this node alone.
 *
 * A node that is alive (its lease in Redis) but does not answer within
 * WS_NODE_ANSWER_MS (1 s by default) is shown as `unresponsive`, with the
 * last view this node had of it and how old that is; a node whose lease ended (it stopped, or died a lease ago) is not
 * shown. When Redis does not take the question, the views hold this node's
 * answer and every other node as unanswered.
 */
import type { Config } from '@sluice/core';
import type { ConnectionView } from './control.ts';
import type { NodeAnswers, NodeAsk } from './control-plane.ts';
import type { NodeView } from './node-stats.ts';

export interface NodesAnswer {
  readonly mode: 'embedded' | 'cluster';
  readonly self: string;
  readonly at: number;
  readonly features: { readonly auth: Config['auth']; readonly presenceTopics: readonly string[]; readonly push: boolean };
  readonly nodes: readonly NodeView[];
}

export interface TopTopic {
  readonly tenant: string;
  readonly topic: string;
  readonly subscribers: number;
}

export type DrainAnswer = 'draining' | 'unknown' | 'unanswered';

export class AdminViews {
  /** The last view each other node answered, and when (this node's clock): what an unresponsive node is shown with. */
  private readonly lastSeen = new Map<string, { view: NodeView; at: number }>();

  constructor(
    private readonly cfg: Config,
    readonly selfId: string,
    private readonly ask: (ask: NodeAsk) => Promise<NodeAnswers>,
    /** The nodes alive (cluster mode), this one included. */
    private readonly alive: () => ReadonlySet<string>,
  ) {}

  async nodes(): Promise<NodesAnswer> {
    const { answers, unanswered } = await this.ask({ kind: 'stats' });
    const now = Date.now();
    const nodes: NodeView[] = [];
    // An answer that is not a view (a node still starting) counts as none.
    const silentOnes = [...unanswered];
    for (const [id, body] of answers) {
      if (!isNodeView(body) || body.id !== id) {
        silentOnes.push(id);
        continue;
      }
      const view: NodeView = { ...body, self: id === this.selfId };
      nodes.push(view);
      if (id !== this.selfId) this.lastSeen.set(id, { view, at: now });
    }
    for (const id of silentOnes) {
      const last = this.lastSeen.get(id);
      nodes.push(last === undefined ? silent(id)
        : { ...last.view, state: 'unresponsive', ageMs: last.view.ageMs + (now - last.at), self: false });
    }
    const live = this.alive();
    for (const id of this.lastSeen.keys()) if (!live.has(id)) this.lastSeen.delete(id);
    nodes.sort((a, b) => (a.self === b.self ? (a.id < b.id ? -1 : a.id > b.id ? 1 : 0) : a.self ? -1 : 1));
    return {
      mode: this.cfg.redisUrl === undefined ? 'embedded' : 'cluster',
      self: this.selfId,
      at: now,
      features: {
        auth: this.cfg.auth,
        presenceTopics: this.cfg.presenceTopics === undefined ? [] : this.cfg.presenceTopics.split(','),
        push: this.cfg.redisUrl !== undefined,
      },
      nodes,
    };
  }

  /**
   * The `limit` topics with the most sockets over the cluster. Each shard
   * names its own `limit` largest and the counts are summed by topic: exact
   * for a topic in every shard's list, a lower bound otherwise (a topic
   * just below the list on some shards); the list is as long as asked.
   */
  async topics(tenant: string | undefined, limit: number): Promise<{ topics: TopTopic[]; unanswered: readonly string[] }> {
    const { answers, unanswered } = await this.ask({ kind: 'topics', tenant, limit });
    // Another node's answer came over Redis: only well-formed entries count.
    const lists = [...answers.values()].filter(Array.isArray).map((body) => (body as unknown[]).filter((e): e is [string, number] =>
      Array.isArray(e) && typeof e[0] === 'string' && typeof e[1] === 'number'));
    const topics = sumLargest(lists, limit).map(([key, n]) => {
      const slash = key.indexOf('/');
      return { tenant: key.slice(0, slash), topic: key.slice(slash + 1), subscribers: n };
    });
    return { topics, unanswered };
  }

  /** A user's open sockets on every node. */
  async connections(tenant: string, user: string): Promise<{ connections: ConnectionView[]; unanswered: readonly string[] }> {
    const { answers, unanswered } = await this.ask({ kind: 'connections', tenant, user });
    const connections: ConnectionView[] = [];
    for (const body of answers.values()) if (Array.isArray(body)) connections.push(...(body as unknown[]).filter(isConnectionView));
    connections.sort((a, b) => (a.connectionId < b.connectionId ? -1 : 1));
    return { connections, unanswered };
  }

  /** Drains `node` (this one or another alive): `unknown` when no such node is alive, `unanswered` when it did not confirm in time. */
  async drain(node: string): Promise<DrainAnswer> {
    if (node !== this.selfId && !this.alive().has(node)) return 'unknown';
    const { answers } = await this.ask({ kind: 'drain', node });
    return answers.has(node) ? 'draining' : 'unanswered';
  }
}

/**
 * Lists of [topic key, sockets] (each shard's, then each node's) summed by
 * key: the `limit` largest, largest first, ties by key (one order on every node).
 */
export function sumLargest(lists: Iterable<readonly (readonly [string, number])[]>, limit: number): [string, number][] {
  const sums = new Map<string, number>();
  for (const list of lists) for (const [key, n] of list) sums.set(key, (sums.get(key) ?? 0) + n);
  return [...sums].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, limit);
}

function isNodeView(v: unknown): v is NodeView {
  const n = v as Partial<NodeView> | null;
  return typeof n === 'object' && n !== null && typeof n.id === 'string' && typeof n.state === 'string' && Array.isArray(n.shards) &&
    Array.isArray(n.series) && typeof n.rates === 'object';
}

function isConnectionView(v: unknown): v is ConnectionView {
  const c = v as Partial<ConnectionView> | null;
  return typeof c === 'object' && c !== null && typeof c.connectionId === 'string' && typeof c.node === 'string' && typeof c.shard === 'number' &&
    typeof c.ip === 'string' && Array.isArray(c.topics) && typeof c.bufferedBytes === 'number' && typeof c.slow === 'boolean';
}

/** A node alive by its lease that never answered this node: no numbers, `ageMs` -1. */
function silent(id: string): NodeView {
  return {
    id, self: false, state: 'unresponsive', version: '', startedAt: 0, sampledAt: 0, ageMs: -1, sockets: 0, users: 0, slowLane: 0,
    bufferedBytes: 0, lagMs: 0, heapUsedBytes: 0, rssBytes: 0, redis: 'unknown', upgradeBudget: 0, upgradeBacklogMs: 0, shards: [],
    rates: { upgrades: {}, closes: {}, refused: {}, published: 0, sent: 0, dropped: 0 }, series: [],
  };
}
