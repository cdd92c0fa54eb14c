/**
 * The node's /metrics: the coordinator's own registry, each running shard's
 * last scrape, and the retired counters of shards that crashed, aggregated
 * into one exposition.
 */
import { aggregateMetrics, type MetricsJson, type Registry, sumMetrics } from '@sluice/telemetry';

/** Asks one shard for its metrics; undefined when it missed the deadline. */
export type ScrapeShard = () => Promise<MetricsJson | undefined>;

export class NodeMetrics {
  /** Each running shard's last scrape: stands in for one that misses a scrape's deadline. */
  private readonly lastScrape = new Map<number, MetricsJson>();
  /**
   * The counters and histograms of shards that crashed, as last scraped: a
   * restarted shard counts from 0 again, and without these the node's sums
   * would fall, which Prometheus reads as a counter reset.
   */
  private readonly retired: MetricsJson[] = [];
  /** The scrape being rendered: scrapes that come meanwhile share it (one render at a time, the same numbers). */
  private rendering: Promise<{ text: string; contentType: string }> | undefined;

  constructor(private readonly registry: Registry) {}

  /** A shard stopped or crashed: its counters and histograms are kept, as last scraped. */
  retire(shard: number): void {
    const last = this.lastScrape.get(shard);
    this.lastScrape.delete(shard);
    if (last === undefined) return;
    // prom-client's typings call the type an enum; in the JSON it is the name.
    this.retired.push(last.filter((m) => (m.type as unknown as string) === 'counter' || (m.type as unknown as string) === 'histogram'));
    // One entry, whatever the number of crashes: the retired sums, merged.
    if (this.retired.length > 1) this.retired.splice(0, this.retired.length, sumMetrics(this.retired));
  }

  /** `shards`: every running shard, with how to scrape it and whether it is still the same life of the shard when it answers. */
  render(shards: readonly { shard: number; scrape: ScrapeShard; current(): boolean }[]): Promise<{ text: string; contentType: string }> {
    this.rendering ??= this.collect(shards).finally(() => (this.rendering = undefined));
    return this.rendering;
  }

  private async collect(shards: readonly { shard: number; scrape: ScrapeShard; current(): boolean }[]): Promise<{ text: string; contentType: string }> {
    const own = await this.registry.getMetricsAsJSON();
    const perShard = await Promise.all(shards.map(async ({ shard, scrape, current }) => {
      const json = await scrape();
      if (json === undefined) return this.lastScrape.get(shard) ?? [];
      if (current()) this.lastScrape.set(shard, json);
      return json;
    }));
    return aggregateMetrics([own, ...perShard, ...this.retired]);
  }
}
