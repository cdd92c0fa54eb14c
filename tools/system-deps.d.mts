// Types of tools/system-deps.mjs, for the TypeScript tests that import it by relative path.

export interface SystemDep {
  /** What a test asks for: `redis-server`, `chromium`, `libjemalloc.so.2`, ... */
  readonly name: string;
  /** A binary looked up in PATH (then the sbin directories). */
  readonly bin?: string;
  /** Or the files that show it is there; the first that exists is used. */
  readonly paths?: readonly string[];
  /** The Debian package that provides it. */
  readonly pkg: string;
  /** The code that needs it. */
  readonly usedBy: string;
  /** tools/test.mjs does not install it. */
  readonly optional?: boolean;
}

export type SystemDepName =
  | 'redis-server' | 'redis-cli' | 'prometheus' | 'promtool' | 'haproxy' | 'chromium' | 'libjemalloc.so.2' | 'git';

type Env = Readonly<Record<string, string | undefined>>;

export const SYSTEM_DEPS: readonly SystemDep[];
/** `SLUICE_DEP_REDIS_SERVER` for `redis-server`: the variable that replaces the lookup with one path. */
export function overrideVar(name: string): string;
/** The absolute path of `name`, or undefined when it is not installed. */
export function findSystemDep(name: SystemDepName, env?: Env): string | undefined;
/** The error a test fails with when `name` is missing (names the Debian package). */
export function missingSystemDep(name: SystemDepName, env?: Env, why?: string): Error & { code: string; pkg: string };
/** The absolute path of `name`; throws missingSystemDep(name) when it is not installed. */
export function requireSystemDep(name: SystemDepName, env?: Env): string;
/** ENOENT from a spawn or execFile becomes missingSystemDep(name); any other error is returned as it is. */
export function systemDepError(name: SystemDepName, err: unknown): unknown;
/** The entries that are not installed, optional ones included. */
export function missingSystemDeps(env?: Env): SystemDep[];
/** The absolute path of the executable `bin` in env.PATH, or undefined. */
export function findInPath(bin: string, env?: Env): string | undefined;
