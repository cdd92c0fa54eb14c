// Entry point: `node --import tsx src/cli.ts <all|ci|s1|s2|s3|s4|s5|s6|s7|s8|s9|s10|report> [options]`.
// See benchmarks/README.md for what each command runs and what the columns mean.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import { assertNativeUws } from './peers/uws.ts';
import { machineInfo } from './lib/proc.ts';
import { takeBenchLock } from './lib/lock.ts';
import { ALL_TARGETS, gatewayAvailable, KNOWN_TARGETS, type TargetName } from './lib/server.ts';
import { BENCH_ROOT, REPO_ROOT } from './lib/spawn.ts';
import { runPump, S1_DEFAULT, S2_DEFAULT, type PumpConfig } from './scenarios/pump.ts';
import { runFanout, S3_DEFAULT, type FanoutConfig } from './scenarios/fanout.ts';
import { runConnect, S45_DEFAULT, type ConnectConfig } from './scenarios/connect.ts';
import { runSlow, S6_DEFAULT, type SlowConfig } from './scenarios/slow.ts';
import { runDrain, S7_DEFAULT, type DrainConfig } from './scenarios/drain.ts';
import { runCrossNode, S8_DEFAULT, type CrossConfig } from './scenarios/crossnode.ts';
import { runStorm, S9_DEFAULT, type StormConfig } from './scenarios/storm.ts';
import { runMetrics, S10_DEFAULT, type MetricsConfig } from './scenarios/metrics.ts';
import type { RunOptions, Sample } from './scenarios/common.ts';
import { ratios, rows } from './report/summary.ts';
import { checkGates, checkGoals } from './report/gates.ts';
import { gatesTable, goalsTable, mergeRuns, methodSection, ratiosTable, renderDrainSvg, renderStormSvg, renderSvg, rowsTables, type RunRecord, type SluiceBuild } from './report/render.ts';

const USAGE = `usage: cli.ts <command> [options]
commands:
  all        S1, S2, S3, S4+S5 against every target, S6 against sluice and ws (1 repeat), S7, S8 against sluice (2 repeats), S9, S10 (1 repeat);
             writes runs/*.json, results.md, results.svg
  ci         short S1 (32 B), S3, S4 against sluice, uws, ws; exits 1 when a gate fails
  s1 | s2 | s3 | s4 | s5   one scenario alone (s4 and s5 share one connect run)
  s6         slow consumers: 1 publisher, healthy + stalled subscribers, RSS and healthy p99 per second,
             and the same without stalled ones; default targets sluice,ws, 1 repeat, 60 s each
  s7         drain pacing: sluice (2 workers) with --sockets idle sockets (10000), SIGTERM, closes per second vs --rate (500)
             after --delay-ms (1000), retryAfterMs, readiness, exit code; writes results-s7.svg (also part of all)
  s8         cross-node fan-out: S3 on 1 node (embedded), 1 node on Redis and --nodes (2) nodes on one private
             redis-server; gateway and Redis CPU, Redis commands per event, added p99; default target sluice, 2 repeats
  s9         reconnect storm: --sockets (10000) clients in --procs (4) processes on node A, drained at --rate (10000)/s after
             --delay-ms (100); arrivals at node B per 100 ms until 99% are back, SDK clients then naive ws clients, each on
             fresh nodes; writes results-s9.svg (also part of all)
  s10        /metrics render time: sluice (2 workers) with 0, then --sockets (10000) idle sockets on --topics (4) topics, then
             with traffic (--rate (2) publishes/s per generator process, --admin-rate (1)/s on the admin API); --scrapes (100)
             sequential GETs and --bursts (5) of --burst (10) at once per phase; default 3 repeats (also part of all, once)
  report <run.json> [more.json ...]   rewrite results.md and results.svg from a saved run; the scenarios of each later
             run replace the same scenarios of the earlier ones
options:
  --targets a,b      subset of ${KNOWN_TARGETS.join(',')} (sluice-traced: tracing on, only when named)
  --repeats n        repeats per target (interleaved)
  --measure-ms n     measurement window (S1-S3, S8)
  --warmup-ms n      warm-up before the window (S1-S3, S8)
  --procs n          load-generator processes (S3, S8: subscriber processes; S9: client processes)
  --sockets n        sockets (S1, S2, S4/S5, S7, S10), clients per kind (S9)
  --subscribers n    subscribers (S3, S8)
  --sizes a,b        payload sizes in bytes (S1)
  --depth n          frames in flight per socket (S1, S2) or acks in flight (S3, S8)
  --concurrency n    handshakes in flight per generator process (S4/S5, S7, S9)
  --window n         publishes the S3, S8 (S6) publisher may run ahead of the slowest (healthy) subscriber; S6: 0 = no credit
  --ephemeral        publish the ephemeral class instead of durable (S1-S3, S8)
  --seconds n        publishing time of each S6 run (default 60)
  --healthy n        healthy subscribers (S6, default 1000)
  --stalled n        stalled subscribers (S6, default 200)
  --size n           payload bytes (S6, default 300)
  --rss-limit-mib n  stop an S6 run when the server's RSS passes this (default 2048)
  --rate n           S7, S9: WS_DRAIN_RATE, closes per second for the node (default 500; S9: 10000)
  --delay-ms n       S7, S9: WS_DRAIN_DELAY_MS (default 1000; S9: 100)
  --nodes n          S8: gateway processes on the one redis-server (default 2)
  --scrapes n        S10: sequential GET /metrics per phase (default 100)
  --bursts n         S10: bursts of concurrent GETs per phase (default 5); --burst n: GETs per burst (default 10)
  --topics n         S10: topics (default 4); every socket joins 2 of them
  --admin-rate n     S10: admin-API publishes per second in the traffic phase (default 1); --rate: each generator's publisher (2)
  --no-report        (all) do not rewrite results.md / results.svg`;

interface Cli {
  command: string;
  positionals: string[];
  values: {
    targets?: string; repeats?: string; 'measure-ms'?: string; 'warmup-ms'?: string; procs?: string; sockets?: string;
    subscribers?: string; window?: string; sizes?: string; depth?: string; concurrency?: string; ephemeral?: boolean; 'no-report'?: boolean; help?: boolean;
    seconds?: string; healthy?: string; stalled?: string; size?: string; 'rss-limit-mib'?: string; rate?: string; 'delay-ms'?: string;
    nodes?: string; scrapes?: string; bursts?: string; burst?: string; topics?: string; 'admin-rate'?: string;
  };
}

function parse(): Cli {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      targets: { type: 'string' }, repeats: { type: 'string' }, 'measure-ms': { type: 'string' }, 'warmup-ms': { type: 'string' },
      procs: { type: 'string' }, sockets: { type: 'string' }, subscribers: { type: 'string' }, window: { type: 'string' }, sizes: { type: 'string' },
      depth: { type: 'string' }, concurrency: { type: 'string' }, ephemeral: { type: 'boolean' }, 'no-report': { type: 'boolean' },
      seconds: { type: 'string' }, healthy: { type: 'string' }, stalled: { type: 'string' }, size: { type: 'string' }, 'rss-limit-mib': { type: 'string' },
      rate: { type: 'string' }, 'delay-ms': { type: 'string' }, nodes: { type: 'string' },
      scrapes: { type: 'string' }, bursts: { type: 'string' }, burst: { type: 'string' }, topics: { type: 'string' }, 'admin-rate': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command = '', ...rest] = positionals;
  return { command, positionals: rest, values };
}

function int(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) <= 0) throw new Error(`--${name} wants a positive integer, got ${JSON.stringify(v)}`);
  return Number(v);
}

function targetsOf(v: string | undefined, fallback: readonly TargetName[]): TargetName[] {
  if (v === undefined) return [...fallback];
  const list = v.split(',').map((s) => s.trim()).filter((s) => s !== '');
  for (const t of list) if (!(KNOWN_TARGETS as readonly string[]).includes(t)) throw new Error(`unknown target ${t}; known: ${KNOWN_TARGETS.join(', ')}`);
  return list as TargetName[];
}

function sluiceBuild(): SluiceBuild {
  try {
    const commit = execFileSync('git', ['-C', REPO_ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['-C', REPO_ROOT, 'status', '--porcelain', '--', 'apps', 'packages'], { encoding: 'utf8' });
    return { commit, dirtyFiles: dirty.split('\n').filter((l) => l.trim() !== '').length };
  } catch {
    return { commit: 'unknown', dirtyFiles: 0 };
  }
}

/** The build a run measured; flagged when commits or edits landed while it ran (tsx reads sources at each server start). */
function sameBuild(a: SluiceBuild, b: SluiceBuild): SluiceBuild {
  if (a.commit === b.commit && a.dirtyFiles === b.dirtyFiles) return a;
  return { ...a, changedDuringRun: `${b.commit}${b.dirtyFiles > 0 ? ` + ${b.dirtyFiles} uncommitted files` : ''} at the end` };
}

const MARK_START = '<!-- generated: start (pnpm bench rewrites everything between these markers) -->';
const MARK_END = '<!-- generated: end -->';

function writeReport(rec: RunRecord, runFile: string): void {
  const generated = [
    MARK_START,
    '## Method',
    '',
    methodSection(rec),
    '',
    '## Ratios Sluice/peer',
    '',
    'Per server-CPU-second where the metric is a rate; a cost ratio (memory, CPU per upgrade, p99) below 1 means Sluice spends less.',
    '',
    ratiosTable(rec.ratios),
    '',
    '![Sluice vs peers](results.svg)',
    '',
    ...(rec.samples.some((x) => x.scenario === 'S9' && x.ok) ? ['S9 reconnect storm: [results-s9.svg](results-s9.svg).', ''] : []),
    '## Goals',
    '',
    goalsTable(rec.goals),
    '',
    '## Medians per target',
    '',
    rowsTables(rec.rows),
    '',
    `Source: \`${runFile}\`.`,
    MARK_END,
  ].join('\n');
  const path = join(BENCH_ROOT, 'results.md');
  let text: string;
  if (existsSync(path)) {
    const old = readFileSync(path, 'utf8');
    const a = old.indexOf(MARK_START);
    const b = old.indexOf(MARK_END);
    text = a !== -1 && b > a ? old.slice(0, a) + generated + old.slice(b + MARK_END.length) : `${old.trimEnd()}\n\n${generated}\n`;
  } else {
    text = `# Sluice benchmark results\n\n${generated}\n`;
  }
  writeFileSync(path, text);
  writeFileSync(join(BENCH_ROOT, 'results.svg'), renderSvg(rec));
  if (rec.samples.some((x) => x.scenario === 'S9' && x.ok)) writeFileSync(join(BENCH_ROOT, 'results-s9.svg'), renderStormSvg(rec.samples));
}

async function main(): Promise<number> {
  const cli = parse();
  if (cli.values.help === true || cli.command === '') { process.stdout.write(`${USAGE}\n`); return cli.command === '' ? 2 : 0; }
  const v = cli.values;

  if (cli.command === 'report') {
    const [file, ...more] = cli.positionals;
    if (file === undefined) throw new Error('report wants a run JSON file');
    const rec = mergeRuns(JSON.parse(readFileSync(file, 'utf8')) as RunRecord,
      more.map((f) => ({ file: `benchmarks/runs/${basename(f)}`, rec: JSON.parse(readFileSync(f, 'utf8')) as RunRecord })));
    writeReport(rec, [file, ...more].map((f) => `benchmarks/runs/${basename(f)}`).join('`, `'));
    process.stdout.write(`rewrote results.md and results.svg from ${[file, ...more].join(', ')}\n`);
    return 0;
  }

  assertNativeUws();
  const isCi = cli.command === 'ci';
  const scenarios = isCi ? ['s1', 's3', 's4'] : cli.command === 'all' ? ['s1', 's2', 's3', 's45', 's6', 's7', 's8', 's9', 's10'] : [cli.command];
  for (const s of scenarios) if (!['s1', 's2', 's3', 's4', 's5', 's45', 's6', 's7', 's8', 's9', 's10'].includes(s)) throw new Error(`unknown command ${cli.command}\n${USAGE}`);
  const defaultTargets: readonly TargetName[] = isCi ? ['sluice', 'uws', 'ws'] : cli.command === 's6' ? ['sluice', 'ws']
    : cli.command === 's8' || cli.command === 's9' || cli.command === 's10' ? ['sluice'] : ALL_TARGETS;
  let targets = targetsOf(v.targets, defaultTargets);
  if (!gatewayAvailable() && targets.some((t) => t.startsWith('sluice'))) {
    if (isCi) throw new Error('apps/gateway/src/main.ts does not exist: the CI gate needs the gateway');
    process.stderr.write('apps/gateway/src/main.ts does not exist yet: running the peers only\n');
    targets = targets.filter((t) => !t.startsWith('sluice'));
  }
  const repeats = int(v.repeats, 'repeats') ?? 3;
  const measureMs = int(v['measure-ms'], 'measure-ms') ?? (isCi ? 2000 : 3000);
  const warmupMs = int(v['warmup-ms'], 'warmup-ms') ?? 1000;
  const procs = int(v.procs, 'procs');
  const depth = int(v.depth, 'depth');
  const sockets = int(v.sockets, 'sockets');
  const ephemeral = v.ephemeral === true;

  const s1: PumpConfig = {
    ...S1_DEFAULT, measureMs, warmupMs, ephemeral,
    sizes: v.sizes !== undefined ? v.sizes.split(',').map((x) => int(x, 'sizes')!) : isCi ? [32] : S1_DEFAULT.sizes,
    ...(procs !== undefined ? { procs } : {}), ...(depth !== undefined ? { depth } : {}), ...(sockets !== undefined ? { sockets } : {}),
  };
  const s2: PumpConfig = {
    ...S2_DEFAULT, measureMs, warmupMs, ephemeral,
    ...(procs !== undefined ? { procs } : {}), ...(depth !== undefined ? { depth } : {}), ...(sockets !== undefined ? { sockets } : {}),
  };
  const s3: FanoutConfig = {
    ...S3_DEFAULT, measureMs, warmupMs, ephemeral,
    ...(procs !== undefined ? { procs } : {}), ...(depth !== undefined ? { depth } : {}),
    ...(int(v.subscribers, 'subscribers') !== undefined ? { subscribers: int(v.subscribers, 'subscribers')! } : {}),
    ...(int(v.window, 'window') !== undefined ? { window: int(v.window, 'window')! } : {}),
  };
  const which: ConnectConfig['which'] = cli.command === 's4' ? ['S4'] : cli.command === 's5' ? ['S5'] : ['S4', 'S5'];
  const s45: ConnectConfig = {
    ...S45_DEFAULT, which,
    ...(procs !== undefined ? { procs } : {}), ...(sockets !== undefined ? { sockets } : {}),
    ...(int(v.concurrency, 'concurrency') !== undefined ? { concurrency: int(v.concurrency, 'concurrency')! } : {}),
  };

  const s6: SlowConfig = {
    ...S6_DEFAULT,
    ...(int(v.seconds, 'seconds') !== undefined ? { seconds: int(v.seconds, 'seconds')! } : {}),
    ...(int(v.healthy, 'healthy') !== undefined ? { healthy: int(v.healthy, 'healthy')! } : {}),
    ...(int(v.stalled, 'stalled') !== undefined ? { stalled: int(v.stalled, 'stalled')! } : {}),
    ...(int(v.size, 'size') !== undefined ? { size: int(v.size, 'size')! } : {}),
    ...(int(v['rss-limit-mib'], 'rss-limit-mib') !== undefined ? { rssLimitMiB: int(v['rss-limit-mib'], 'rss-limit-mib')! } : {}),
    ...(depth !== undefined ? { depth } : {}), ...(procs !== undefined ? { procs } : {}),
    // --window 0: no credit, the publisher is bound by its acks only.
    ...(v.window === '0' ? { window: 0 } : int(v.window, 'window') !== undefined ? { window: int(v.window, 'window')! } : {}),
  };
  // S6 runs minutes per target: in `all` only Sluice (2 workers) and ws, once; alone, one repeat unless asked.
  const s6Opts = (base: RunOptions): RunOptions => ({
    ...base,
    targets: cli.command === 's6' ? base.targets : base.targets.filter((t) => t === 'sluice' || t === 'ws'),
    repeats: cli.command === 's6' ? (int(v.repeats, 'repeats') ?? 1) : 1,
  });

  // --delay-ms 0 is allowed (no delay); int() refuses 0.
  const delayMs = v['delay-ms'] === '0' ? 0 : int(v['delay-ms'], 'delay-ms');
  const s7: DrainConfig = {
    ...S7_DEFAULT,
    ...(sockets !== undefined ? { sockets } : {}), ...(procs !== undefined ? { procs } : {}),
    ...(int(v.rate, 'rate') !== undefined ? { rate: int(v.rate, 'rate')! } : {}),
    ...(delayMs !== undefined ? { delayMs } : {}),
    ...(int(v.concurrency, 'concurrency') !== undefined ? { concurrency: int(v.concurrency, 'concurrency')! } : {}),
  };
  if (cli.command === 's7' && !gatewayAvailable()) throw new Error('apps/gateway/src/main.ts does not exist: S7 needs the gateway');

  // S8 takes S3's settings (the same options) and its own node count.
  const s8: CrossConfig = { ...s3, warmupEvents: S8_DEFAULT.warmupEvents, nodes: int(v.nodes, 'nodes') ?? S8_DEFAULT.nodes };
  if (s8.nodes < 2) throw new Error('--nodes wants 2 or more: S8 already measures one node on Redis');
  if (cli.command === 's8' && !gatewayAvailable()) throw new Error('apps/gateway/src/main.ts does not exist: S8 needs the gateway');
  // Gateway targets only, 2 repeats unless asked (alone); in `all`, Sluice (2 workers) twice.
  const s8Opts = (base: RunOptions): RunOptions => ({
    ...base,
    targets: base.targets.filter((t) => (cli.command === 's8' ? t.startsWith('sluice') : t === 'sluice')),
    repeats: cli.command === 's8' ? (int(v.repeats, 'repeats') ?? 2) : 2,
  });

  // S9 takes the S7 options (clients as --sockets) when run alone; in `all`, its defaults.
  const s9: StormConfig = cli.command !== 's9' ? { ...S9_DEFAULT } : {
    ...S9_DEFAULT,
    ...(sockets !== undefined ? { clients: sockets } : {}), ...(procs !== undefined ? { procs } : {}),
    ...(int(v.rate, 'rate') !== undefined ? { rate: int(v.rate, 'rate')! } : {}),
    ...(delayMs !== undefined ? { delayMs } : {}),
    ...(int(v.concurrency, 'concurrency') !== undefined ? { concurrency: int(v.concurrency, 'concurrency')! } : {}),
  };
  if (cli.command === 's9' && !gatewayAvailable()) throw new Error('apps/gateway/src/main.ts does not exist: S9 needs the gateway');

  // S10 takes --sockets, --procs, --concurrency and --rate when run alone; in `all`, its defaults, once.
  const zeroOk = (x: string | undefined, name: string): number | undefined => (x === '0' ? 0 : int(x, name));
  const s10: MetricsConfig = cli.command !== 's10' ? { ...S10_DEFAULT } : {
    ...S10_DEFAULT,
    ...(sockets !== undefined ? { sockets } : {}), ...(procs !== undefined ? { procs } : {}),
    ...(int(v.concurrency, 'concurrency') !== undefined ? { concurrency: int(v.concurrency, 'concurrency')! } : {}),
    ...(int(v.rate, 'rate') !== undefined ? { rate: int(v.rate, 'rate')! } : {}),
    ...(zeroOk(v['admin-rate'], 'admin-rate') !== undefined ? { adminRate: zeroOk(v['admin-rate'], 'admin-rate')! } : {}),
    ...(int(v.scrapes, 'scrapes') !== undefined ? { scrapes: int(v.scrapes, 'scrapes')! } : {}),
    ...(zeroOk(v.bursts, 'bursts') !== undefined ? { bursts: zeroOk(v.bursts, 'bursts')! } : {}),
    ...(int(v.burst, 'burst') !== undefined ? { burst: int(v.burst, 'burst')! } : {}),
    ...(int(v.topics, 'topics') !== undefined ? { topics: int(v.topics, 'topics')! } : {}),
  };
  if (s10.joins > s10.topics) s10.joins = s10.topics;
  if (cli.command === 's10' && !gatewayAvailable()) throw new Error('apps/gateway/src/main.ts does not exist: S10 needs the gateway');
  const s10Opts = (base: RunOptions): RunOptions => ({
    ...base,
    targets: base.targets.filter((t) => (cli.command === 's10' ? t.startsWith('sluice') : t === 'sluice')),
    repeats: cli.command === 's10' ? (int(v.repeats, 'repeats') ?? 3) : 1,
  });

  const startedAt = new Date().toISOString();
  const buildAtStart = sluiceBuild();
  const t0 = performance.now();
  const log = (line: string): void => { process.stdout.write(`[${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${line}\n`); };
  const opts: RunOptions = { targets, repeats, log };
  const release = await takeBenchLock(join(BENCH_ROOT, 'runs', '.lock'), 15 * 60_000, log);
  const samples: Sample[] = [];
  const used: Record<string, unknown> = {};
  for (const s of scenarios) {
    if (s === 's1') { log(`S1: ${JSON.stringify(s1)}`); used['S1'] = s1; samples.push(...await runPump(opts, s1)); }
    if (s === 's2') { log(`S2: ${JSON.stringify(s2)}`); used['S2'] = s2; samples.push(...await runPump(opts, s2)); }
    if (s === 's3') { log(`S3: ${JSON.stringify(s3)}`); used['S3'] = s3; samples.push(...await runFanout(opts, s3)); }
    if (s === 's4' || s === 's5' || s === 's45') {
      const cfg = isCi ? { ...s45, which: ['S4'] as const } : s45;
      log(`S4/S5: ${JSON.stringify(cfg)}`);
      used['S4/S5'] = cfg;
      samples.push(...await runConnect(opts, cfg));
    }
    if (s === 's6') {
      const o = s6Opts(opts);
      log(`S6: ${JSON.stringify(s6)} targets ${o.targets.join(',')} repeats ${o.repeats}`);
      used['S6'] = s6;
      samples.push(...await runSlow(o, s6));
    }
    if (s === 's7' && gatewayAvailable() && (cli.command === 's7' || targets.includes('sluice'))) {
      // In `all`, --sockets means the S1/S2/S4 sockets: S7 keeps its default of 10k there.
      const cfg = cli.command === 's7' ? s7 : { ...S7_DEFAULT };
      log(`S7: ${JSON.stringify(cfg)}`);
      used['S7'] = cfg;
      const got = await runDrain(opts, cfg);
      samples.push(...got);
      const drain = got[0];
      if (drain?.timeline !== undefined && drain.timeline.length > 0) {
        writeFileSync(join(BENCH_ROOT, 'results-s7.svg'), renderDrainSvg(drain));
        log('  wrote benchmarks/results-s7.svg');
      }
    }
    if (s === 's8' && gatewayAvailable() && s8Opts(opts).targets.length > 0) {
      const o = s8Opts(opts);
      log(`S8: ${JSON.stringify(s8)} targets ${o.targets.join(',')} repeats ${o.repeats}`);
      used['S8'] = { ...s8, repeats: o.repeats };
      samples.push(...await runCrossNode(o, s8));
    }
    if (s === 's9' && gatewayAvailable() && (cli.command === 's9' || targets.includes('sluice'))) {
      log(`S9: ${JSON.stringify(s9)}`);
      used['S9'] = s9;
      const got = await runStorm(opts, s9);
      samples.push(...got);
      if (got.some((x) => x.ok)) {
        writeFileSync(join(BENCH_ROOT, 'results-s9.svg'), renderStormSvg(got));
        log('  wrote benchmarks/results-s9.svg');
      }
    }
    if (s === 's10' && gatewayAvailable() && s10Opts(opts).targets.length > 0) {
      const o = s10Opts(opts);
      log(`S10: ${JSON.stringify(s10)} targets ${o.targets.join(',')} repeats ${o.repeats}`);
      used['S10'] = { ...s10, repeats: o.repeats };
      samples.push(...await runMetrics(o, s10));
    }
  }

  release();
  const rowsList = rows(samples);
  const ratiosList = ratios(samples);
  const rec: RunRecord = {
    command: cli.command,
    startedAt,
    finishedAt: new Date().toISOString(),
    machine: machineInfo(),
    sluiceBuild: sameBuild(buildAtStart, sluiceBuild()),
    config: { targets, repeats, scenarios: used },
    samples,
    rows: rowsList,
    ratios: ratiosList,
    goals: checkGoals(rowsList, ratiosList, samples),
  };
  if (isCi) rec.gates = checkGates(ratiosList);

  const runsDir = join(BENCH_ROOT, 'runs');
  mkdirSync(runsDir, { recursive: true });
  const runFile = join(runsDir, `${startedAt.replace(/[:.]/g, '-')}-${cli.command}.json`);
  writeFileSync(runFile, `${JSON.stringify(rec, null, 1)}\n`);

  const out = [
    '', rowsTables(rowsList), '', '### Ratios Sluice/peer', '', ratiosTable(ratiosList), '', '### Goals', '', goalsTable(rec.goals), '',
  ];
  if (rec.gates !== undefined) out.push('### CI gates', '', gatesTable(rec.gates), '');
  out.push(`run record: ${runFile}`, `took ${((performance.now() - t0) / 1000).toFixed(0)} s`, '');
  process.stdout.write(out.join('\n'));

  if (cli.command === 'all' && v['no-report'] !== true) {
    writeReport(rec, `benchmarks/runs/${basename(runFile)}`);
    process.stdout.write('rewrote benchmarks/results.md and benchmarks/results.svg\n');
  }
  if (rec.gates !== undefined) {
    const failed = rec.gates.filter((g) => !g.pass);
    if (failed.length > 0) {
      process.stdout.write(`CI gate FAILED: ${failed.map((g) => `${g.gate.scenario} ${g.gate.variant} measured ${g.measured.toFixed(2)}x, gate ${g.gate.kind === 'min' ? '>=' : '<='} ${g.gate.value}x`).join('; ')}\n`);
      return 1;
    }
    process.stdout.write('CI gates passed\n');
  }
  return 0;
}

main().then(
  (code) => { process.exitCode = code; },
  (err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    // A run that could not measure is not a gate verdict, but CI must still see it fail.
    process.exitCode = 1;
  },
);
