/**
 * Which nodes of the cluster are alive (cluster mode, in the coordinator).
 *
 * One sorted set, `sluice:nodes`: member a node id, score the end of its
 * lease in ms of Redis's clock (so the nodes' clocks never matter). Every
 * `WS_PRESENCE_TTL_MS / 4` a node renews its own lease for half the TTL,
 * drops the leases that ended and reads the rest, in one script. A node that
 * dies (SIGKILL) or loses Redis stops renewing: within half the TTL its lease
 * ends, and within another quarter every other node has read that it is
 * gone, which leaves a quarter of the TTL for the presence diff that takes
 * its users out. A node that stops cleanly removes itself.
 *
 * What uses it: presence (a gone node's members are dropped, a node's own
 * entries are written again when it finds Redis again) and publishes to
 * users (the nodes whose answers to wait for).
 */
import { NODES_KEY } from '@sluice/core';
import type { RedisClient } from '@sluice/redis';
import type { Logger } from '@sluice/telemetry';

const RENEW_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGE', KEYS[1], 0, -1)
`;

export class NodeRegistry {
  private live: ReadonlySet<string> = new Set();
  private timer: NodeJS.Timeout | undefined;
  private failing = false;
  private stopped = false;
  private everRenewed = false;
  /** Renewals that failed (Redis unreachable or the script refused). */
  failures = 0;

  constructor(
    private readonly redis: RedisClient,
    readonly nodeId: string,
    private readonly ttlMs: number,
    private readonly log: Logger,
    /** The set changed: `gone` ended their lease (or stopped), `joined` are new. Called after each renewal that saw a change. */
    private readonly changed: (live: ReadonlySet<string>, gone: readonly string[], joined: readonly string[]) => void,
  ) {}

  /** The nodes alive at the last renewal, this one included once it renewed. */
  get nodes(): ReadonlySet<string> {
    return this.live;
  }

  start(): void {
    // Every time the connection is (back) up, at once: the first renewal at start may come before it is, and a node
    // back from an outage should be seen again without waiting a quarter of the TTL.
    this.redis.on('ready', () => void this.renew());
    void this.renew();
    this.timer = setInterval(() => void this.renew(), Math.max(250, Math.floor(this.ttlMs / 4)));
    this.timer.unref();
  }

  /** Renews now (also at every ready of the connection, so that the node is back at once). */
  async renew(): Promise<void> {
    if (this.stopped) return;
    // Not connected yet at start: the `ready` handler renews the moment it is (a warning now would only say that the
    // connection is still being made; Redis unreachable at start is logged once by the coordinator's watch).
    if (!this.everRenewed && this.redis.status !== 'ready') return;
    let members: string[];
    try {
      members = (await this.redis.eval(RENEW_LUA, 1, NODES_KEY, this.nodeId, Math.floor(this.ttlMs / 2))) as string[];
    } catch (err) {
      this.failures++;
      if (!this.failing) this.log.warn({ err }, 'node lease not renewed (redis unreachable?); other nodes drop this node\'s presence when it ends');
      this.failing = true;
      return;
    }
    if (this.stopped) return;
    this.everRenewed = true;
    if (this.failing) this.log.info('node lease renewed again');
    this.failing = false;
    const next = new Set(members);
    const gone = [...this.live].filter((n) => !next.has(n));
    const joined = members.filter((n) => !this.live.has(n));
    this.live = next;
    if (gone.length > 0 || joined.length > 0) this.changed(next, gone, joined);
  }

  /** Stops renewing and removes this node's lease: the others see it gone at their next renewal. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    try {
      await this.redis.zrem(NODES_KEY, this.nodeId);
    } catch {
      // Unreachable: the lease ends by itself.
    }
  }
}
