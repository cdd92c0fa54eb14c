/**
 * Steps of the packaging tests (this package's and the SDK's): a command run
 * to completion with a time limit of its own, in an environment that does
 * not leak pnpm's or the test runner's settings, failing with the step's
 * name and the tail of its output.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

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
export function step(name: string, cmd: string, args: string[], opts: { cwd: string; timeoutMs: number }): Promise<Run> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    // Its own process group, so that a step that hangs is killed with its children (pnpm runs node, npm runs node).
    const child = spawn(cmd, args, { cwd: opts.cwd, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
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

/**
 * Makes `dir` an empty npm project named `name`, after checking that it is
 * outside the workspace `repo` with no node_modules in any folder above it:
 * there, only what npm installs into it resolves.
 */
export function emptyProject(dir: string, repo: string, manifest: Record<string, unknown>): void {
  assert.ok(!dir.startsWith(repo), `${dir} is inside the workspace`);
  mkdirSync(dir);
  for (let d = dirname(dir); ; d = dirname(d)) {
    assert.ok(!existsSync(join(d, 'node_modules')), `${join(d, 'node_modules')} exists above the empty project`);
    if (dirname(d) === d) break;
  }
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify({ private: true, ...manifest }, null, 2)}\n`);
}

/** `npm install` of `specs` into `project`, from npm's cache where it can. */
export function npmInstall(project: string, specs: string[], timeoutMs = 300_000): Promise<Run> {
  return step('npm install', 'npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--no-package-lock', '--loglevel=error', ...specs],
    { cwd: project, timeoutMs });
}
