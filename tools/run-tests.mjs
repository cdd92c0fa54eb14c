#!/usr/bin/env node
// Runs every test file of the workspace in one node:test run, so that the
// closing summary (# tests / # pass / # fail) covers the whole suite.
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const roots = ['packages', 'apps', 'benchmarks', 'tools'];
const files = [];
function walk(dir) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (/\.test\.(ts|mjs|js)$/.test(name) && /(^|\/)test\//.test(relative(root, p))) files.push(relative(root, p));
  }
}
for (const r of roots) { try { walk(join(root, r)); } catch (e) { if (e.code !== 'ENOENT') throw e; } }
// A filter selects the files whose path contains it; one that starts with `!` leaves out those whose path contains the rest.
const args = process.argv.slice(2);
const filter = args.filter((a) => !a.startsWith('!'));
const except = args.filter((a) => a.startsWith('!')).map((a) => a.slice(1));
const selected = (filter.length ? files.filter((f) => filter.some((s) => f.includes(s))) : files).filter((f) => !except.some((s) => f.includes(s)));
files.sort();
if (selected.length === 0) { console.error('no test files found'); process.exit(1); }
// One file at a time: the drain tests check pacing per 100 ms, and two
// gateways plus their clients on 2 cores would measure each other.
// TAP when the output is not a terminal, on every Node: Node 23 made spec
// the default everywhere, and .ci/run reads the TAP summary (# pass N).
const reporter = process.stdout.isTTY ? [] : ['--test-reporter=tap'];
// A file that hangs (a redis-server or gateway a failed hook started, left
// alive, holds its process open) fails after --test-timeout, which node:test
// applies to each file as a whole (far above any file's time here), instead
// of holding the run, and CI, until it is killed; the kits then kill their
// children (see their SIGTERM handler). Not
// --test-force-exit: it may end a file before all its tests ran (suspected
// when one CI run counted 749 tests on Node 24 against 759 on Node 20).
const timeoutMs = Number(process.env.SLUICE_TEST_TIMEOUT_MS ?? 600_000);
const res = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=1', `--test-timeout=${timeoutMs}`, ...reporter, ...selected], { cwd: root, stdio: 'inherit' });
process.exit(res.status ?? 1);
