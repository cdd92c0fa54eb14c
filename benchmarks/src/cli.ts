// Entry point: `node --import tsx src/cli.ts <all|ci|s1|s2|s3|s4|s5|s6|s7|s8|s9|s10|s11|s12|s13|s14|s15|s17|report> [options]`.
// See benchmarks/README.md for what each command runs and what the columns mean.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import { assertNativeUws } from './peers/uws.ts';
import { machineInfo } from './lib/proc.ts';
import { takeBenchLock } from './lib/lock.ts';
import { ALL_TARGETS, KNOWN_TARGETS, runsFromSource, staleBuild, type TargetName } from './lib/server.ts';
import { BENCH_ROOT, REPO_ROOT } from './lib/spawn.ts';
import type { RunOptions, Sample } from './scenarios/common.ts';
import { int, scenarioOf, SCENARIOS } from './registry.ts';
import { ratios, rows } from './report/summary.ts';
import { checkGates, checkGoals } from './report/gates.ts';
import { gatesTable, goalsTable, mergeRuns, methodSection, ratiosTable, renderStormSvg, renderSvg, rowsTables, type RunRecord, type SluiceBuild } from './report/render.ts';

const USAGE = `usage: cli.ts <command> [options]
commands:
  all        every scenario below but S16 in this order (S6 against sluice and ws, S8 twice, S9, S10, S11, S12, S14 once, S15 and S17 3 times);
             writes runs/*.json, results.md, results.svg
  ci         short ${SCENARIOS.filter((x) => x.gates !== undefined).map((x) => x.command.split(' | ')[0]).join(', ')} against sluice and raw uWS; exits 1 when a gate fails
${SCENARIOS.map((x) => `  ${x.command.padEnd(9)}  ${x.usage}`).join('\n')}
  report <run.json> [more.json ...]   rewrite results.md and results.svg from a saved run; the scenarios of each later
             run replace the same scenarios of the earlier ones
options:
  --targets a,b      subset of ${KNOWN_TARGETS.join(',')} (sluice-traced: tracing on, only when named)
  --repeats n        repeats per target (interleaved)
  --measure-ms n     measurement window (S1-S3, S8)
  --warmup-ms n      warm-up before the window (S1-S3, S8)
  --procs n          load-generator processes (S3, S8: subscriber processes; S9: client processes; S11-S15)
  --sockets n        sockets (S1, S2, S4/S5, S7, S10-S14), clients per kind (S9)
  --subscribers n    subscribers (S3, S8; S17: ws clients, default 100)
  --sizes a,b        payload sizes in bytes (S1)
  --depth n          frames in flight per socket (S1, S2) or acks in flight (S3, S8)
  --concurrency n    handshakes in flight per generator process (S4/S5, S7, S9, S11, S12; S11: refreshes awaiting a reply too)
  --window n         publishes the S3, S8 (S6) publisher may run ahead of the slowest (healthy) subscriber; S6: 0 = no credit
  --ephemeral        publish the ephemeral class instead of durable (S1-S3, S8)
  --seconds n        publishing time of each S6 run (default 60)
  --healthy n        healthy subscribers (S6, default 1000)
  --stalled n        stalled subscribers (S6, default 200)
  --size n           payload bytes (S6, default 300)
  --rss-limit-mib n  stop an S6 run when the server's RSS passes this (default 2048)
  --rate n           S7, S9: WS_DRAIN_RATE, closes per second for the node (default 500; S9: 10000); S14: joins per second (1000)
  --delay-ms n       S7, S9: WS_DRAIN_DELAY_MS (default 1000; S9: 100); S15: the backend's delay per answer in variant (c) (5; 0: no (c))
  --nodes n          S8: gateway processes on the one redis-server (default 2)
  --ack-replicas n   S8: also measure the nodes with WS_REDIS_ACK_REPLICAS=n, the redis-server followed by n replicas (default 0: not)
  --node-workers w   S8: also measure the nodes with WS_WORKERS=w each (default 1: with 2 nodes as many shards in all as one node; 0: not)
  --embedded-workers e  S8: also measure one node without Redis with WS_WORKERS=e (default 4: as many shards as two nodes of 2; 0: not)
  --scrapes n        S10: sequential GET /metrics per phase (default 100)
  --bursts n         S10: bursts of concurrent GETs per phase (default 5); --burst n: GETs per burst (default 10)
  --topics n         S10: topics (default 4); every socket joins 2 of them; S15: topics each socket joins per variant (5)
  --admin-rate n     S10: admin-API publishes per second in the traffic phase (default 1); --rate: each generator's publisher (2)
  --rounds n         S11: refreshes per socket, each with a new token (default 5)
  --rst-at-close     S12: a client sends its RST as it reads its close frame (default: every RST after the last close)
  --revocations n    S13: revocations of other users posted to the limits arm before its run (default 1000; 0: none)
  --ttl-ms n         S14: WS_PRESENCE_TTL_MS of the nodes (default 30000), what bounds the SIGKILL phase; --rate: joins per second (1000)
  --events n         S17: timed publishes per variant (default 1000)
  --warmup n         S17: publishes before the timed ones (default 300)
  --quick            S14: 2000 sockets, 2 processes, shorter churn phases, a 4 s TTL (a smoke test, about a minute); S15: 500 sockets, 3 topics
  --no-sio           S14: without the Socket.IO comparison
  --cost-only        S9: only the refusal cost (Sluice and raw uWS, a 503 and an upgrade each), no storm
  --rates a,b,c      S16: big-topic, room and feed events per second (default 0.2,10,10); --seconds: the steady window (120)
  --ramp a,b         S16: after the steady window, 20 s at the rates times a, then b (default 3)
  --room-size n      S16: sockets per room (10); --feeds n: keyed feeds (1000); --rate: WS_DRAIN_RATE (2000)
  --no-restart       S16: without the rolling restart
  --no-report        (all) do not rewrite results.md / results.svg
  --hashed           S1: each socket's topic owned by the shard its hash names (about half the publishes cross threads): what a crossing costs
  --from-source      run the gateway from its sources under tsx (default: its build, dist/main.js, refused when older than a source file)`;

interface Cli {
  command: string;
  positionals: string[];
  values: {
    targets?: string; repeats?: string; 'measure-ms'?: string; 'warmup-ms'?: string; procs?: string; sockets?: string;
    subscribers?: string; window?: string; sizes?: string; depth?: string; concurrency?: string; ephemeral?: boolean; 'no-report'?: boolean; help?: boolean;
    seconds?: string; healthy?: string; stalled?: string; size?: string; 'rss-limit-mib'?: string; rate?: string; 'delay-ms'?: string;
    nodes?: string; 'ack-replicas'?: string; 'node-workers'?: string; 'embedded-workers'?: string; scrapes?: string; bursts?: string; burst?: string; topics?: string; 'admin-rate'?: string; rounds?: string; revocations?: string; 'rst-at-close'?: boolean;
    'ttl-ms'?: string; quick?: boolean; 'no-sio'?: boolean;
    rates?: string; ramp?: string; 'room-size'?: string; feeds?: string; 'no-restart'?: boolean; 'from-source'?: boolean; hashed?: boolean;
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
      rate: { type: 'string' }, 'delay-ms': { type: 'string' }, nodes: { type: 'string' }, 'ack-replicas': { type: 'string' }, 'node-workers': { type: 'string' }, 'embedded-workers': { type: 'string' },
      scrapes: { type: 'string' }, bursts: { type: 'string' }, burst: { type: 'string' }, topics: { type: 'string' }, 'admin-rate': { type: 'string' },
      rounds: { type: 'string' }, revocations: { type: 'string' }, 'rst-at-close': { type: 'boolean' },
      'ttl-ms': { type: 'string' }, quick: { type: 'boolean' }, 'no-sio': { type: 'boolean' }, events: { type: 'string' }, warmup: { type: 'string' },
      rates: { type: 'string' }, ramp: { type: 'string' }, 'room-size': { type: 'string' }, feeds: { type: 'string' }, 'no-restart': { type: 'boolean' },
      'from-source': { type: 'boolean' }, hashed: { type: 'boolean' }, 'cost-only': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command = '', ...rest] = positionals;
  return { command, positionals: rest, values };
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
    return { commit, dirtyFiles: dirty.split('\n').filter((l) => l.trim() !== '').length, runs: runsFromSource() ? 'source' : 'build' };
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
  if (v['from-source'] === true) process.env.SLUICE_BENCH_FROM_SOURCE = '1';
  const stale = runsFromSource() ? undefined : staleBuild(REPO_ROOT);
  if (stale !== undefined) throw new Error(stale);
  const isCi = cli.command === 'ci';
  const alone = scenarioOf(cli.command);
  if (!isCi && cli.command !== 'all' && alone === undefined) throw new Error(`unknown command ${cli.command}\n${USAGE}`);
  const scenarios = isCi ? SCENARIOS.filter((x) => x.gates !== undefined) : alone !== undefined ? [alone] : SCENARIOS.filter((x) => x.aloneOnly !== true);
  const targets = targetsOf(v.targets, isCi ? ['sluice', 'uws'] : alone?.defaultTargets ?? ALL_TARGETS);
  const given = int(v, 'repeats');
  const repeats = given ?? 3;
  const startedAt = new Date().toISOString();
  const buildAtStart = sluiceBuild();
  const t0 = performance.now();
  const log = (line: string): void => { process.stdout.write(`[${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${line}\n`); };
  const opts: RunOptions = { targets, repeats, log };
  const release = await takeBenchLock(join(BENCH_ROOT, 'runs', '.lock'), 15 * 60_000, log);
  const samples: Sample[] = [];
  const used: Record<string, unknown> = {};
  for (const sc of scenarios) {
    const narrowed = sc.targets !== undefined || sc.repeats !== undefined;
    const o: RunOptions = { ...opts, targets: sc.targets?.(targets, alone !== undefined) ?? targets, repeats: sc.repeats?.(given, alone !== undefined) ?? repeats };
    if (o.targets.length === 0) continue;
    samples.push(...await sc.run({ opts: o, narrowed, command: cli.command, v, alone: alone !== undefined, ci: isCi, used }));
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
  if (isCi) rec.gates = checkGates(ratiosList, scenarios.flatMap((x) => x.gates ?? []));

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
