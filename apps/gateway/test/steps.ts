/**
 * Steps of the packaging tests (this package's and the SDK's): a command run
 * to completion with a time limit of its own, in an environment that does
 * not leak pnpm's or the test runner's settings, failing with the step's
 * name and the tail of its output.
 */
import { spawn } from 'node:child_process';

export interface Run {
  readonly stdout: string;
  readonly stderr: string;
}

/** The environment of a child that must not see pnpm's or this test runner's settings. */
export function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(npm_|pnpm_|NODE_OPTIONS$|NODE_PATH$|NODE_TEST_CONTEXT$|INIT_CWD$)/i.test(k)) env[k] = v;
  }
  return env;
}

/** Runs one step; a non-zero exit or a step past `timeoutMs` fails with the step's name and output. */
export function step(name: string, cmd: string, args: string[], opts: { cwd: string; timeoutMs: number; env?: NodeJS.ProcessEnv }): Promise<Run> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    // Its own process group, so that a step that hangs is killed with its children (pnpm runs node, npm runs node).
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const tail = (): string => `\n--- stdout\n${stdout.slice(-3000)}\n--- stderr\n${stderr.slice(-3000)}`;
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
      reject(new Error(`step "${name}" (${cmd} ${args.join(' ')}) took longer than ${opts.timeoutMs} ms and was killed${tail()}`));
    }, opts.timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`step "${name}" could not start ${cmd}: ${err.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) {
        console.log(`${name}: ${Date.now() - started} ms`);
        resolve({ stdout, stderr });
      } else {
        reject(new Error(`step "${name}" (${cmd} ${args.join(' ')}) exited with ${code ?? signal}${tail()}`));
      }
    });
  });
}
