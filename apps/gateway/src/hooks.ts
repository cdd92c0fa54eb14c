/**
 * Calls of the backend hooks (connect, refresh, subscribe, publish) from a
 * shard, each bounded: a timeout, a cap on the node's calls in flight per
 * hook (a shared-memory counter, no message per call), keep-alive
 * connections (one undici Agent per shard), an answer size cap, and a
 * circuit breaker per hook per shard. Nothing here waits on the event loop:
 * a call is a promise, and the socket or upgrade that made it goes on when
 * it settles; other sockets are not behind it.
 */
import { compileRights, type Config, type HookFailure, type HookName, type HookOutcome, HOOK_NAMES, HOOK_OUTCOMES, type HookParse, type Rights } from '@sluice/core';
import { counterFrom, gaugeFrom, IndexedHistogram, type Registry, signBody } from '@sluice/telemetry';
import type { Agent, request } from 'undici';
import { type HookSlot, HookSlot as Slots, type SharedState } from './shared-state.ts';
import type { ThrottledLine } from './shard/context.ts';

export type HookResult<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly failure: HookFailure; readonly retryAfterMs: number };

const ignore = (): void => {};

/** Calls and their outcomes, by hook: read by /metrics. */
export class HookStats {
  readonly calls: Record<HookName, Record<HookOutcome, number>>;
  readonly latency: IndexedHistogram;
  /** Breakers that opened, by hook. */
  readonly opened: Record<HookName, number>;

  constructor(registry: Registry) {
    this.calls = Object.fromEntries(HOOK_NAMES.map((h) => [h, Object.fromEntries(HOOK_OUTCOMES.map((o) => [o, 0]))])) as never;
    this.opened = Object.fromEntries(HOOK_NAMES.map((h) => [h, 0])) as never;
    this.latency = new IndexedHistogram(registry, 'sluice_hook_duration_seconds',
      'From a hook call sent to its answer read (or its failure), by hook; calls refused by the breaker or the in-flight cap are not timed.',
      'hook', HOOK_NAMES);
    for (const h of HOOK_NAMES) {
      counterFrom(registry, `sluice_hook_${h}_calls_total`,
        `Calls of the ${h} hook, by outcome: allowed, refused (the backend's no), or a failure answered unavailable ` +
        '(timeout, error, bad_status, bad_answer, breaker_open, overloaded).', 'outcome', () => this.calls[h]);
    }
    counterFrom(registry, 'sluice_hook_breaker_opened_total', 'Times a hook\'s circuit breaker opened in a shard, by hook.', 'hook',
      () => this.opened);
  }
}

/** undici's dispatcher and request, for one caller of a backend. */
export interface Http {
  readonly agent: Agent;
  readonly request: typeof request;
}

/**
 * An undici Agent with `opts` and undici's request. The module is loaded
 * by this call, not with the gateway: only a thread that calls a backend
 * (a hook or webhook URL is set) needs it, and loading it is about a sixth
 * of a start's CPU (120 ms of the coordinator's 730 here).
 */
export async function httpClient(opts: ConstructorParameters<typeof Agent>[0]): Promise<Http> {
  const undici = await import('undici');
  return { agent: new undici.Agent(opts), request: undici.request };
}

/** Whether any backend hook is set: then each shard loads undici at its start (`shardHooks`). */
export function anyHook(cfg: Config): boolean {
  return cfg.connectHookUrl !== undefined || cfg.subscribeHookUrl !== undefined || cfg.publishHookUrl !== undefined;
}

/** The undici dispatcher a shard's hooks share: keep-alive connections, at most the in-flight cap per origin. */
export function hookHttp(cfg: Config): Promise<Http> {
  return httpClient({ connections: cfg.hookMaxInflight, pipelining: 1, keepAliveTimeout: 30_000, keepAliveMaxTimeout: 600_000 });
}

export class HookClient {
  private failures = 0;
  /** While open: when the breaker lets one call probe the backend. 0 when closed. */
  private openUntil = 0;
  private probing = false;
  private readonly slot: HookSlot;

  constructor(
    /** The URL's hook: `connect` serves `refresh` too. */
    readonly kind: 'connect' | 'subscribe' | 'publish',
    private readonly url: string,
    private readonly cfg: Config,
    private readonly shared: SharedState,
    private readonly stats: HookStats,
    private readonly http: Http,
    private readonly line: ThrottledLine,
    /** This shard: its calls are counted in its own slots, which the coordinator zeroes when the shard is gone. */
    private readonly shard: number,
    /** Closed with the shard: calls ending after that give no place back (the coordinator zeroes the slots; a late release would go below 0). */
    private readonly life: { closed: boolean },
    private readonly random: () => number = Math.random,
  ) {
    this.slot = Slots[kind];
  }

  /**
   * POSTs `body` (JSON) and parses the answer with `parse`. Refusals are the
   * parser's `value`; `refused` says which values are one, for the metrics.
   * Never rejects.
   */
  async call<T>(hook: HookName, body: string, parse: (json: unknown) => HookParse<T>, refused: (v: T) => boolean,
    headers?: Record<string, string>): Promise<HookResult<T>> {
    const counts = this.stats.calls[hook];
    const now = Date.now();
    let probe = false;
    if (this.openUntil !== 0) {
      if (now < this.openUntil || this.probing) {
        counts.breaker_open++;
        return { ok: false, failure: 'breaker_open', retryAfterMs: this.retryAfter(now) };
      }
      // Half open: this call probes; the others wait for its answer.
      this.probing = probe = true;
    }
    if (!this.shared.takeHookCall(this.shard, this.slot, this.cfg.hookMaxInflight, this.cfg.workers)) {
      if (probe) this.probing = false;
      counts.overloaded++;
      return { ok: false, failure: 'overloaded', retryAfterMs: this.retryAfter(now) };
    }
    const t0 = performance.now();
    let r: HookResult<T>;
    try {
      r = await this.send(hook, body, parse, headers);
    } finally {
      if (!this.life.closed) this.shared.releaseHookCall(this.shard, this.slot);
    }
    this.stats.latency.observe(HOOK_NAMES.indexOf(hook), (performance.now() - t0) / 1000);
    if (r.ok) {
      counts[refused(r.value) ? 'refused' : 'allowed']++;
      this.failures = 0;
      this.openUntil = 0;
      this.probing = false;
    } else {
      counts[r.failure]++;
      this.failed(hook, probe, Date.now());
    }
    return r;
  }

  /**
   * One more failure. The breaker opens at WS_HOOK_BREAKER_FAILURES in a
   * row, or again when the probe fails; calls sent before it opened that
   * fail afterwards do not move its end.
   */
  private failed(hook: HookName, probe: boolean, now: number): void {
    this.failures++;
    if (probe) this.probing = false;
    else if (this.openUntil !== 0 || this.failures < this.cfg.hookBreakerFailures) return;
    const wasOpen = this.openUntil !== 0;
    this.openUntil = now + this.cfg.hookBreakerMs;
    if (!wasOpen) {
      this.stats.opened[hook]++;
      this.line.write({ hook: this.kind, failures: this.failures, forMs: this.cfg.hookBreakerMs }, 'hook circuit breaker opened: calls answer unavailable');
    }
  }

  /** When a refused caller should come back: after the breaker's time, spread by up to a second so that they do not come back at once. */
  private retryAfter(now: number): number {
    const base = this.openUntil > now ? this.openUntil - now : this.cfg.retryAfterMinMs;
    return Math.ceil(base + this.random() * Math.max(1000, this.cfg.retryAfterMaxMs - this.cfg.retryAfterMinMs));
  }

  private async send<T>(hook: HookName, body: string, parse: (json: unknown) => HookParse<T>,
    extra: Record<string, string> | undefined): Promise<HookResult<T>> {
    const cfg = this.cfg;
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-sluice-hook': hook, ...extra };
    if (cfg.hookSecret !== undefined) {
      const ts = String(Date.now());
      headers['x-sluice-timestamp'] = ts;
      headers['x-sluice-signature'] = signBody(cfg.hookSecret, ts, body);
    }
    let text: string;
    try {
      const res = await this.http.request(this.url, {
        method: 'POST', body, headers, dispatcher: this.http.agent, signal: AbortSignal.timeout(cfg.hookTimeoutMs),
        headersTimeout: cfg.hookTimeoutMs, bodyTimeout: cfg.hookTimeoutMs,
      });
      // undici's body emits an error when destroyed before its end: listened for, so that it is no uncaught exception.
      res.body.on('error', ignore);
      if (res.statusCode < 200 || res.statusCode > 299) {
        res.body.destroy();
        return this.fail(hook, 'bad_status', `answered HTTP ${res.statusCode}`);
      }
      const max = cfg.hookMaxResponseBytes;
      const declared = Number(res.headers['content-length'] ?? NaN);
      if (declared > max) {
        res.body.destroy();
        return this.fail(hook, 'bad_answer', `answer of ${declared} bytes, above WS_HOOK_MAX_RESPONSE_BYTES (${max})`);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res.body) {
        size += (chunk as Buffer).length;
        if (size > max) {
          res.body.destroy();
          return this.fail(hook, 'bad_answer', `answer above WS_HOOK_MAX_RESPONSE_BYTES (${max})`);
        }
        chunks.push(chunk as Buffer);
      }
      text = chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks).toString('utf8');
    } catch (err) {
      const e = err as { name?: string; code?: string; message?: string };
      if (e.name === 'TimeoutError' || e.code === 'UND_ERR_HEADERS_TIMEOUT' || e.code === 'UND_ERR_BODY_TIMEOUT') {
        return this.fail(hook, 'timeout', `no answer in ${cfg.hookTimeoutMs} ms`);
      }
      return this.fail(hook, 'error', e.code ?? e.message ?? String(err));
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return this.fail(hook, 'bad_answer', 'the answer is not JSON');
    }
    const parsed = parse(json);
    if (!parsed.ok) return this.fail(hook, 'bad_answer', parsed.why);
    return { ok: true, value: parsed.value };
  }

  private fail(hook: HookName, failure: HookFailure, why: string): HookResult<never> {
    this.line.write({ hook, failure, why }, 'hook call failed');
    return { ok: false, failure, retryAfterMs: this.retryAfter(Date.now()) };
  }
}

/** The subscribe hook's decisions a shard remembers, per (tenant, user, topic), for the time the backend gave; the oldest go first. */
export class DecisionCache {
  private readonly map = new Map<string, { readonly allow: boolean; readonly message: string | undefined; readonly until: number }>();

  constructor(private readonly size: number) {}

  get(key: string, now: number): { readonly allow: boolean; readonly message: string | undefined } | undefined {
    const hit = this.map.get(key);
    if (hit === undefined) return undefined;
    if (hit.until > now) return hit;
    this.map.delete(key);
    return undefined;
  }

  set(key: string, allow: boolean, message: string | undefined, cacheMs: number, now: number): void {
    if (cacheMs === 0 || this.size === 0) return;
    this.map.delete(key);
    if (this.map.size >= this.size) this.map.delete(this.map.keys().next().value!);
    this.map.set(key, { allow, message, until: now + cacheMs });
  }

  delete(key: string): void {
    this.map.delete(key);
  }

  get entries(): number {
    return this.map.size;
  }
}

/** A shard's hooks: the clients of the configured ones (null when not), the topics they cover, the subscribe cache. */
export interface ShardHooks {
  readonly connect: HookClient | null;
  readonly subscribe: HookClient | null;
  readonly publish: HookClient | null;
  /** WS_SUBSCRIBE_HOOK_TOPICS and WS_PUBLISH_HOOK_TOPICS, compiled; null with no such hook. */
  readonly subscribeTopics: Rights | null;
  readonly publishTopics: Rights | null;
  readonly cache: DecisionCache;
  /** Closes the keep-alive connections; calls still waiting fail (`error`). */
  close(): void;
}

export function shardHooks(cfg: Config, shared: SharedState, shard: number, registry: Registry, line: ThrottledLine,
  http: Http | null): ShardHooks {
  if (anyHook(cfg) && http === null) throw new Error('shardHooks: a hook URL is set and no undici client was given (hookHttp)');
  const stats = http !== null ? new HookStats(registry) : null;
  const client = (kind: 'connect' | 'subscribe' | 'publish', url: string | undefined): HookClient | null =>
    url === undefined ? null : new HookClient(kind, url, cfg, shared, stats!, http!, line, shard, life);
  const cache = new DecisionCache(cfg.subscribeCacheSize);
  const life = { closed: false };
  if (stats !== null && cfg.subscribeHookUrl !== undefined) {
    gaugeFrom(registry, 'sluice_hook_subscribe_cache_entries', 'Subscribe-hook decisions cached (all shards).', () => cache.entries);
  }
  return {
    connect: client('connect', cfg.connectHookUrl),
    subscribe: client('subscribe', cfg.subscribeHookUrl),
    publish: client('publish', cfg.publishHookUrl),
    subscribeTopics: cfg.subscribeHookTopics === undefined ? null : compileRights(cfg.subscribeHookTopics.split(',')),
    publishTopics: cfg.publishHookTopics === undefined ? null : compileRights(cfg.publishHookTopics.split(',')),
    cache,
    close: () => {
      life.closed = true;
      if (http !== null) void http.agent.destroy().catch(() => {});
    },
  };
}
