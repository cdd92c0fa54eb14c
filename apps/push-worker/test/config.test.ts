// The push worker's configuration: every bad variable named in one error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { loadPushConfig, PushConfigError } from '../src/config.ts';
import { sign } from '../src/worker.ts';

const OK = { REDIS_URL: 'redis://127.0.0.1:6379', WS_PUSH_WEBHOOK_URL: 'http://sender/push', SLUICE_ADMIN_URL: 'http://127.0.0.1:9464/' };

test('a good environment: the defaults, and the admin URL without its trailing slash', () => {
  const c = loadPushConfig(OK);
  assert.equal(c.queue, 'sluice-push');
  assert.equal(c.adminUrl, 'http://127.0.0.1:9464');
  assert.equal(c.attempts, 5);
  assert.equal(c.webhookSecret, undefined);
});

test('every bad variable is named in one error', () => {
  const err = (() => {
    try {
      loadPushConfig({ REDIS_URL: 'http://x', REDIS_CLUSTER: 'yes', WS_PUSH_QUEUE: 'a:b', WS_PUSH_WEBHOOK_SECRET: 'short',
        PUSH_CONCURRENCY: '0', PUSH_ATTEMPTS: '101', PUSH_BACKOFF_MS: 'x', PUSH_METRICS_PORT: '70000', LOG_LEVEL: 'loud' });
    } catch (e) {
      return e;
    }
    return undefined;
  })();
  assert.ok(err instanceof PushConfigError);
  for (const name of ['REDIS_URL', 'REDIS_CLUSTER', 'WS_PUSH_QUEUE', 'WS_PUSH_WEBHOOK_URL', 'WS_PUSH_WEBHOOK_SECRET', 'SLUICE_ADMIN_URL',
    'PUSH_CONCURRENCY', 'PUSH_ATTEMPTS', 'PUSH_BACKOFF_MS', 'PUSH_METRICS_PORT', 'LOG_LEVEL']) {
    assert.match(err.message, new RegExp(`\\b${name}\\b`), name);
  }
  assert.equal(err.problems.length, 11);
});

test('REDIS_SENTINELS: the master the Sentinels name, REDIS_URL then optional; their settings refused without them', () => {
  const { REDIS_URL: _, ...noUrl } = OK;
  const c = loadPushConfig({ ...noUrl, REDIS_SENTINELS: '127.0.0.1:26379,10.0.0.2:26380', REDIS_SENTINEL_NAME: 'events' });
  assert.deepEqual(c.redisSentinels, [{ host: '127.0.0.1', port: 26379 }, { host: '10.0.0.2', port: 26380 }]);
  assert.equal(c.redisSentinelName, 'events');
  assert.equal(c.redisUrl, 'redis://events');
  const problems = (env: Record<string, string>): string[] => {
    try {
      loadPushConfig(env);
    } catch (e) {
      return (e as PushConfigError).problems.slice();
    }
    return [];
  };
  assert.match(problems({ ...noUrl, REDIS_SENTINELS: 'nohost' }).join(), /REDIS_SENTINELS/);
  assert.match(problems({ ...noUrl, REDIS_SENTINELS: 'a:1', REDIS_CLUSTER: '1' }).join(), /REDIS_CLUSTER/);
  assert.match(problems({ ...OK, REDIS_SENTINEL_NAME: 'x' }).join(), /need REDIS_SENTINELS/);
  assert.match(problems(noUrl).join(), /REDIS_URL is required/);
});

test('the process refuses to start with a bad environment: exit 2, the message on stderr', () => {
  const cwd = fileURLToPath(new URL('..', import.meta.url));
  const env: Record<string, string> = { PATH: process.env.PATH ?? '', REDIS_URL: 'nope' };
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd, env, encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /REDIS_URL must be/);
  assert.match(r.stderr, /WS_PUSH_WEBHOOK_URL is required/);
  assert.match(r.stderr, /SLUICE_ADMIN_URL is required/);
});

test('the signature is v1= HMAC-SHA256 hex of "<timestamp>.<body>"', async () => {
  const { createHmac } = await import('node:crypto');
  assert.equal(sign('k', '1', 'b'), `v1=${createHmac('sha256', 'k').update('1.b').digest('hex')}`);
  assert.notEqual(sign('k', '1', 'b'), sign('k', '2', 'b'));
  assert.match(sign('k', '1', 'b'), /^v1=[0-9a-f]{64}$/);
});
