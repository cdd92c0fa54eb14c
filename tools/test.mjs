#!/usr/bin/env node
// The README's test command (`npm test`, or `pnpm test`), from a fresh
// Debian 12 machine with only Node and npm to a finished test run:
//   1. system packages: the Debian packages of tools/system-deps.mjs that are
//      missing are installed with apt-get (as root, or through `sudo -n`);
//      when that cannot be done (or SLUICE_NO_APT=1), one message names them
//      and the command to install them, and the run goes on (the tests that
//      need them fail at once, naming the package);
//   2. pnpm: the pnpm 10 on PATH, else the root package.json's packageManager
//      version from the npm registry into node_modules/.cache/sluice-pnpm
//      (no root needed; corepack's signature check fails against this
//      registry); then `pnpm install --frozen-lockfile`;
//   3. `pnpm build`, then `pnpm exec turbo run lint typecheck`;
//   4. `node tools/run-tests.mjs <args>` (arguments pass through:
//      `npm test -- packages/core`).
// Each step stops the run at its first failure, with its exit code.
// Plain Node with no dependencies: nothing is installed when it starts.
import { spawnSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { readFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SYSTEM_DEPS, findInPath, findSystemDep, missingSystemDeps } from './system-deps.mjs';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const testArgs = process.argv.slice(2);
const env = { ...process.env };

const seconds = (t0) => `${((performance.now() - t0) / 1000).toFixed(1)} s`;

/** Runs `argv` with inherited stdio; returns its exit code (1 for a signal or a failure to start). */
function run(argv, opts = {}) {
  const r = spawnSync(argv[0], argv.slice(1), { cwd: root, stdio: 'inherit', env, ...opts });
  if (r.error !== undefined) console.error(`!! ${argv[0]}: ${r.error.message}`);
  if (r.signal !== null) console.error(`!! ${argv.join(' ')}: killed by ${r.signal}`);
  return r.status ?? 1;
}

/** Runs `argv` with its stdout held back (dpkg's progress), shown only when it fails; returns its exit code. */
function quiet(argv) {
  const r = spawnSync(argv[0], argv.slice(1), { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], env, maxBuffer: 256 * 1024 * 1024 });
  if (r.status !== 0) {
    process.stdout.write(r.stdout?.toString().split('\n').slice(-60).join('\n') ?? '');
    console.error(`!! ${argv.join(' ')}: ${r.error?.message ?? (r.signal !== null ? `killed by ${r.signal}` : `exit ${r.status}`)}`);
  }
  return r.status ?? 1;
}

/** Runs `argv` quietly; its stdout, or undefined when it failed. */
function output(argv, opts = {}) {
  const r = spawnSync(argv[0], argv.slice(1), { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env, timeout: 30_000, ...opts });
  return r.status === 0 ? `${r.stdout}${r.stderr}` : undefined;
}

/** One step: `== name` before, its duration after; exits with the step's code when it fails. */
function step(name, fn) {
  console.log(`== ${name}`);
  const t0 = performance.now();
  const code = fn() ?? 0;
  if (code !== 0) {
    console.log(`== ${name}: failed (exit ${code}) after ${seconds(t0)}`);
    process.exit(code);
  }
  console.log(`== ${name}: ${seconds(t0)}`);
}

const inPath = (bin) => findInPath(bin, env);

// --- 1. system packages ----------------------------------------------------------

function missingPackages() {
  const missing = missingSystemDeps(env).filter((d) => d.optional !== true);
  return { missing, pkgs: [...new Set(missing.map((d) => d.pkg))] };
}

/** How to run apt-get here: [] as root, ['sudo', '-n'] with password-less sudo; or why not. */
function aptPrefix() {
  if (env.SLUICE_NO_APT !== undefined && env.SLUICE_NO_APT !== '' && env.SLUICE_NO_APT !== '0') return { why: 'SLUICE_NO_APT is set' };
  if (inPath('apt-get') === undefined) return { why: 'no apt-get on this machine' };
  if (process.getuid?.() === 0) return { prefix: [] };
  if (inPath('sudo') !== undefined && output(['sudo', '-n', 'true']) !== undefined) return { prefix: ['sudo', '-n'] };
  return { why: 'not root, and no sudo without a password' };
}

function systemPackages() {
  let { missing, pkgs } = missingPackages();
  if (pkgs.length > 0) {
    console.log(`missing: ${missing.map((d) => d.name).join(', ')} (Debian packages ${pkgs.join(' ')})`);
    const { prefix, why } = aptPrefix();
    let failed = why;
    if (prefix !== undefined) {
      const apt = [...prefix, 'env', 'DEBIAN_FRONTEND=noninteractive', 'apt-get'];
      console.log(`${[...prefix, 'apt-get'].join(' ')} update && ${[...prefix, 'apt-get'].join(' ')} install -y --no-install-recommends ${pkgs.join(' ')}`);
      const code = quiet([...apt, 'update', '-qq']) || quiet([...apt, 'install', '-y', '-qq', '--no-install-recommends', ...pkgs]);
      if (code !== 0) failed = `apt-get exited ${code}`;
      ({ missing, pkgs } = missingPackages());
      if (code === 0 && pkgs.length > 0) failed = 'apt-get installed them, but they are still not found';
    }
    if (pkgs.length > 0) {
      console.log(`!! not installed (${failed}): ${missing.map((d) => `${d.name} (Debian package ${d.pkg})`).join(', ')}`);
      console.log(`!! to install them: sudo apt-get update && sudo apt-get install -y --no-install-recommends ${pkgs.join(' ')}`);
      console.log('!! going on: the tests that need them fail, each naming its package');
    }
  }
  for (const d of SYSTEM_DEPS) {
    const path = findSystemDep(d.name, env);
    if (path === undefined) { console.log(`  ${d.name}: not installed${d.optional === true ? ' (optional)' : ''}`); continue; }
    const version = d.bin !== undefined || d.name === 'chromium' ? output([path, d.name === 'haproxy' ? '-v' : '--version'])?.split('\n')[0]?.trim() : undefined;
    console.log(`  ${d.name}: ${path}${version ? `: ${version}` : ''}`);
  }
  return 0;
}

// --- 2. pnpm ---------------------------------------------------------------------

/** The argv prefix that runs pnpm 10. */
let pnpm;

function bootstrapPnpm() {
  const onPath = inPath('pnpm');
  // COREPACK_ENABLE_DOWNLOAD_PROMPT=0: a corepack shim must not wait for an answer (it fails here, and is then passed over).
  const version = onPath === undefined ? undefined
    : output(['pnpm', '--version'], { env: { ...env, COREPACK_ENABLE_DOWNLOAD_PROMPT: '0' } })?.trim();
  if (version !== undefined && /^10\./.test(version)) {
    pnpm = ['pnpm'];
    console.log(`pnpm ${version} (${onPath})`);
    return 0;
  }
  if (onPath !== undefined) console.log(`pnpm on PATH (${onPath}) is ${version ?? 'not working'}: not pnpm 10, so the project's own is used`);
  const wanted = /^pnpm@(\d+\.\d+\.\d+)/.exec(JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).packageManager ?? '')?.[1] ?? '10';
  const prefix = join(root, 'node_modules', '.cache', 'sluice-pnpm');
  const cli = join(prefix, 'node_modules', 'pnpm', 'bin', 'pnpm.cjs');
  const have = (() => {
    try { return JSON.parse(readFileSync(join(prefix, 'node_modules', 'pnpm', 'package.json'), 'utf8')).version; } catch { return undefined; }
  })();
  if (have !== wanted) {
    console.log(`installing pnpm@${wanted} from the npm registry into ${prefix}`);
    const code = run(['npm', 'install', '--prefix', prefix, '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--loglevel=error', `pnpm@${wanted}`]);
    if (code !== 0) return code;
  }
  // turbo runs each package's script with `pnpm`, so the children find this one on PATH.
  env.PATH = `${join(prefix, 'node_modules', '.bin')}${delimiter}${env.PATH ?? ''}`;
  pnpm = [process.execPath, cli];
  console.log(`pnpm ${output([...pnpm, '--version'])?.trim() ?? '?'} (${cli})`);
  return 0;
}

// --- 4. the tests, with the hard open-file limit ---------------------------------

// The load tests need many open files: Node raises its own soft limit to the
// hard one as it starts, so run-tests.mjs and every process it spawns have it
// (checked: `ulimit -Sn 1024` before npm test still gives the tests 20000).
function runTests() {
  return run([process.execPath, join(root, 'tools', 'run-tests.mjs'), ...testArgs]);
}

console.log(`== node ${process.version}, in ${root}`);
const t0 = performance.now();
step('system packages', systemPackages);
step('pnpm', bootstrapPnpm);
step('pnpm install --frozen-lockfile', () => run([...pnpm, 'install', '--frozen-lockfile', '--config.confirmModulesPurge=false']));
step('pnpm build', () => run([...pnpm, 'build']));
step('lint and typecheck: pnpm exec turbo run lint typecheck', () => run([...pnpm, 'exec', 'turbo', 'run', 'lint', 'typecheck']));
step(`tests: node tools/run-tests.mjs${testArgs.length > 0 ? ` ${testArgs.join(' ')}` : ''}`, runTests);
console.log(`== npm test: ${seconds(t0)}`);
