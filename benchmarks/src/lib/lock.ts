// One benchmark at a time on this machine: two runs on 2 shared cores would
// measure each other. The lock is a file holding the owner's pid; a lock whose
// owner is gone is taken over.

import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function tryTake(path: string): number | null {
  try {
    writeFileSync(path, String(process.pid), { flag: 'wx' });
    return null;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const owner = Number(readFileSync(path, 'utf8').trim());
  if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && alive(owner)) return owner;
  rmSync(path, { force: true }); // stale: its owner is gone
  return tryTake(path);
}

/** Waits (at most `maxWaitMs`) for the lock; returns its release function. */
export async function takeBenchLock(path: string, maxWaitMs: number, log: (line: string) => void): Promise<() => void> {
  mkdirSync(dirname(path), { recursive: true });
  const deadline = Date.now() + maxWaitMs;
  let said = false;
  for (;;) {
    const owner = tryTake(path);
    if (owner === null) break;
    if (Date.now() > deadline) throw new Error(`another benchmark (pid ${owner}) still holds ${path} after ${maxWaitMs / 1000} s`);
    if (!said) { log(`waiting for the benchmark run by pid ${owner} to finish (${path})`); said = true; }
    await sleep(1000);
  }
  const release = (): void => {
    try {
      if (Number(readFileSync(path, 'utf8').trim()) === process.pid) rmSync(path, { force: true });
    } catch {
      // already gone
    }
  };
  process.once('exit', release);
  return release;
}
