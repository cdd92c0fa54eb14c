// The system programs and files the tests run for real, in one table: what
// shows each is there, the Debian package that provides it, and who uses it.
// tools/test.mjs installs the missing packages from it; the tests call
// requireSystemDep() before they start a binary, so that one that is missing
// fails at once with the package to install instead of a time-out.
//
// Plain Node ESM with no dependencies (tools/test.mjs loads it before
// anything is installed); its types are in system-deps.d.mts.
//
// A binary is looked up in PATH (no process is spawned), then in the sbin
// directories, which a non-root user's PATH on Debian lacks (haproxy is
// /usr/sbin/haproxy). A file is checked at its fixed path. SLUICE_DEP_<NAME>
// (the name upper-cased, other characters as `_`: SLUICE_DEP_REDIS_SERVER,
// SLUICE_DEP_CHROMIUM, SLUICE_DEP_LIBJEMALLOC_SO_2) replaces the lookup with
// that one path, to use a build of one's own or to check what a test does
// when the thing is missing.
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';

/** The multiarch directory of this process's architecture (a preloaded library must match it). */
const MULTIARCH = { x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' }[process.arch] ?? `${process.arch}-linux-gnu`;

/**
 * name: what a test asks for; bin: looked up in PATH, or paths: the files that
 * show it is there (the first that exists is used); pkg: the Debian package;
 * usedBy: the code that needs it; optional: tools/test.mjs does not install it.
 */
export const SYSTEM_DEPS = Object.freeze([
  { name: 'redis-server', bin: 'redis-server', pkg: 'redis-server',
    usedBy: 'packages/redis/src/testing.ts: private Redis servers of the cluster-mode tests (packages/redis, apps/gateway cluster, limits-cluster, redis-faults, alerts, ...), benchmark S8, chaos' },
  { name: 'redis-cli', bin: 'redis-cli', pkg: 'redis-server',
    usedBy: 'packages/redis/src/testing.ts: `redis-cli --cluster create` and RedisServer.cli()' },
  { name: 'prometheus', bin: 'prometheus', pkg: 'prometheus',
    usedBy: 'apps/gateway/test/prometheus.test.ts: a real Prometheus scraping two gateways' },
  { name: 'promtool', bin: 'promtool', pkg: 'prometheus',
    usedBy: 'apps/gateway/test/alerts.test.ts: promtool check rules / test rules / check config' },
  { name: 'haproxy', bin: 'haproxy', pkg: 'haproxy',
    usedBy: 'benchmarks/chaos/haproxy.ts: the load balancers of `pnpm chaos:ci`; benchmarks/test/chaos.test.ts runs haproxy -c on the generated configuration' },
  { name: 'chromium', paths: ['/usr/bin/chromium'], pkg: 'chromium',
    usedBy: 'packages/client/test/browser.test.ts: the SDK in headless Chromium, driven by playwright-core' },
  { name: 'libjemalloc.so.2', paths: [`/usr/lib/${MULTIARCH}/libjemalloc.so.2`], pkg: 'libjemalloc2',
    usedBy: 'apps/gateway/test/async-upgrade.test.ts: a gateway with jemalloc preloaded (LD_PRELOAD)' },
  { name: 'ip', bin: 'ip', pkg: 'iproute2',
    usedBy: 'benchmarks/chaos/netfault.ts: network namespaces and veth pairs for the partition and slow-link faults (benchmarks/test/netfault.test.ts)' },
  { name: 'tc', bin: 'tc', pkg: 'iproute2',
    usedBy: 'benchmarks/chaos/netfault.ts: the filters that drop, lose and detour a port\'s packets' },
  { name: 'git', bin: 'git', pkg: 'git', optional: true,
    usedBy: 'benchmarks/src/cli.ts and benchmarks/chaos/main.ts stamp results with the commit (without git: "unknown"); no test needs it' },
]);

const SBIN = ['/usr/local/sbin', '/usr/sbin', '/sbin'];

/** SLUICE_DEP_REDIS_SERVER for redis-server, and so on. */
export function overrideVar(name) {
  return `SLUICE_DEP_${name.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`;
}

function entry(name) {
  const dep = SYSTEM_DEPS.find((d) => d.name === name);
  if (dep === undefined) throw new Error(`system-deps: no entry named ${name} (known: ${SYSTEM_DEPS.map((d) => d.name).join(', ')})`);
  return dep;
}

function isFile(path, mode) {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, mode);
    return true;
  } catch {
    return false;
  }
}

/** The absolute path of the executable `bin` in env.PATH, or undefined. */
export function findInPath(bin, env = process.env) {
  return (env.PATH ?? '').split(delimiter).filter((d) => d !== '' && isAbsolute(d)).map((d) => join(d, bin))
    .find((p) => isFile(p, constants.X_OK));
}

/** Where the lookup of `dep` looks, in order, and whether what it finds must be executable. */
function candidates(dep, env = process.env) {
  const forced = env[overrideVar(dep.name)];
  const executable = dep.bin !== undefined || dep.name === 'chromium';
  if (forced !== undefined && forced !== '') return { where: [forced], executable, forced };
  if (dep.paths !== undefined) return { where: dep.paths, executable };
  const dirs = (env.PATH ?? '').split(delimiter).filter((d) => d !== '' && isAbsolute(d));
  for (const d of SBIN) if (!dirs.includes(d)) dirs.push(d);
  return { where: dirs.map((d) => join(d, dep.bin)), executable };
}

/** The absolute path of `name` (an entry of SYSTEM_DEPS), or undefined when it is not installed. */
export function findSystemDep(name, env = process.env) {
  const { where, executable } = candidates(entry(name), env);
  return where.find((p) => isFile(p, executable ? constants.X_OK : constants.R_OK));
}

/**
 * The error a test fails with when `name` is missing: what is missing and the
 * Debian package to install. `why` replaces the account of where it was looked for.
 */
export function missingSystemDep(name, env = process.env, why = undefined) {
  const dep = entry(name);
  const { where, forced } = candidates(dep, env);
  const looked = why !== undefined ? why : forced !== undefined ? `${overrideVar(name)}=${forced} is not there`
    : dep.bin !== undefined ? `not found in PATH nor in ${SBIN.join(', ')}` : `no ${where.join(' or ')}`;
  const err = new Error(`${name} is not installed (${looked}): this test needs the Debian package ${dep.pkg} ` +
    `(apt-get install ${dep.pkg}; \`npm test\` installs it)`);
  err.code = 'SLUICE_SYSTEM_DEP_MISSING';
  err.pkg = dep.pkg;
  return err;
}

/** The absolute path of `name`; throws missingSystemDep(name) when it is not installed. */
export function requireSystemDep(name, env = process.env) {
  const path = findSystemDep(name, env);
  if (path === undefined) throw missingSystemDep(name, env);
  return path;
}

/**
 * For a spawn's 'error' event or a rejected execFile: ENOENT (the binary went
 * away, or a path that was never there) becomes missingSystemDep(name), with
 * the original as its cause; any other error is returned as it is.
 */
export function systemDepError(name, err) {
  if (err === null || typeof err !== 'object' || err.code !== 'ENOENT') return err;
  const missing = missingSystemDep(name, process.env, typeof err.message === 'string' ? err.message : 'ENOENT');
  missing.cause = err;
  return missing;
}

/** The entries that are not installed (optional ones too: filter on `optional` to leave them out). */
export function missingSystemDeps(env = process.env) {
  return SYSTEM_DEPS.filter((d) => findSystemDep(d.name, env) === undefined);
}
