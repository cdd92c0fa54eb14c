// Where processes start from, and how they get their open-file limit.

import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const BENCH_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/**
 * Arguments for /bin/sh that raise the soft open-file limit to the hard limit
 * and then exec `argv` (so the pid stays the one we spawned, and /proc/<pid>
 * describes the real process).
 */
export function shellWithFileLimit(argv: readonly string[]): string[] {
  return ['-c', 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@"', 'sh', ...argv];
}
