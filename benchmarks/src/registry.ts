// Every scenario once: its command, what `--help` says of it, which targets
// and repeats it takes, how its options become its configuration, how it
// runs, how its rows are rendered and which CI gates it carries. cli.ts and
// render.ts read this table; neither names a scenario.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TargetName } from './lib/server.ts';
import { BENCH_ROOT } from './lib/spawn.ts';
import { runPump, S1_DEFAULT, S2_DEFAULT } from './scenarios/pump.ts';
import { runFanout, S3_DEFAULT, type FanoutConfig } from './scenarios/fanout.ts';
import { type ConnectConfig, runConnect, S45_DEFAULT } from './scenarios/connect.ts';
import { runSlow, S6_DEFAULT } from './scenarios/slow.ts';
import { runDrain, S7_DEFAULT } from './scenarios/drain.ts';
import { runCrossNode, S8_DEFAULT } from './scenarios/crossnode.ts';
import { runStorm, S9_DEFAULT } from './scenarios/storm.ts';
import { runMetrics, S10_DEFAULT } from './scenarios/metrics.ts';
import { runRefresh, S11_DEFAULT } from './scenarios/refresh.ts';
import { runRevoke, S12_DEFAULT } from './scenarios/revoke.ts';
import { runLimits, S13_DEFAULT } from './scenarios/limits.ts';
import { runPresence, S14_DEFAULT, S14_QUICK } from './scenarios/presence.ts';
import { runHooks, S15_DEFAULT, S15_QUICK } from './scenarios/hooks.ts';
import { runCompression, S17_DEFAULT } from './scenarios/compression.ts';
import { runScale, S16_DEFAULT } from './scenarios/scale.ts';
import { renderScaleSvg, s16Table } from './report/scale.ts';
import type { RunOptions, Sample, ScenarioId } from './scenarios/common.ts';
import { GATES, type Gate } from './report/gates.ts';
import type { Row } from './report/summary.ts';
import {
  rateTable, renderDrainSvg, renderPresenceSvg, renderStormSvg, s10Table, s11Table, s12Table, s13Table, s14Table, s15Table, s17Table, s4Table, s5Table, s6Table, s7Table,
  s8Table, s9Table,
} from './report/render.ts';

/** The parsed command-line values (strings as given; flags as booleans). */
export type Values = Readonly<Record<string, string | boolean | undefined>>;

export interface ScenarioContext {
  /** The run's options, narrowed to this scenario's targets and repeats. */
  readonly opts: RunOptions;
  /** Whether its targets or repeats differ from the run's (then the log and the record name them). */
  readonly narrowed: boolean;
  readonly command: string;
  readonly v: Values;
  /** Run alone (its own command) rather than as part of `all` or `ci`. */
  readonly alone: boolean;
  readonly ci: boolean;
  /** The configuration the run used, by scenario, for the run record. */
  readonly used: Record<string, unknown>;
}

export interface View {
  readonly id: ScenarioId;
  readonly title: string;
  readonly table: (rs: readonly Row[], status: (r: Row) => string) => string;
}

export interface Scenario {
  readonly command: string;
  readonly usage: string;
  /** Targets when run alone without --targets (default: every target of `all`). */
  readonly defaultTargets?: readonly TargetName[];
  /** Of the run's targets, the ones this scenario runs against (none: skipped); default all of them. */
  readonly targets?: (run: readonly TargetName[], alone: boolean) => TargetName[];
  /** Repeats: `given` is --repeats; default the run's. */
  readonly repeats?: (given: number | undefined, alone: boolean) => number;
  readonly run: (ctx: ScenarioContext) => Promise<Sample[]>;
  readonly views: readonly View[];
  /** The CI gates it carries; `ci` runs the scenarios that carry one. */
  readonly gates?: readonly Gate[];
  /** Only run by its own command: `all` leaves it out (S16 takes most of the machine for many minutes). */
  readonly aloneOnly?: boolean;
}

/** A positive integer option, or undefined when not given; `zeroOk` lets 0 through. */
export function int(v: Values, name: string, zeroOk = false): number | undefined {
  const s = v[name];
  if (s === undefined || typeof s === 'boolean') return undefined;
  if (zeroOk && s === '0') return 0;
  if (!/^\d+$/.test(s) || Number(s) <= 0) throw new Error(`--${name} wants a positive integer, got ${JSON.stringify(s)}`);
  return Number(s);
}

/** The configuration fields whose options were given: `{ field: 'option' }`; a leading `0` on an option name lets 0 through. */
function given(v: Values, fields: Readonly<Record<string, string>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [field, opt] of Object.entries(fields)) {
    const n = opt.startsWith('0') ? int(v, opt.slice(1), true) : int(v, opt);
    if (n !== undefined) out[field] = n;
  }
  return out;
}

async function measure<C>(ctx: ScenarioContext, label: string, cfg: C, run: (opts: RunOptions, cfg: C) => Promise<Sample[]>): Promise<Sample[]> {
  const o = ctx.opts;
  ctx.opts.log(`${label}: ${JSON.stringify(cfg)}${ctx.narrowed ? ` targets ${o.targets.join(',')} repeats ${o.repeats}` : ''}`);
  ctx.used[label] = ctx.narrowed ? { ...cfg, repeats: o.repeats } : cfg;
  return run(o, cfg);
}

const PUMP = { procs: 'procs', depth: 'depth', sockets: 'sockets' };
const window = (ctx: ScenarioContext): { measureMs: number; warmupMs: number; ephemeral: boolean } => ({
  measureMs: int(ctx.v, 'measure-ms') ?? (ctx.ci ? 2000 : 3000), warmupMs: int(ctx.v, 'warmup-ms') ?? 1000, ephemeral: ctx.v['ephemeral'] === true,
});
const fanoutConfig = (ctx: ScenarioContext): FanoutConfig => ({
  ...S3_DEFAULT, ...window(ctx), ...given(ctx.v, { procs: 'procs', depth: 'depth', subscribers: 'subscribers', window: 'window' }),
});
/** The gateway alone: every Sluice target when run alone, Sluice (2 workers) in `all`. */
const sluiceOnly = (run: readonly TargetName[], alone: boolean): TargetName[] => run.filter((t) => (alone ? t.startsWith('sluice') : t === 'sluice'));
const withSluice = (run: readonly TargetName[], alone: boolean): TargetName[] => (alone || run.includes('sluice') ? ['sluice'] : []);
const DRAIN = { procs: 'procs', rate: 'rate', delayMs: '0delay-ms', concurrency: 'concurrency' };

function svg(ctx: ScenarioContext, file: string, text: string | undefined): void {
  if (text === undefined) return;
  writeFileSync(join(BENCH_ROOT, file), text);
  ctx.opts.log(`  wrote benchmarks/${file}`);
}

const gatesOf = (id: ScenarioId): Gate[] => GATES.filter((g) => g.scenario === id);

export const SCENARIOS: readonly Scenario[] = [
  {
    command: 's1',
    usage: 'S1 publish-ack throughput: every socket its own topic, --depth frames in flight',
    run: (ctx) => measure(ctx, 'S1', {
      ...S1_DEFAULT, ...window(ctx), ...given(ctx.v, PUMP), hashed: ctx.v['hashed'] === true,
      sizes: typeof ctx.v['sizes'] === 'string' ? ctx.v['sizes'].split(',').map((x) => int({ sizes: x }, 'sizes')!) : ctx.ci ? [32] : S1_DEFAULT.sizes,
    }, runPump),
    views: [{ id: 'S1', title: 'S1 publish-ack throughput', table: rateTable }],
    gates: gatesOf('S1'),
  },
  {
    command: 's2',
    usage: 'S2 latency, one frame in flight',
    run: (ctx) => measure(ctx, 'S2', { ...S2_DEFAULT, ...window(ctx), ...given(ctx.v, PUMP) }, runPump),
    views: [{ id: 'S2', title: 'S2 latency, one frame in flight', table: rateTable }],
  },
  {
    command: 's3',
    usage: 'S3 fan-out: one publisher, --subscribers on one topic, credit-bound',
    run: (ctx) => measure(ctx, 'S3', fanoutConfig(ctx), runFanout),
    views: [{ id: 'S3', title: 'S3 fan-out', table: rateTable }],
    gates: gatesOf('S3'),
  },
  {
    // One connect run measures both (`ci` gates both); `s4` or `s5` alone keeps one of them.
    command: 's4 | s5',
    usage: 'S4 idle memory (and again with each socket joined to two topics), S5 upgrade storm (one connect run; s4 and s5 alone keep one)',
    run: async (ctx) => {
      const which: ReadonlyArray<'S4' | 'S5'> = ctx.command === 's4' ? ['S4'] : ctx.command === 's5' ? ['S5'] : ['S4', 'S5'];
      const cfg: ConnectConfig = { ...S45_DEFAULT, which, ...given(ctx.v, { procs: 'procs', sockets: 'sockets', concurrency: 'concurrency' }) };
      const got = await measure(ctx, 'S4/S5', cfg, runConnect);
      // Issue 20's S4 variant: the same sockets, each joined to two topics (one shared, one its own).
      if (!which.includes('S4')) return got;
      return [...got, ...await measure(ctx, 'S4 topics', { ...cfg, which: ['S4'], topics: 2 }, runConnect)];
    },
    views: [{ id: 'S4', title: 'S4 idle memory', table: s4Table }, { id: 'S5', title: 'S5 upgrade storm', table: s5Table }],
    gates: [...gatesOf('S4'), ...gatesOf('S5')],
  },
  {
    command: 's6',
    usage: 'slow consumers: 1 publisher, healthy + stalled subscribers, RSS and healthy p99 per second, and the same without stalled ones;\n' +
      '             default targets sluice,ws, 1 repeat, 60 s each',
    defaultTargets: ['sluice', 'ws'],
    // Minutes per target: in `all` only Sluice (2 workers) and ws, once.
    targets: (run, alone) => (alone ? [...run] : run.filter((t) => t === 'sluice' || t === 'ws')),
    repeats: (n, alone) => (alone ? n ?? 1 : 1),
    run: (ctx) => measure(ctx, 'S6', {
      ...S6_DEFAULT,
      ...given(ctx.v, { seconds: 'seconds', healthy: 'healthy', stalled: 'stalled', size: 'size', rssLimitMiB: 'rss-limit-mib', depth: 'depth', procs: 'procs', window: '0window' }),
    }, runSlow),
    views: [{ id: 'S6', title: 'S6 slow consumers', table: s6Table }],
  },
  {
    command: 's7',
    usage: 'drain pacing: sluice (2 workers) with --sockets idle sockets (10000), SIGTERM, closes per second vs --rate (500)\n' +
      '             after --delay-ms (1000), retryAfterMs, readiness, exit code; writes results-s7.svg (also part of all)',
    targets: withSluice,
    // In `all`, --sockets means the S1/S2/S4 sockets: S7 keeps its defaults there.
    run: async (ctx) => {
      const got = await measure(ctx, 'S7', ctx.alone ? { ...S7_DEFAULT, ...given(ctx.v, { ...DRAIN, sockets: 'sockets' }) } : { ...S7_DEFAULT }, runDrain);
      svg(ctx, 'results-s7.svg', got[0]?.timeline !== undefined && got[0].timeline.length > 0 ? renderDrainSvg(got[0]) : undefined);
      return got;
    },
    views: [{ id: 'S7', title: 'S7 drain pacing', table: s7Table }],
  },
  {
    command: 's8',
    usage: 'cross-node fan-out: S3 on 1 node (embedded), 1 node on Redis and --nodes (2) nodes on one private\n' +
      '             redis-server; gateway and Redis CPU, Redis commands per event, added p99, publish-ack latency; default target sluice,\n' +
      '             2 repeats; --ack-replicas n: also the nodes with WS_REDIS_ACK_REPLICAS=n, the redis-server with n replicas;\n' +
      '             --node-workers w (1; 0: not): also the nodes with WS_WORKERS=w each; --embedded-workers e (4; 0: not): also one\n' +
      '             node, no Redis, WS_WORKERS=e',
    defaultTargets: ['sluice'],
    targets: sluiceOnly,
    repeats: (n, alone) => (alone ? n ?? 2 : 2),
    // S3's settings (the same options) and its own node count.
    run: (ctx) => {
      const cfg = {
        ...fanoutConfig(ctx), warmupEvents: S8_DEFAULT.warmupEvents, restMs: S8_DEFAULT.restMs, nodes: int(ctx.v, 'nodes') ?? S8_DEFAULT.nodes,
        ackReplicas: int(ctx.v, 'ack-replicas', true) ?? S8_DEFAULT.ackReplicas, nodeWorkers: int(ctx.v, 'node-workers', true) ?? S8_DEFAULT.nodeWorkers!,
        embeddedWorkers: int(ctx.v, 'embedded-workers', true) ?? S8_DEFAULT.embeddedWorkers!,
      };
      if (cfg.nodeWorkers > 16 || cfg.embeddedWorkers > 16) throw new Error('--node-workers and --embedded-workers want 0 to 16');
      if (cfg.nodes < 2) throw new Error('--nodes wants 2 or more: S8 already measures one node on Redis');
      if (cfg.ackReplicas > 16) throw new Error('--ack-replicas wants 0 to 16 (WS_REDIS_ACK_REPLICAS\'s range)');
      return measure(ctx, 'S8', cfg, runCrossNode);
    },
    views: [{ id: 'S8', title: 'S8 cross-node fan-out (cluster mode, one Redis)', table: s8Table }],
  },
  {
    command: 's9',
    usage: 'reconnect storm: --sockets (10000) clients in --procs (4) processes on node A, drained at --rate (10000)/s after\n' +
      '             --delay-ms (100); arrivals at node B per 100 ms until 99% are back, SDK clients then naive ws clients, each on\n' +
      '             fresh nodes; writes results-s9.svg (also part of all)',
    defaultTargets: ['sluice'],
    targets: withSluice,
    run: async (ctx) => {
      const cfg = ctx.alone ? { ...S9_DEFAULT, ...given(ctx.v, { ...DRAIN, clients: 'sockets' }) } : { ...S9_DEFAULT };
      const got = await measure(ctx, 'S9', ctx.alone && ctx.v['cost-only'] === true ? { ...cfg, budgets: [] } : cfg, runStorm);
      // A run of the refusal cost alone has no storm to chart: the committed chart stays.
      svg(ctx, 'results-s9.svg', got.some((x) => x.ok && x.variant !== 'refusal cost') ? renderStormSvg(got) : undefined);
      return got;
    },
    views: [{ id: 'S9', title: 'S9 reconnect storm (node A drained, arrivals at node B)', table: s9Table }],
  },
  {
    command: 's10',
    usage: '/metrics render time: sluice (2 workers) with 0, then --sockets (10000) idle sockets on --topics (4) topics, then\n' +
      '             with traffic (--rate (2) publishes/s per generator process, --admin-rate (1)/s on the admin API); --scrapes (100)\n' +
      '             sequential GETs and --bursts (5) of --burst (10) at once per phase; default 3 repeats (also part of all, once)',
    defaultTargets: ['sluice'],
    targets: sluiceOnly,
    repeats: (n, alone) => (alone ? n ?? 3 : 1),
    run: (ctx) => {
      const cfg = ctx.alone ? {
        ...S10_DEFAULT, ...given(ctx.v, {
          sockets: 'sockets', procs: 'procs', concurrency: 'concurrency', rate: 'rate', adminRate: '0admin-rate',
          scrapes: 'scrapes', bursts: '0bursts', burst: 'burst', topics: 'topics',
        }),
      } : { ...S10_DEFAULT };
      cfg.joins = Math.min(cfg.joins, cfg.topics);
      return measure(ctx, 'S10', cfg, runMetrics);
    },
    views: [{ id: 'S10', title: 'S10 /metrics render time (admin port, 0 and 10k sockets)', table: s10Table }],
  },
  {
    command: 's11',
    usage: 'refresh cost: WS_AUTH=jwt, --sockets (2000) upgrades with a token each, then --rounds (5) refreshes per socket with a new\n' +
      '             token each; server CPU per upgrade and per refresh on the same gateway, and per upgrade without auth; default 3 repeats\n' +
      '             (also part of all, once)',
    defaultTargets: ['sluice'],
    targets: sluiceOnly,
    repeats: (n, alone) => (alone ? n ?? 3 : 1),
    run: (ctx) => measure(ctx, 'S11', ctx.alone
      ? { ...S11_DEFAULT, ...given(ctx.v, { sockets: 'sockets', rounds: 'rounds', procs: 'procs', concurrency: 'concurrency' }) }
      : { ...S11_DEFAULT }, runRefresh),
    views: [{ id: 'S11', title: 'S11 refresh cost (WS_AUTH=jwt, a new token per upgrade and per refresh)', table: s11Table }],
  },
  {
    command: 's12',
    usage: 'revocation at scale: two nodes on one private redis-server, WS_AUTH=jwt, --sockets (10000) sockets of one user from --procs (4)\n' +
      '             processes (half on each node); one POST /v1/revoke to node A; request to last 4003 close; default 3 repeats (also part of all, once);\n' +
      '             --rst-at-close: each client tears its socket down as it reads the close (default: after the last close)',
    defaultTargets: ['sluice'],
    targets: sluiceOnly,
    repeats: (n, alone) => (alone ? n ?? 3 : 1),
    run: (ctx) => {
      const cfg = ctx.alone ? {
        ...S12_DEFAULT, ...given(ctx.v, { sockets: 'sockets', procs: 'procs', concurrency: 'concurrency' }), deferTeardown: ctx.v['rst-at-close'] !== true,
      } : { ...S12_DEFAULT };
      if (cfg.procs < 2) throw new Error('--procs wants 2 or more: one generator process per node at least');
      return measure(ctx, 'S12', cfg, runRevoke);
    },
    views: [{ id: 'S12', title: 'S12 revocation of one user with 10k sockets over two nodes', table: s12Table }],
  },
  {
    command: 's13',
    usage: 'S1 with the limits and revocations configured: S1 32 B on WS_AUTH=jwt without, then with WS_USER_MSG_LIMIT, WS_TENANT_CONNECT_LIMIT,\n' +
      '             WS_MAX_USER_SOCKETS (never reached) and --revocations (1000) revocations of other users; arms alternate, default 6 repeats\n' +
      '             (also part of all)',
    defaultTargets: ['sluice'],
    targets: sluiceOnly,
    repeats: (n, alone) => (alone ? n ?? 6 : 6),
    run: (ctx) => measure(ctx, 'S13', ctx.alone ? {
      ...S13_DEFAULT, ...window(ctx), ...given(ctx.v, { ...PUMP, revocations: '0revocations' }),
      sizes: typeof ctx.v['sizes'] === 'string' ? ctx.v['sizes'].split(',').map((x) => int({ sizes: x }, 'sizes')!) : S13_DEFAULT.sizes,
    } : { ...S13_DEFAULT }, runLimits),
    views: [{ id: 'S13', title: 'S13 S1 with limits and revocations configured (WS_AUTH=jwt both arms)', table: s13Table }],
  },
  {
    command: 's14',
    usage: 'presence at scale (issue 18\'s "S11"): two nodes on one private redis-server, WS_AUTH=jwt, --sockets (20000) users from --procs (4)\n' +
      '             processes (half on each node) join a plain topic, then one presence topic, at --rate (1000)/s; three churn phases of 10% of them;\n' +
      '             new sockets\' presence_state on A, B and a third node; SIGKILL of node B (WS_PRESENCE_TTL_MS --ttl-ms, 30000); then Socket.IO\n' +
      '             with @socket.io/redis-adapter on two nodes: the same room joins, fetchSockets() (--no-sio: without); --quick: 2000 sockets,\n' +
      '             short phases, a 4 s TTL; writes results-s14.svg; default 1 repeat, about 5 min (also part of all, once)',
    defaultTargets: ['sluice'],
    targets: sluiceOnly,
    repeats: (n, alone) => (alone ? n ?? 1 : 1),
    run: async (ctx) => {
      const base = ctx.alone && ctx.v['quick'] === true ? S14_QUICK : S14_DEFAULT;
      const cfg = ctx.alone ? {
        ...base, ...given(ctx.v, { sockets: 'sockets', procs: 'procs', concurrency: 'concurrency', joinRate: 'rate', ttlMs: 'ttl-ms' }),
        sio: ctx.v['no-sio'] !== true,
      } : { ...S14_DEFAULT };
      if (cfg.procs < 2) throw new Error('--procs wants 2 or more: one generator process per node at least');
      if (cfg.ttlMs < 1000) throw new Error('--ttl-ms wants 1000 or more (WS_PRESENCE_TTL_MS)');
      const got = await measure(ctx, 'S14', cfg, runPresence);
      svg(ctx, 'results-s14.svg', got.some((x) => x.scenario === 'S14' && (x.timeline?.length ?? 0) > 0) ? renderPresenceSvg(got) : undefined);
      return got;
    },
    views: [{ id: 'S14', title: 'S14 presence at scale (issue 18\'s "S11"): users over two nodes on one Redis, and Socket.IO fetchSockets()', table: s14Table }],
  },
  {
    command: 's15',
    usage: 'backend hooks (issue 19): --sockets (2000) upgrades on WS_AUTH=jwt, then on WS_AUTH=hook against a node:http backend in its own process\n' +
      '             (every user distinct); on those sockets --topics (5) joins each of hooked topics (room:*, cache cold), the same again after\n' +
      '             leaving them (cache warm), and of plain ones; then the hook storm again with the backend answering after --delay-ms (5; 0: not);\n' +
      '             gateway CPU per op, the backend\'s apart, its call counts; --quick: 500 sockets, 3 topics; default 3 repeats,\n' +
      '             about 1.5 min (also part of all)',
    defaultTargets: ['sluice'],
    targets: withSluice,
    repeats: (n, alone) => (alone ? n ?? 3 : 3),
    run: (ctx) => {
      const quick = ctx.alone && ctx.v['quick'] === true;
      const base = quick ? S15_QUICK : S15_DEFAULT;
      const cfg = ctx.alone ? {
        ...base, ...given(ctx.v, { sockets: 'sockets', procs: 'procs', concurrency: 'concurrency', topics: 'topics', delayMs: '0delay-ms' }),
      } : { ...S15_DEFAULT };
      return measure(ctx, 'S15', cfg, runHooks);
    },
    views: [{ id: 'S15', title: 'S15 backend hooks (issue 19): connect hook beside jwt, subscribe hook and its cache', table: s15Table }],
  },
  {
    command: 's17',
    usage: 'compression (issue 20): WS_COMPRESSION off, shared and dedicated, for price ticks and chat messages: --subscribers (100) ws clients\n' +
      '             offering permessage-deflate on one topic, one publisher, --events (1000) publishes --depth (4) in flight; gateway CPU and bytes\n' +
      '             on the wire per delivery; default 3 repeats, about 1.5 min (also part of all)',
    defaultTargets: ['sluice'],
    targets: withSluice,
    repeats: (n, alone) => (alone ? n ?? 3 : 3),
    run: (ctx) => measure(ctx, 'S17', ctx.alone ? { ...S17_DEFAULT, ...given(ctx.v, { subscribers: 'subscribers', events: 'events', depth: 'depth', warmup: 'warmup' }) } : { ...S17_DEFAULT },
      runCompression),
    views: [{ id: 'S17', title: 'S17 compression (issue 20): WS_COMPRESSION per delivery, price ticks and chat', table: s17Table }],
  },
  {
    command: 's16',
    usage: 'issue 20\'s "S12", 100,000 sockets on one box: --nodes (7) gateways on one private redis-server, --sockets (100000) from --procs (7)\n' +
      '             load processes over 8 loopback addresses, each socket on the big topic, a room of --room-size (10) and one of --feeds (1000) keyed\n' +
      '             feeds; --rates big,room,feed events/s (0.2,10,10) for --seconds (120) steady, then --ramp a,b (rates times a, b; 3), then a\n' +
      '             rolling restart of every node (--no-restart: none; WS_DRAIN_RATE --rate, 2000) with acknowledged publishes checked; writes\n' +
      '             results-s16.svg; only run alone (not part of all or ci), about 10 min at 100k',
    defaultTargets: ['sluice'],
    targets: withSluice,
    repeats: () => 1,
    aloneOnly: true,
    run: async (ctx) => {
      const list = (name: string): number[] | undefined => {
        const s = ctx.v[name];
        if (typeof s !== 'string') return undefined;
        return s.split(',').map((x) => {
          const n = Number(x);
          if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} wants numbers, got ${JSON.stringify(s)}`);
          return n;
        });
      };
      const r = list('rates');
      if (r !== undefined && r.length !== 3) throw new Error('--rates wants three numbers: big,room,feed (events per second)');
      const cfg = {
        ...S16_DEFAULT,
        ...given(ctx.v, { sockets: 'sockets', nodes: 'nodes', procs: 'procs', roomSize: 'room-size', feeds: 'feeds', steadyS: 'seconds', size: 'size',
          drainRate: 'rate', concurrency: 'concurrency' }),
        ...(r !== undefined ? { rates: { big: r[0]!, room: r[1]!, feed: r[2]! } } : {}),
        ramp: list('ramp') ?? S16_DEFAULT.ramp,
        restart: ctx.v['no-restart'] !== true,
      };
      if (cfg.nodes < 2) throw new Error('--nodes wants 2 or more: the rolling restart moves sockets between nodes');
      const got = await measure(ctx, 'S16', cfg, runScale);
      svg(ctx, 'results-s16.svg', got[0]?.ok === true || (got[0]?.timeline?.length ?? 0) > 0 ? renderScaleSvg(got[0]!) : undefined);
      return got;
    },
    views: [{ id: 'S16', title: 'S16 100,000 sockets on one box (issue 20\'s "S12"): nodes on one Redis, big topic, rooms, keyed feeds, rolling restart', table: s16Table }],
  },
];

/** The scenario a command names (`s4` and `s5` share one). */
export function scenarioOf(command: string): Scenario | undefined {
  return SCENARIOS.find((s) => s.command.split(' | ').includes(command));
}
