// What a chaos report is stamped with: the commit (and whether the tree had
// uncommitted changes) and the versions of the programs it ran.
import { execFileSync } from 'node:child_process';
import { REPO_ROOT } from '../src/lib/spawn.ts';

export function commit(): string {
  try {
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim() !== '';
    return dirty ? `${sha} (with uncommitted changes)` : sha;
  } catch {
    return 'unknown';
  }
}

/** The first line a program prints of its version, or that it is not there. */
export function version(cmd: string, args: string[]): string {
  try { return execFileSync(cmd, args, { encoding: 'utf8' }).split('\n')[0]!.trim(); } catch { return `${cmd}: not found`; }
}
