// S16's pure parts (issue 20, "100,000 sockets on one box"): which topics a
// socket joins, which node it starts on, what a steady rate delivers, how
// a subscription's received sequence numbers become lost acknowledged
// events, which resource of the box was nearest its limit, and the sizing
// arithmetic for a million sockets. No I/O here: the orchestrator
// (scale.ts), the load processes (loadgen/scale-child.ts) and the tests
// share it.

/** The topic mix: every socket joins the big topic, its room and its feed. */
export interface Mix {
  readonly sockets: number;
  /** Sockets per room (the last room may hold fewer). */
  readonly roomSize: number;
  /** Keyed feeds; socket i follows feed i mod feeds. */
  readonly feeds: number;
}

export const BIG_TOPIC = 'big';
export const roomTopic = (k: number): string => `room.${k}`;
export const feedTopic = (k: number): string => `feed.${k}`;

export function rooms(m: Mix): number {
  return Math.ceil(m.sockets / m.roomSize);
}

/** Room and feed of socket `i` (0-based over the whole run): neighbours share a room, feeds stripe across them. */
export function topicsOf(m: Mix, i: number): { room: number; feed: number } {
  return { room: Math.floor(i / m.roomSize), feed: i % m.feeds };
}

/** Members of room `k` and followers of feed `k`. */
export function roomMembers(m: Mix, k: number): number {
  return Math.max(0, Math.min(m.roomSize, m.sockets - k * m.roomSize));
}
export function feedFollowers(m: Mix, k: number): number {
  return k >= m.feeds ? 0 : Math.floor(m.sockets / m.feeds) + (k < m.sockets % m.feeds ? 1 : 0);
}

/**
 * The node socket `i` first connects to: round robin, so that a room's ten
 * members sit on different nodes (the worst case for the bus: no affinity,
 * as behind a plain load balancer).
 */
export function nodeOf(i: number, nodes: number): number {
  return i % nodes;
}

/**
 * Where a client reconnects after losing node `from`: the node restarted
 * last when it is up (what a least-connections balancer picks: it is the
 * emptiest), else the next up node after `from` counted from a per-client
 * offset, so that the dropped clients spread evenly over the others. -1 when
 * no node is up.
 */
export function reconnectNode(up: readonly boolean[], prefer: number, from: number, client: number): number {
  if (prefer >= 0 && prefer < up.length && up[prefer] === true && prefer !== from) return prefer;
  const others = up.map((u, k) => (u && k !== from ? k : -1)).filter((k) => k >= 0);
  if (others.length === 0) return up[from] === true ? from : -1;
  return others[client % others.length]!;
}

/** Event rates the publisher holds: per second, over the whole run. */
export interface Rates {
  /** Durable events to the big topic. */
  readonly big: number;
  /** Durable events to rooms, round robin over them. */
  readonly room: number;
  /** Keyed events to feeds, round robin over them. */
  readonly feed: number;
}

/** Deliveries per second the rates mean with every socket subscribed (each room and feed event reaches its members). */
export function deliveriesPerSecond(m: Mix, r: Rates): { big: number; room: number; feed: number; total: number } {
  const big = r.big * m.sockets;
  const room = r.room * (m.sockets / rooms(m));
  const feed = r.feed * (m.sockets / m.feeds);
  return { big, room, feed, total: big + room + feed };
}

/**
 * One durable subscription's record of sequence numbers (each topic's
 * publisher numbers its events 0, 1, 2, ...): the highest seen, those
 * skipped (to be filled by a late arrival or counted lost), and repeats.
 */
export class SeqTrack {
  last = -1;
  missing: Set<number> | null = null;
  duplicates = 0;
  late = 0;

  see(seq: number): void {
    if (seq > this.last) {
      if (seq > this.last + 1) {
        this.missing ??= new Set();
        for (let s = this.last + 1; s < seq; s++) this.missing.add(s);
      }
      this.last = seq;
      return;
    }
    if (this.missing?.delete(seq) === true) { this.late++; return; }
    this.duplicates++;
  }

  /**
   * Acknowledged events this subscription never got: every seq below
   * `published` that is neither seen nor in `unacked` (publishes that never
   * got their ack may be missing: nobody was promised them).
   */
  lost(published: number, unacked: ReadonlySet<number> | undefined): number[] {
    const out: number[] = [];
    const gone = (s: number): void => { if (unacked?.has(s) !== true) out.push(s); };
    if (this.missing !== null) for (const s of this.missing) if (s < published) gone(s);
    for (let s = this.last + 1; s < published; s++) gone(s);
    return out.sort((a, b) => a - b);
  }
}

/** What each resource of the box was at, against its limit, at the run's worst moment. */
export interface Usage {
  /** Machine CPU, cores busy over the steady window, against the cores. */
  readonly cpuCores: number;
  readonly cores: number;
  /** Memory in use (MemTotal - MemAvailable), at its highest, against MemTotal. */
  readonly memUsedBytes: number;
  readonly memTotalBytes: number;
  /** redis-server's CPU over the steady window, in cores (one thread: its limit is one core). */
  readonly redisCores: number;
  /** Sockets bound to the busiest loopback source address, against the ephemeral port range. */
  readonly portsPerSource: number;
  readonly portRange: number;
  /** Open files of the fullest gateway process (at any time, the rolling restart included), and of the fullest load process, against their limit. */
  readonly gatewayFds: number;
  readonly loadFds: number;
  readonly fdLimit: number;
}

export type Resource = 'CPU' | 'memory' | 'Redis' | 'ports' | 'file descriptors';

/** Each resource's share of its limit, highest first: the first is the limit the box meets first. */
export function limits(u: Usage): Array<{ resource: Resource; share: number; detail: string }> {
  const gib = (b: number): string => `${(b / 2 ** 30).toFixed(1)} GiB`;
  const out: Array<{ resource: Resource; share: number; detail: string }> = [
    { resource: 'CPU', share: u.cpuCores / u.cores, detail: `${u.cpuCores.toFixed(2)} of ${u.cores} cores` },
    { resource: 'memory', share: u.memUsedBytes / u.memTotalBytes, detail: `${gib(u.memUsedBytes)} of ${gib(u.memTotalBytes)}` },
    { resource: 'Redis', share: u.redisCores, detail: `${(u.redisCores * 100).toFixed(0)}% of its one core` },
    { resource: 'ports', share: u.portsPerSource / u.portRange, detail: `${u.portsPerSource} of ${u.portRange} ephemeral ports on the busiest source address` },
    {
      resource: 'file descriptors', share: Math.max(u.gatewayFds, u.loadFds) / u.fdLimit,
      detail: `${u.gatewayFds} (gateway) / ${u.loadFds} (load process) of ${u.fdLimit} per process`,
    },
  ];
  return out.sort((a, b) => b.share - a.share);
}

/** The per-socket and per-event costs measured, as the sizing takes them. */
export interface Costs {
  /** Gateway RSS per socket joined to the three topics, bytes. */
  readonly rssPerSocket: number;
  /** Gateway RSS of a node with no socket, bytes. */
  readonly rssBase: number;
  /** Gateway CPU per delivered event, µs (every thread of every node, over the deliveries the clients counted). */
  readonly cpuUsPerDelivery: number;
  /** Gateway CPU per published event on top of the deliveries (the bus hop of each node that has subscribers), µs per event per node. */
  readonly cpuUsPerEventPerNode: number;
  /** redis-server CPU per published event, µs. */
  readonly redisUsPerEvent: number;
}

export interface SizingInput {
  readonly sockets: number;
  /** Deliveries per second (every socket's events). */
  readonly deliveriesPerS: number;
  /** Published events per second (what crosses Redis). */
  readonly eventsPerS: number;
  /** Sockets per node (bounded by its file limit and its share of a restart). */
  readonly socketsPerNode: number;
  /** Of a core, what a node may use at the steady rate (headroom for restarts and bursts). */
  readonly cpuTarget: number;
  /** Of a Redis core, what one shard may use. */
  readonly redisTarget: number;
}

export interface Sizing {
  readonly nodes: number;
  readonly ramPerNodeBytes: number;
  readonly coresPerNode: number;
  readonly gatewayCores: number;
  readonly redisShards: number;
  readonly redisCores: number;
}

/** Nodes, RAM, cores and Redis shards for `s` at the measured costs `c`. */
export function sizeFor(s: SizingInput, c: Costs): Sizing {
  const nodes = Math.ceil(s.sockets / s.socketsPerNode);
  const ramPerNodeBytes = c.rssBase + c.rssPerSocket * s.socketsPerNode;
  const gatewayCores = (s.deliveriesPerS * c.cpuUsPerDelivery + s.eventsPerS * nodes * c.cpuUsPerEventPerNode) / 1e6;
  const coresPerNode = gatewayCores / nodes / s.cpuTarget;
  const redisCores = (s.eventsPerS * c.redisUsPerEvent) / 1e6;
  const redisShards = Math.max(1, Math.ceil(redisCores / s.redisTarget));
  return { nodes, ramPerNodeBytes, coresPerNode, gatewayCores, redisShards, redisCores };
}
