/**
 * The uWebSockets.js builds Sluice runs on, and the one that loads here.
 *
 * uWebSockets.js is not on the npm registry under its own name; two
 * republishes of it are, and neither covers every supported runtime:
 *
 * - 20.30 (`@trufflesuite/uws-js-unofficial`) ships binaries for Node 16-20
 *   linked against glibc 2.27, and, when its binary does not load, silently
 *   falls back to a slow JavaScript server;
 * - 20.57 (`@btc-vision/uwebsockets.js`) ships binaries for Node 20, 22, 24
 *   and 25, all linked against glibc 2.38 (Debian 13, Ubuntu 24.04), so none
 *   loads on Debian 12.
 *
 * So the binary is loaded here directly, never through a package's wrapper
 * (no fallback can sneak in), from the first build that has one for this
 * platform, architecture and Node ABI and whose binary the dynamic loader
 * accepts. When none does, `loadUws` throws one error naming the Node
 * version, the glibc version, why each build failed and what to install.
 */
import { createRequire } from 'node:module';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type * as UwsModule from '@btc-vision/uwebsockets.js';

export type Uws = typeof UwsModule;
export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket, us_socket_context_t, WebSocket } from '@btc-vision/uwebsockets.js';
export { learnWsCork, probeCorkInPlace, type CorkProbe, upgradeCorked, useUpgradeCork } from './cork.ts';

export interface UwsBuildSpec {
  /** The upstream uWebSockets.js version: how logs, metrics and docs name the build. */
  readonly uws: string;
  /** The name it is installed under (a dependency of this package). */
  readonly module: string;
  /** What it is on the npm registry. */
  readonly npm: string;
  /** The Node ABIs (`process.versions.modules`) it ships binaries for, and the Node majors they are. */
  readonly abis: Readonly<Record<string, number>>;
  /** The oldest glibc its Linux binaries load on. */
  readonly glibc: string;
  /** Where the binary for a platform, architecture and ABI is, inside the package. */
  readonly binary: (platform: string, arch: string, abi: string) => string;
  /**
   * uWS's HTTP idle timeout, fixed at build time, in seconds: a connection
   * whose request is not complete by then is closed (bytes trickled in do
   * not extend it), checked on a 4 s timer. Measured: every silent,
   * byte-trickling and line-trickling handshake closed after 12 s on 20.30
   * and after 32 s on 20.57 (apps/gateway/test/slow-loris.test.ts).
   */
  readonly httpIdleTimeoutS: number;
}

/** In the order they are tried: the first that loads natively is used. */
export const UWS_BUILDS: readonly UwsBuildSpec[] = [
  {
    uws: '20.30.0',
    module: 'uWebSockets.js',
    npm: '@trufflesuite/uws-js-unofficial@20.30.0-unofficial.0',
    abis: { 93: 16, 108: 18, 115: 20 },
    glibc: '2.27',
    binary: (platform, arch, abi) => `binaries/uws_${platform}_${arch}_${abi}.node`,
    httpIdleTimeoutS: 10,
  },
  {
    uws: '20.57.0',
    module: '@btc-vision/uwebsockets.js',
    npm: '@btc-vision/uwebsockets.js@20.57.0',
    abis: { 115: 20, 127: 22, 137: 24, 141: 25 },
    glibc: '2.38',
    binary: (platform, arch, abi) => `uws_${platform}_${arch}_${abi}.node`,
    httpIdleTimeoutS: 30,
  },
];

/** Which build was loaded, on what: for the start's log line and `sluice_build_info`. */
export interface UwsBuild {
  /** The upstream uWS version, e.g. `20.57.0`. */
  readonly uws: string;
  readonly npm: string;
  /** The binary's path. */
  readonly path: string;
  readonly node: string;
  readonly abi: string;
  /** The C library's version, `undefined` where it is not glibc. */
  readonly glibc: string | undefined;
}

export interface Loaded {
  readonly uws: Uws;
  readonly build: UwsBuild;
}

/** The runtime a build is chosen for: the running process's unless a test says otherwise. */
export interface Runtime {
  readonly node: string;
  readonly platform: string;
  readonly arch: string;
  readonly abi: string;
  readonly glibc: string | undefined;
}

/** The running process's Node, platform, ABI and glibc. */
export function currentRuntime(): Runtime {
  return { node: process.version, platform: process.platform, arch: process.arch, abi: process.versions.modules, glibc: glibcVersion() };
}

let glibc: string | null | undefined;
/** The glibc version the process runs on (`undefined` on musl or another C library). */
export function glibcVersion(): string | undefined {
  if (glibc === undefined) {
    const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
    glibc = header?.glibcVersionRuntime ?? null;
  }
  return glibc ?? undefined;
}

/** Why one build did not load. */
export interface Attempt {
  readonly build: UwsBuildSpec;
  readonly reason: string;
}

export class NoNativeUwsError extends Error {
  constructor(readonly runtime: Runtime, readonly attempts: readonly Attempt[]) {
    super(noNativeUwsMessage(runtime, attempts));
    this.name = 'NoNativeUwsError';
  }
}

/** The refusal, as one message: the runtime, why each build failed, what would work. */
export function noNativeUwsMessage(rt: Runtime, attempts: readonly Attempt[]): string {
  const lines = [
    `no uWebSockets.js build loads natively on Node ${rt.node} (${rt.platform}-${rt.arch}, ABI ${rt.abi}) with ` +
      `${rt.glibc === undefined ? 'a C library that is not glibc' : `glibc ${rt.glibc}`}, and Sluice runs on nothing else:`,
    ...attempts.map((a) => `  - uWS ${a.build.uws} (${a.build.npm}): ${a.reason}`),
    'Supported: Node 20 on glibc 2.27 or newer (uWS 20.30); Node 22 or 24 on glibc 2.38 or newer (uWS 20.57: Debian 13, ' +
      'Ubuntu 24.04, the node:22-trixie and node:24-trixie images), on Linux x64 or arm64. ' + advice(rt) +
      'See docs/operations.md, "Runtimes".',
  ];
  return lines.join('\n');
}

/** What would work here, from the builds' own ABIs and glibc floors. */
function advice(rt: Runtime): string {
  const forThisNode = UWS_BUILDS.filter((b) => b.abis[rt.abi] !== undefined);
  if (forThisNode.length === 0) return `Install Node 20, 22 or 24 (this is Node ${rt.node}). `;
  const glibc = rt.glibc;
  if (glibc !== undefined && forThisNode.every((b) => compareVersions(glibc, b.glibc) < 0)) {
    return `With glibc ${glibc}, install Node 20 (20.19 or newer), or move to a system with glibc ${forThisNode[0]!.glibc} or newer. `;
  }
  return '';
}

/** Compares dotted version strings numerically: negative, 0 or positive. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

const require = createRequire(import.meta.url);

/** The folder a build's package is installed in. */
export function packageRoot(spec: UwsBuildSpec): string {
  let dir = dirname(require.resolve(spec.module));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { version?: string }).version !== undefined) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error(`no package.json above ${spec.module}'s entry point`);
    dir = up;
  }
}

/**
 * Loads the first build that loads natively here (or only the build named by
 * `only`, the uWS version: shard threads load the one the coordinator chose).
 * Throws `NoNativeUwsError` when none does.
 */
export function loadUws(only?: string): Loaded {
  const rt = currentRuntime();
  const attempts: Attempt[] = [];
  for (const build of UWS_BUILDS) {
    if (only !== undefined && build.uws !== only) continue;
    if (build.abis[rt.abi] === undefined) {
      attempts.push({ build, reason: `ships no binary for this Node (ABI ${rt.abi}; it has Node ${[...new Set(Object.values(build.abis))].join(', ')})` });
      continue;
    }
    let path: string;
    try {
      path = join(packageRoot(build), build.binary(rt.platform, rt.arch, rt.abi));
    } catch (err) {
      attempts.push({ build, reason: `not installed (${firstLine(err)})` });
      continue;
    }
    if (!existsSync(path)) {
      attempts.push({ build, reason: `ships no binary for ${rt.platform}-${rt.arch}` });
      continue;
    }
    let uws: Uws;
    try {
      uws = require(path) as Uws;
    } catch (err) {
      attempts.push({ build, reason: `its binary does not load: ${firstLine(err)}` });
      continue;
    }
    if (typeof uws.App !== 'function' || !/\[native code\]/.test(String(uws.App))) {
      attempts.push({ build, reason: 'its binary loaded but exports no native App' });
      continue;
    }
    return { uws, build: { uws: build.uws, npm: build.npm, path, node: rt.node, abi: rt.abi, glibc: rt.glibc } };
  }
  if (attempts.length === 0) attempts.push(...UWS_BUILDS.map((build) => ({ build, reason: `not the build asked for (${only})` })));
  throw new NoNativeUwsError(rt, attempts);
}

function firstLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]!.replace(/^Error: /, '');
}
