import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ConfigError, configSchema, loadConfig, parseHostPorts, redactedConfig, renderConfigDoc } from '../src/config.ts';
import type { Config, ConfigProblem } from '../src/config.ts';

const host = { availableParallelism: 8 };

function problemsOf(env: Record<string, string | undefined>): readonly ConfigProblem[] {
  try {
    loadConfig(env, host);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
    return err.problems;
  }
  return [];
}

function errorOf(env: Record<string, string | undefined>): ConfigError {
  try {
    loadConfig(env, host);
  } catch (err) {
    assert.ok(err instanceof ConfigError);
    return err;
  }
  assert.fail(`expected loadConfig to throw for ${JSON.stringify(env)}`);
}

// The variable ordered against each one, so a value at the edge of its own
// range is tested without tripping the cross-field rule.
const ORDER_PARTNER: Record<string, string> = {
  WS_MAX_FRAME_BYTES: 'WS_HARD_MAX_FRAME_BYTES',
  WS_HARD_MAX_FRAME_BYTES: 'WS_MAX_FRAME_BYTES',
  WS_RETRY_AFTER_MIN_MS: 'WS_RETRY_AFTER_MAX_MS',
  WS_RETRY_AFTER_MAX_MS: 'WS_RETRY_AFTER_MIN_MS',
};

function intRange(name: string): { min: number; max: number } | undefined {
  const spec = configSchema.find((s) => s.name === name)!;
  const m = /^an integer from (\d+) to (\d+)/.exec(spec.type.accepts);
  return m ? { min: Number(m[1]), max: Number(m[2]) } : undefined;
}

test('an empty env gives the documented defaults and no warnings', () => {
  const { config, warnings } = loadConfig({}, host);
  const expected: Config = {
    port: 8080,
    host: '0.0.0.0',
    adminPort: 9090,
    adminHost: '0.0.0.0',
    workers: 8,
    maxSockets: 0,
    upgradeRate: 5000,
    maxFrameBytes: 131072,
    compression: 'off',
    hardMaxFrameBytes: 1048576,
    maxMessages: 20,
    rateWindowMs: 1000,
    maxJoins: 50,
    maxStrikes: 50,
    heartbeatMs: 25000,
    retryAfterMinMs: 1000,
    retryAfterMaxMs: 6000,
    maxBufferedBytes: 1048576,
    slowClientBufferBytes: 262144,
    maxCongestedMs: 30000,
    ephemeralDropQueueLen: 100,
    slowConsumerQueueLen: 1000,
    coalesceIntervalMs: 0,
    drainDelayMs: 5000,
    drainRate: 500,
    drainMaxMs: 30000,
    historySize: 1000,
    historyTtlMs: 600000,
    positionRefreshMs: 1800000,
    idempotencyTtlMs: 300000,
    tenantMsgLimit: 1000,
    tenantWindowMs: 1000,
    ipConnectLimit: 60,
    ipWindowMs: 60000,
    userMsgLimit: 0,
    userWindowMs: 1000,
    tenantConnectLimit: 0,
    tenantConnectWindowMs: 1000,
    maxUserSockets: 0,
    revocationTtlMs: 86400000,
    presenceTopics: undefined,
    presenceDiffMs: 1000,
    presenceTtlMs: 30000,
    presenceMaxUsers: 1000,
    redisUrl: undefined,
    redisCluster: false,
    redisSentinels: undefined,
    redisSentinelName: 'mymaster',
    redisSentinelPassword: undefined,
    redisAckReplicas: 0,
    redisAckTimeoutMs: 1000,
    nodeAnswerMs: 1000,
    auth: 'none',
    jwtSecret: undefined,
    jwtPublicKeyFile: undefined,
    jwtIssuer: undefined,
    jwtAudience: undefined,
    allowedOrigins: undefined,
    trustProxy: 0,
    maxHeaderBytes: 8192,
    adminToken: undefined,
    adminInsecure: false,
    logLevel: 'info',
    tracingModule: undefined,
    metricsWaitMs: 25,
    connectHookUrl: undefined,
    subscribeHookUrl: undefined,
    subscribeHookTopics: undefined,
    publishHookUrl: undefined,
    publishHookTopics: undefined,
    hookTimeoutMs: 1000,
    hookMaxInflight: 1000,
    hookBreakerFailures: 5,
    hookBreakerMs: 5000,
    hookMaxResponseBytes: 1048576,
    hookSecret: undefined,
    subscribeCacheSize: 100000,
    webhookUrl: undefined,
    webhookSecret: undefined,
    webhookEvents: 'connect,disconnect,presence_join,presence_leave,topic_occupied,topic_vacated',
    webhookBatchMax: 100,
    webhookBatchMs: 200,
    webhookQueueMax: 100000,
    webhookTimeoutMs: 5000,
    webhookRetryMaxMs: 30000,
    pushQueue: 'sluice-push',
    pushMaxDelayMs: 3600000,
  };
  assert.deepEqual({ ...config }, expected);
  assert.deepEqual(warnings, []);
});

test('WS_WORKERS defaults to available parallelism, kept inside 1..256', () => {
  assert.equal(loadConfig({}, { availableParallelism: 3 }).config.workers, 3);
  assert.equal(loadConfig({}, { availableParallelism: 1024 }).config.workers, 256);
  assert.equal(loadConfig({}, { availableParallelism: 0 }).config.workers, 1);
  assert.equal(loadConfig({ WS_WORKERS: '2' }, { availableParallelism: 64 }).config.workers, 2);
});

test('valid values of every type are parsed', () => {
  const { config } = loadConfig(
    { PORT: '0', HOST: '::1', ADMIN_TOKEN: 's3cr3t-Token_.~', LOG_LEVEL: 'debug', WS_MAX_MESSAGES: '0100' },
    host,
  );
  assert.equal(config.port, 0);
  assert.equal(config.host, '::1');
  assert.equal(config.adminToken, 's3cr3t-Token_.~');
  assert.equal(config.logLevel, 'debug');
  assert.equal(config.maxMessages, 100);
});

test('an empty string counts as unset and takes the default', () => {
  const env = Object.fromEntries(configSchema.map((s) => [s.name, '']));
  assert.deepEqual(loadConfig(env, host), loadConfig({}, host));
});

test('each variable reports a bad value with its name, its value and what it accepts', () => {
  // Free text (paths, issuer, audience) takes a space; a control character breaks it.
  const FREE_TEXT = new Set(['WS_JWT_PUBLIC_KEY_FILE', 'WS_JWT_ISSUER', 'WS_JWT_AUDIENCE', 'WS_TRACING_MODULE', 'REDIS_SENTINEL_PASSWORD']);
  for (const spec of configSchema) {
    // "bad value" breaks every other type: not digits, has whitespace inside, not a log level.
    const bad = FREE_TEXT.has(spec.name) ? 'bad\x01value' : 'bad value';
    // WS_AUTH=jwt with a secret, so that the JWT variables are in context.
    const context = spec.name.startsWith('WS_JWT_') || spec.name === 'WS_AUTH'
      ? { WS_AUTH: 'jwt', WS_JWT_SECRET: 'x'.repeat(32), ADMIN_TOKEN: 'admin' } : {};
    const env = { ...context, [spec.name]: bad };
    const message = errorOf(env).message;
    const problems = problemsOf(env);
    assert.equal(problems.length, 1, spec.name);
    const [problem] = problems;
    assert.equal(problem!.name, spec.name);
    assert.equal(problem!.accepts, spec.type.accepts);
    assert.equal(problem!.value, spec.secret ? '[redacted]' : bad);
    assert.ok(message.includes(`${spec.name}=${JSON.stringify(problem!.value)}: expected ${spec.type.accepts}`), message);
  }
});

test('the message matches the documented shape', () => {
  const err = errorOf({ WS_MAX_MESSAGES: 'abc', PORT: '70000' });
  assert.equal(
    err.message,
    'Invalid configuration (2 problems):\n' +
      '  PORT="70000": expected an integer from 0 to 65535 (TCP port; 0 picks a free port)\n' +
      '  WS_MAX_MESSAGES="abc": expected an integer from 1 to 1000000 (frames per window)',
  );
  assert.equal(err.name, 'ConfigError');
  assert.ok(err instanceof Error);
  assert.match(errorOf({ PORT: 'x' }).message, /^Invalid configuration \(1 problem\):\n/);
});

test('every bad value appears in one error', () => {
  const env = {
    PORT: '-1',
    HOST: 'two words',
    WS_WORKERS: '0',
    WS_HEARTBEAT_MS: '999',
    LOG_LEVEL: 'verbose',
    ADMIN_TOKEN: 'has space',
    WS_HISTORY_TTL_MS: '1e6',
    WS_UPGRADE_RATE: '-5',
  };
  const err = errorOf(env);
  assert.deepEqual(err.problems.map((p) => p.name).sort(), Object.keys(env).sort());
  for (const name of Object.keys(env)) assert.ok(err.message.includes(`${name}=`), name);
  assert.match(err.message, /^Invalid configuration \(8 problems\):/);
});

test('integers are decimal digits only', () => {
  for (const raw of ['+5', '-5', '5.0', '1e3', '0x10', '5_000', '5ms', 'Infinity', 'NaN', '٥']) {
    const problems = problemsOf({ WS_MAX_MESSAGES: raw });
    assert.equal(problems.length, 1, raw);
    assert.equal(problems[0]!.value, raw);
  }
  // Beyond Number.MAX_SAFE_INTEGER, still out of range rather than rounded into it.
  assert.equal(problemsOf({ PORT: '99999999999999999999999' }).length, 1);
});

test('leading or trailing whitespace is refused, and the message says so', () => {
  for (const [name, raw] of [['PORT', ' 8080'], ['PORT', '8080\n'], ['LOG_LEVEL', 'info '], ['HOST', '\tlocalhost']]) {
    const problems = problemsOf({ [name!]: raw });
    assert.equal(problems.length, 1, `${name}=${JSON.stringify(raw)}`);
    assert.match(problems[0]!.accepts, /without leading or trailing whitespace$/);
  }
  assert.ok(errorOf({ PORT: '8080\n' }).message.includes('PORT="8080\\n"'), 'control characters are escaped');
});

test('integer ranges: min and max are accepted, one past either is refused', () => {
  for (const spec of configSchema) {
    const range = intRange(spec.name);
    if (range === undefined) continue;
    const partner = ORDER_PARTNER[spec.name];
    for (const edge of [range.min, range.max]) {
      const env: Record<string, string> = { [spec.name]: String(edge) };
      if (partner !== undefined) env[partner] = String(edge);
      // The TTL must hold four flushes: give the other side room.
      if (spec.name === 'WS_PRESENCE_DIFF_MS') env.WS_PRESENCE_TTL_MS = '3600000';
      if (spec.name === 'WS_PRESENCE_TTL_MS') env.WS_PRESENCE_DIFF_MS = '10';
      // Replicas are Redis's.
      if (spec.name === 'WS_REDIS_ACK_REPLICAS') env.REDIS_URL = 'redis://127.0.0.1:6379';
      const { config } = loadConfig(env, host);
      assert.equal(config[spec.key], edge, `${spec.name}=${edge}`);
    }
    const outside = range.min > 0 ? [range.min - 1, range.max + 1] : [range.max + 1];
    for (const value of outside) {
      const problems = problemsOf({ [spec.name]: String(value) });
      assert.deepEqual(
        problems.map((p) => p.name),
        [spec.name],
        `${spec.name}=${value}`,
      );
    }
  }
});

test('WS_AUTH=hook needs WS_CONNECT_HOOK_URL and ADMIN_TOKEN; the URL without it is refused', () => {
  const url = 'http://127.0.0.1:3000/connect';
  assert.deepEqual(problemsOf({ WS_AUTH: 'hook' }).map((p) => p.name), ['WS_CONNECT_HOOK_URL', 'ADMIN_TOKEN']);
  assert.deepEqual(problemsOf({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: url, ADMIN_TOKEN: 'x'.repeat(32) }), []);
  const wrong = problemsOf({ WS_CONNECT_HOOK_URL: url });
  assert.deepEqual(wrong.map((p) => [p.name, p.value]), [['WS_CONNECT_HOOK_URL', '[redacted]']]);
  assert.match(wrong[0]!.accepts, /unless WS_AUTH=hook/);
  assert.deepEqual(problemsOf({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: 'ftp://x/', ADMIN_INSECURE: '1' }).map((p) => p.name), ['WS_CONNECT_HOOK_URL']);
  assert.deepEqual(problemsOf({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: 'not a url', ADMIN_INSECURE: '1' }).map((p) => p.name), ['WS_CONNECT_HOOK_URL']);
  // A JWT key with WS_AUTH=hook would look like it does something.
  assert.deepEqual(problemsOf({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: url, ADMIN_INSECURE: '1', WS_JWT_SECRET: 's'.repeat(32) }).map((p) => p.name),
    ['WS_JWT_SECRET']);
});

test('each hook URL goes with its topics, the webhook URL with its secret, every problem named at once', () => {
  const problems = problemsOf({ WS_SUBSCRIBE_HOOK_URL: 'http://b/sub', WS_PUBLISH_HOOK_TOPICS: 'chat:*', WS_WEBHOOK_URL: 'https://b/hooks',
    WS_WEBHOOK_EVENTS: 'connect,exploded' });
  assert.deepEqual(problems.map((p) => p.name).sort(), ['WS_PUBLISH_HOOK_TOPICS', 'WS_SUBSCRIBE_HOOK_TOPICS', 'WS_WEBHOOK_EVENTS', 'WS_WEBHOOK_SECRET']);
  assert.deepEqual(problemsOf({ WS_SUBSCRIBE_HOOK_URL: 'http://b/sub', WS_SUBSCRIBE_HOOK_TOPICS: 'room:*',
    WS_WEBHOOK_URL: 'https://b/hooks', WS_WEBHOOK_SECRET: 'k'.repeat(32), WS_WEBHOOK_EVENTS: 'connect,disconnect' }), []);
});

test('WS_PRESENCE_TTL_MS must hold four WS_PRESENCE_DIFF_MS (a lease, a renewal and a flush)', () => {
  assert.deepEqual(problemsOf({ WS_PRESENCE_TTL_MS: '4000', WS_PRESENCE_DIFF_MS: '1000' }), []);
  assert.deepEqual(problemsOf({ WS_PRESENCE_TTL_MS: '3999' }).map((p) => p.name), ['WS_PRESENCE_TTL_MS']);
  assert.deepEqual(problemsOf({ WS_PRESENCE_DIFF_MS: '7501' }).map((p) => p.name), ['WS_PRESENCE_DIFF_MS']);
});

test('WS_HARD_MAX_FRAME_BYTES must be at least WS_MAX_FRAME_BYTES', () => {
  assert.deepEqual(problemsOf({ WS_MAX_FRAME_BYTES: '4096', WS_HARD_MAX_FRAME_BYTES: '4096' }), []);
  assert.deepEqual(problemsOf({ WS_MAX_FRAME_BYTES: '4096', WS_HARD_MAX_FRAME_BYTES: '4095' }), [
    { name: 'WS_HARD_MAX_FRAME_BYTES', value: '4095', accepts: 'at least WS_MAX_FRAME_BYTES (4096)' },
  ]);
  // Only the soft cap set, above the default hard cap: blame what the operator set.
  assert.deepEqual(problemsOf({ WS_MAX_FRAME_BYTES: '2000000' }), [
    { name: 'WS_MAX_FRAME_BYTES', value: '2000000', accepts: 'at most WS_HARD_MAX_FRAME_BYTES (1048576, its default)' },
  ]);
  assert.deepEqual(problemsOf({ WS_HARD_MAX_FRAME_BYTES: '1000' }), [
    { name: 'WS_HARD_MAX_FRAME_BYTES', value: '1000', accepts: 'at least WS_MAX_FRAME_BYTES (131072, its default)' },
  ]);
});

test('WS_RETRY_AFTER_MIN_MS must be at most WS_RETRY_AFTER_MAX_MS', () => {
  assert.deepEqual(problemsOf({ WS_RETRY_AFTER_MIN_MS: '0', WS_RETRY_AFTER_MAX_MS: '0' }), []);
  assert.deepEqual(problemsOf({ WS_RETRY_AFTER_MIN_MS: '5000', WS_RETRY_AFTER_MAX_MS: '4000' }), [
    { name: 'WS_RETRY_AFTER_MAX_MS', value: '4000', accepts: 'at least WS_RETRY_AFTER_MIN_MS (5000)' },
  ]);
  assert.deepEqual(problemsOf({ WS_RETRY_AFTER_MIN_MS: '7000' }), [
    { name: 'WS_RETRY_AFTER_MIN_MS', value: '7000', accepts: 'at most WS_RETRY_AFTER_MAX_MS (6000, its default)' },
  ]);
});

test('a cross-field rule is skipped when one side is already invalid, and joins other problems', () => {
  assert.deepEqual(problemsOf({ WS_MAX_FRAME_BYTES: 'big', WS_HARD_MAX_FRAME_BYTES: '100' }).map((p) => p.name), [
    'WS_MAX_FRAME_BYTES',
  ]);
  assert.deepEqual(problemsOf({ PORT: 'x', WS_RETRY_AFTER_MIN_MS: '9000' }).map((p) => p.name), [
    'PORT',
    'WS_RETRY_AFTER_MIN_MS',
  ]);
});

test('an unknown WS_ variable is a warning, with a suggestion when one is close', () => {
  const { warnings } = loadConfig(
    { WS_MAX_MESAGES: '10', WS_HISTORY_TTL: '1000', WS_SOMETHING_ELSE: '1', PATH: '/bin', PORTT: '1' },
    host,
  );
  assert.deepEqual(warnings, [
    'unknown variable WS_HISTORY_TTL, did you mean WS_HISTORY_TTL_MS?',
    'unknown variable WS_MAX_MESAGES, did you mean WS_MAX_MESSAGES?',
    'unknown variable WS_SOMETHING_ELSE',
  ]);
});

test('the config is frozen', () => {
  const { config } = loadConfig({}, host);
  assert.ok(Object.isFrozen(config));
  assert.throws(() => {
    (config as { port: number }).port = 1;
  }, TypeError);
  assert.ok(Object.isFrozen(configSchema));
});

test('redactedConfig hides secrets and keeps everything else', () => {
  const { config } = loadConfig({ ADMIN_TOKEN: 'hunter2', PORT: '1234' }, host);
  const redacted = redactedConfig(config);
  assert.equal(redacted.adminToken, '[redacted]');
  assert.equal(redacted.port, 1234);
  assert.ok(!JSON.stringify(redacted).includes('hunter2'));
  assert.equal(config.adminToken, 'hunter2', 'the config itself is untouched');
  assert.equal(redactedConfig(loadConfig({}, host).config).adminToken, undefined, 'an unset secret stays visibly unset');
});

test('a bad secret is never echoed in the error', () => {
  const err = errorOf({ ADMIN_TOKEN: 'hunter2 ' });
  assert.ok(!err.message.includes('hunter2'), err.message);
  assert.ok(!JSON.stringify(err.problems).includes('hunter2'));
});

test('schema names and keys are unique, and every variable is documented', () => {
  assert.equal(new Set(configSchema.map((s) => s.name)).size, configSchema.length);
  assert.equal(new Set(configSchema.map((s) => s.key)).size, configSchema.length);
  assert.deepEqual(Object.keys(loadConfig({}, host).config).sort(), configSchema.map((s) => s.key).sort());
  const doc = renderConfigDoc();
  for (const spec of configSchema) assert.ok(doc.includes(`| \`${spec.name}\` |`), spec.name);
});

test('docs/configuration.md is generated from the schema', () => {
  const path = new URL('../../../docs/configuration.md', import.meta.url);
  let onDisk: string;
  try {
    onDisk = readFileSync(path, 'utf8');
  } catch {
    assert.fail('docs/configuration.md is missing: run pnpm docs:config');
  }
  assert.ok(onDisk === renderConfigDoc(), 'docs/configuration.md is stale: run pnpm docs:config');
});

test('WS_AUTH=jwt needs exactly one key, and JWT settings without WS_AUTH=jwt stop the start', () => {
  const secret = 's'.repeat(32);
  const admin = { ADMIN_TOKEN: 'admin-token' };
  const ok = loadConfig({ WS_AUTH: 'jwt', WS_JWT_SECRET: secret, WS_JWT_ISSUER: 'https://issuer', WS_JWT_AUDIENCE: 'sluice', ...admin }, host).config;
  assert.equal(ok.auth, 'jwt');
  assert.equal(ok.jwtSecret, secret);
  assert.equal(loadConfig({ WS_AUTH: 'jwt', WS_JWT_PUBLIC_KEY_FILE: '/keys/jwt.pem', ...admin }, host).config.jwtPublicKeyFile, '/keys/jwt.pem');

  assert.deepEqual(problemsOf({ WS_AUTH: 'jwt', ...admin }).map((p) => p.name), ['WS_JWT_SECRET']);
  assert.deepEqual(problemsOf({ WS_AUTH: 'jwt', WS_JWT_SECRET: secret, WS_JWT_PUBLIC_KEY_FILE: '/k.pem', ...admin }).map((p) => p.name),
    ['WS_JWT_PUBLIC_KEY_FILE']);
  const open = problemsOf({ WS_JWT_SECRET: secret, WS_JWT_AUDIENCE: 'sluice' });
  assert.deepEqual(open.map((p) => p.name), ['WS_JWT_SECRET', 'WS_JWT_AUDIENCE']);
  assert.equal(open[0]!.value, '[redacted]', 'the secret is not echoed');
  assert.match(open[0]!.accepts, /unless WS_AUTH=jwt/);
  assert.deepEqual(problemsOf({ WS_AUTH: 'jwt', WS_JWT_SECRET: 'short', ...admin }).map((p) => p.name), ['WS_JWT_SECRET']);
});

test('WS_AUTH=jwt needs ADMIN_TOKEN unless ADMIN_INSECURE=1; WS_AUTH=none does not', () => {
  const secret = 's'.repeat(32);
  const missing = problemsOf({ WS_AUTH: 'jwt', WS_JWT_SECRET: secret });
  assert.deepEqual(missing.map((p) => p.name), ['ADMIN_TOKEN']);
  assert.match(missing[0]!.accepts, /ADMIN_INSECURE=1/);
  // Every problem in one message: a missing key and a missing admin token together.
  assert.deepEqual(problemsOf({ WS_AUTH: 'jwt' }).map((p) => p.name), ['WS_JWT_SECRET', 'ADMIN_TOKEN']);
  assert.equal(loadConfig({ WS_AUTH: 'jwt', WS_JWT_SECRET: secret, ADMIN_INSECURE: '1' }, host).config.adminInsecure, true);
  assert.deepEqual(problemsOf({ WS_AUTH: 'jwt', WS_JWT_SECRET: secret, ADMIN_INSECURE: '0' }).map((p) => p.name), ['ADMIN_TOKEN']);
  assert.deepEqual(problemsOf({ WS_AUTH: 'jwt', WS_JWT_SECRET: secret, ADMIN_INSECURE: 'maybe' }).map((p) => p.name), ['ADMIN_INSECURE']);
  assert.equal(loadConfig({}, host).config.adminToken, undefined, 'WS_AUTH=none starts without a token (and warns)');
});

test('WS_ALLOWED_ORIGINS takes a list of origins and refuses anything else', () => {
  const { config } = loadConfig({ WS_ALLOWED_ORIGINS: 'https://app.example.com, https://*.example.org:8443,http://127.0.0.1:3000' }, host);
  assert.equal(config.allowedOrigins, 'https://app.example.com, https://*.example.org:8443,http://127.0.0.1:3000');
  for (const bad of ['app.example.com', 'https://app.example.com/path', 'ftp://x.org', 'https://a.org,,https://b.org', '*', 'https://*']) {
    assert.deepEqual(problemsOf({ WS_ALLOWED_ORIGINS: bad }).map((p) => p.name), ['WS_ALLOWED_ORIGINS'], bad);
  }
});

test('REDIS_URL: one URL, or a list with REDIS_CLUSTER=1', () => {
  assert.equal(loadConfig({ REDIS_URL: 'redis://127.0.0.1:6379' }, host).config.redisUrl, 'redis://127.0.0.1:6379');
  const c = loadConfig({ REDIS_URL: 'redis://10.0.0.1:7000,redis://10.0.0.2:7000', REDIS_CLUSTER: '1' }, host).config;
  assert.equal(c.redisCluster, true);
  assert.deepEqual(problemsOf({ REDIS_URL: 'redis://a:1,redis://b:2' }).map((p) => p.name), ['REDIS_URL']);
  assert.deepEqual(problemsOf({ REDIS_CLUSTER: 'true' }).map((p) => p.name), ['REDIS_URL']);
  assert.deepEqual(problemsOf({ REDIS_URL: 'http://x:1' }).map((p) => p.name), ['REDIS_URL']);
  assert.equal(loadConfig({ REDIS_URL: 'rediss://user:pw@redis.internal:6380/2' }, host).config.redisUrl, 'rediss://user:pw@redis.internal:6380/2');
});

test('REDIS_SENTINELS: cluster mode on the master the Sentinels name; its settings only with it', () => {
  const c = loadConfig({ REDIS_SENTINELS: '10.0.0.1:26379,sentinel-2.internal:26380,[::1]:26381', REDIS_SENTINEL_NAME: 'events' }, host).config;
  assert.equal(c.redisSentinels, '10.0.0.1:26379,sentinel-2.internal:26380,[::1]:26381');
  assert.equal(c.redisSentinelName, 'events');
  // Without REDIS_URL, cluster mode still: a URL naming no address.
  assert.equal(c.redisUrl, 'redis://events');
  assert.deepEqual(parseHostPorts(c.redisSentinels!), [{ host: '10.0.0.1', port: 26379 }, { host: 'sentinel-2.internal', port: 26380 }, { host: '::1', port: 26381 }]);
  // With REDIS_URL: kept as given (credentials, database, TLS).
  assert.equal(loadConfig({ REDIS_SENTINELS: 'a:1', REDIS_URL: 'rediss://:pw@mymaster/3' }, host).config.redisUrl, 'rediss://:pw@mymaster/3');
  for (const bad of ['a', 'a:', ':1', 'a:1,', 'a:99999', 'a:0', 'a b:1', 'redis://a:1']) {
    assert.deepEqual(problemsOf({ REDIS_SENTINELS: bad }).map((p) => p.name), ['REDIS_SENTINELS'], bad);
  }
  assert.deepEqual(problemsOf({ REDIS_SENTINELS: 'a:1', REDIS_CLUSTER: '1', REDIS_URL: 'redis://a:1' }).map((p) => p.name), ['REDIS_CLUSTER']);
  assert.deepEqual(problemsOf({ REDIS_SENTINELS: 'a:1', REDIS_URL: 'redis://a:1,redis://b:2' }).map((p) => p.name), ['REDIS_URL']);
  // The Sentinels' settings without Sentinels would be ignored: refused, every one named, the password redacted.
  const orphans = problemsOf({ REDIS_URL: 'redis://a:1', REDIS_SENTINEL_NAME: 'x', REDIS_SENTINEL_PASSWORD: 'hunter2' });
  assert.deepEqual(orphans.map((p) => [p.name, p.value]), [['REDIS_SENTINEL_NAME', 'x'], ['REDIS_SENTINEL_PASSWORD', '[redacted]']]);
});

test('WS_REDIS_ACK_REPLICAS: 0 to 16, only with Redis; its timeout from 10 ms to a minute', () => {
  const c = loadConfig({ REDIS_URL: 'redis://a:1', WS_REDIS_ACK_REPLICAS: '2', WS_REDIS_ACK_TIMEOUT_MS: '250' }, host).config;
  assert.equal(c.redisAckReplicas, 2);
  assert.equal(c.redisAckTimeoutMs, 250);
  assert.equal(loadConfig({ REDIS_SENTINELS: 'a:1', WS_REDIS_ACK_REPLICAS: '1' }, host).config.redisAckReplicas, 1);
  assert.deepEqual(problemsOf({ WS_REDIS_ACK_REPLICAS: '1' }).map((p) => p.name), ['WS_REDIS_ACK_REPLICAS'], 'embedded mode has no replicas');
  assert.equal(loadConfig({ WS_REDIS_ACK_REPLICAS: '0' }, host).config.redisAckReplicas, 0);
  for (const bad of ['17', '-1', '1.5', 'all']) {
    assert.deepEqual(problemsOf({ REDIS_URL: 'redis://a:1', WS_REDIS_ACK_REPLICAS: bad }).map((p) => p.name), ['WS_REDIS_ACK_REPLICAS'], bad);
  }
  for (const bad of ['9', '60001', 'soon']) {
    assert.deepEqual(problemsOf({ REDIS_URL: 'redis://a:1', WS_REDIS_ACK_TIMEOUT_MS: bad }).map((p) => p.name), ['WS_REDIS_ACK_TIMEOUT_MS'], bad);
  }
});

test('WS_NODE_ANSWER_MS: how long a question to the other nodes waits, 100 ms to a minute', () => {
  assert.equal(loadConfig({ REDIS_URL: 'redis://a:1', WS_NODE_ANSWER_MS: '5000' }, host).config.nodeAnswerMs, 5000);
  assert.equal(loadConfig({ REDIS_URL: 'redis://a:1', WS_NODE_ANSWER_MS: '100' }, host).config.nodeAnswerMs, 100);
  for (const bad of ['99', '60001', '1.5', 'soon']) {
    assert.deepEqual(problemsOf({ REDIS_URL: 'redis://a:1', WS_NODE_ANSWER_MS: bad }).map((p) => p.name), ['WS_NODE_ANSWER_MS'], bad);
  }
});

test('WS_POSITION_REFRESH_MS: 0 turns marks off, 1000 to 3600000 is an interval, anything between or above is refused', () => {
  assert.equal(loadConfig({ WS_POSITION_REFRESH_MS: '0' }, host).config.positionRefreshMs, 0);
  assert.equal(loadConfig({ WS_POSITION_REFRESH_MS: '1000' }, host).config.positionRefreshMs, 1000);
  assert.equal(loadConfig({ WS_POSITION_REFRESH_MS: '3600000' }, host).config.positionRefreshMs, 3_600_000);
  for (const bad of ['1', '999', '3600001', '00', '-1', '1e3']) {
    assert.deepEqual(problemsOf({ WS_POSITION_REFRESH_MS: bad }),
      [{ name: 'WS_POSITION_REFRESH_MS', value: bad, accepts: '0, or an integer from 1000 to 3600000 (ms; 0 sends none)' }], bad);
  }
});
