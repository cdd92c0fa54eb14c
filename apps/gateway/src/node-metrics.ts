/**
 * The node's /metrics: the coordinator's own registry, each running shard's
 * last scrape, and the retired counters of shards that crashed, aggregated
 * into one exposition.
 */
import { aggregateMetrics, type MetricsJson, type Registry, sumMetrics } from '@sluice/telemetry';

/** Asks one shard for its metrics; undefined when it missed its deadline (2 s) or went away. */
export type ScrapeShard = () => Promise<MetricsJson | undefined>;

/** One running shard as a scrape sees it: how to ask it, and whether the answer is still from the same life of the shard. */
export interface ShardSource {
  readonly shard: number;
  readonly scrape: ScrapeShard;
  current(): boolean;
}

export class NodeMetrics {
  /** Each running shard's last answer: stands in for one that is slower than the wait. */
  private readonly lastScrape = new Map<number, MetricsJson>();
  /** Each shard's ask in flight: a scrape that comes before it is answered waits on it, not on a second ask. */
  private readonly asking = new Map<number, Promise<void>>();
  /**
   * The counters and histograms of shards that crashed, as last scraped: a
   * restarted shard counts from 0 again, and without these the node's sums
   * would fall, which Prometheus reads as a counter reset.
   */
  private readonly retired: MetricsJson[] = [];
  /** The scrape being rendered: scrapes that come meanwhile share it (one render at a time, the same numbers). */
  private rendering: Promise<{ text: string; contentType: string }> | undefined;

  /**
   * `waitMs` (WS_METRICS_WAIT_MS): how long a scrape waits for a shard that
   * has answered before. A scrape is then never slower than the coordinator
   * plus that wait, however busy a shard's event loop is (S10: with 10k
   * sockets and traffic on 2 cores, waiting for every shard put the p99 at
   * 78 ms while the coordinator alone answered in 12).
   */
  constructor(private readonly registry: Registry, private readonly waitMs: number) {}

  /** A shard stopped or crashed: its counters and histograms are kept, as last scraped. */
  retire(shard: number): void {
    const last = this.lastScrape.get(shard);
    this.lastScrape.delete(shard);
    this.asking.delete(shard);
    if (last === undefined) return;
    // prom-client's typings call the type an enum; in the JSON it is the name.
    this.retired.push(last.filter((m) => (m.type as unknown as string) === 'counter' || (m.type as unknown as string) === 'histogram'));
    // One entry, whatever the number of crashes: the retired sums, merged.
    if (this.retired.length > 1) this.retired.splice(0, this.retired.length, sumMetrics(this.retired));
  }

  /** Renders the node's exposition from every running shard in `shards`. */
  render(shards: readonly ShardSource[]): Promise<{ text: string; contentType: string }> {
    this.rendering ??= this.collect(shards).finally(() => (this.rendering = undefined));
    return this.rendering;
  }

  /** Asks `source` unless an ask is already out; its answer, whenever it comes, becomes the shard's last. */
  private ask({ shard, scrape, current }: ShardSource): Promise<void> {
    let asked = this.asking.get(shard);
    if (asked === undefined) {
      const p: Promise<void> = scrape().then((json) => {
        if (json !== undefined && current()) this.lastScrape.set(shard, json);
      }).finally(() => {
        if (this.asking.get(shard) === p) this.asking.delete(shard);
      });
      this.asking.set(shard, p);
      asked = p;
    }
    return asked;
  }

  private async collect(shards: readonly ShardSource[]): Promise<{ text: string; contentType: string }> {
    const p = await this.parts(shards);
    return aggregateMetrics([p.own, ...p.shards.values(), ...p.retired]);
  }

  /**
   * Every part of the node's metrics, apart: the coordinator's registry, each
   * running shard's answer (or its last, as for a scrape: at most `waitMs`
   * is waited for a shard that answered before) and the retired counters.
   * The admin page's node stats read them (node-stats.ts).
   */
  async parts(shards: readonly ShardSource[]): Promise<{ own: MetricsJson; shards: Map<number, MetricsJson>; retired: readonly MetricsJson[] }> {
    const asks = shards.map((s) => this.ask(s));
    // A shard that never answered has nothing to stand in for it: wait for it (its ask has its own deadline).
    const firsts = asks.filter((_, i) => !this.lastScrape.has(shards[i]!.shard));
    const own = await this.registry.getMetricsAsJSON();
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.waitMs)));
    await Promise.race([Promise.all(asks), Promise.all([waited, ...firsts])]);
    clearTimeout(timer);
    const perShard = new Map<number, MetricsJson>();
    for (const { shard } of shards) perShard.set(shard, this.lastScrape.get(shard) ?? []);
    return { own, shards: perShard, retired: this.retired };
  }
}
