import { hasControlChar, parseOriginList } from './identity.ts';

// Every environment variable the gateway reads, in one schema: its type,
// default, unit, range and doc side by side. loadConfig checks all of them
// once at start and reports every problem in one error; renderConfigDoc
// generates docs/configuration.md from the same schema so the two never drift.

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly adminPort: number;
  readonly adminHost: string;
  readonly workers: number;
  readonly maxSockets: number;
  /** WS_UPGRADE_RATE: upgrades per second for the whole node (0 = no budget). */
  readonly upgradeRate: number;
  readonly maxFrameBytes: number;
  readonly hardMaxFrameBytes: number;
  readonly maxMessages: number;
  readonly rateWindowMs: number;
  readonly maxJoins: number;
  readonly maxStrikes: number;
  readonly heartbeatMs: number;
  readonly retryAfterMinMs: number;
  readonly retryAfterMaxMs: number;
  readonly maxBufferedBytes: number;
  readonly slowClientBufferBytes: number;
  readonly maxCongestedMs: number;
  readonly ephemeralDropQueueLen: number;
  readonly slowConsumerQueueLen: number;
  readonly coalesceIntervalMs: number;
  readonly drainDelayMs: number;
  readonly drainRate: number;
  readonly drainMaxMs: number;
  readonly historySize: number;
  readonly historyTtlMs: number;
  readonly positionRefreshMs: number;
  readonly idempotencyTtlMs: number;
  readonly tenantMsgLimit: number;
  readonly tenantWindowMs: number;
  readonly ipConnectLimit: number;
  readonly ipWindowMs: number;
  /** 0 = off. */
  readonly userMsgLimit: number;
  readonly userWindowMs: number;
  /** 0 = off. */
  readonly tenantConnectLimit: number;
  readonly tenantConnectWindowMs: number;
  /** 0 = off. */
  readonly maxUserSockets: number;
  readonly revocationTtlMs: number;
  /** WS_PRESENCE_TOPICS as given (validated): comma-separated topic patterns; unset = no presence. Compile with compileRights. */
  readonly presenceTopics: string | undefined;
  readonly presenceDiffMs: number;
  readonly presenceTtlMs: number;
  readonly presenceMaxUsers: number;
  /**
   * Unset: embedded mode. One URL, or with redisCluster a comma-separated list
   * of seed nodes. With redisSentinels, its credentials, database and scheme
   * only (the Sentinels name the master); `redis://<redisSentinelName>` when
   * REDIS_SENTINELS is set without REDIS_URL.
   */
  readonly redisUrl: string | undefined;
  readonly redisCluster: boolean;
  /** REDIS_SENTINELS as given (validated): comma-separated host:port of Sentinels; parse with parseHostPorts. */
  readonly redisSentinels: string | undefined;
  readonly redisSentinelName: string;
  readonly redisSentinelPassword: string | undefined;
  /** WS_REDIS_ACK_REPLICAS: a durable publish is acked once this many replicas confirmed it (WAIT); 0 = once the master stored it. */
  readonly redisAckReplicas: number;
  readonly redisAckTimeoutMs: number;
  /** WS_NODE_ANSWER_MS: how long a question to the other nodes (users, views, a drain) waits for their answers. */
  readonly nodeAnswerMs: number;
  readonly auth: AuthMode;
  readonly compression: CompressionMode;
  readonly jwtSecret: string | undefined;
  readonly jwtPublicKeyFile: string | undefined;
  readonly jwtIssuer: string | undefined;
  readonly jwtAudience: string | undefined;
  /** WS_ALLOWED_ORIGINS as given (validated); parse it with parseOriginList. */
  readonly allowedOrigins: string | undefined;
  readonly trustProxy: number;
  readonly maxHeaderBytes: number;
  readonly adminToken: string | undefined;
  readonly adminInsecure: boolean;
  readonly logLevel: LogLevel;
  /** WS_TRACING_MODULE: a module every thread imports to register an OpenTelemetry SDK; unset = no spans. */
  readonly tracingModule: string | undefined;
  /** WS_METRICS_WAIT_MS: how long a scrape waits for a shard that has answered one before. */
  readonly metricsWaitMs: number;
  /** WS_AUTH=hook: the URL every upgrade (and every `refresh`) is POSTed to. */
  readonly connectHookUrl: string | undefined;
  readonly subscribeHookUrl: string | undefined;
  /** Topic patterns whose joins ask the subscribe hook (compile with compileRights). */
  readonly subscribeHookTopics: string | undefined;
  readonly publishHookUrl: string | undefined;
  /** Topic patterns whose publishes ask the publish hook (compile with compileRights). */
  readonly publishHookTopics: string | undefined;
  readonly hookTimeoutMs: number;
  readonly hookMaxInflight: number;
  readonly hookBreakerFailures: number;
  readonly hookBreakerMs: number;
  readonly hookMaxResponseBytes: number;
  readonly hookSecret: string | undefined;
  readonly subscribeCacheSize: number;
  readonly webhookUrl: string | undefined;
  readonly webhookSecret: string | undefined;
  /** Comma-separated event types (validated against WEBHOOK_EVENTS). */
  readonly webhookEvents: string;
  readonly webhookBatchMax: number;
  readonly webhookBatchMs: number;
  readonly webhookQueueMax: number;
  readonly webhookTimeoutMs: number;
  readonly webhookRetryMaxMs: number;
  readonly pushQueue: string;
  readonly pushMaxDelayMs: number;
}

export const AUTH_MODES = ['none', 'jwt', 'hook'] as const;

/** The lifecycle events WS_WEBHOOK_URL may receive. */
export const WEBHOOK_EVENTS = ['connect', 'disconnect', 'presence_join', 'presence_leave', 'topic_occupied', 'topic_vacated'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];
export type AuthMode = (typeof AUTH_MODES)[number];
/** permessage-deflate: `off`, one compressor shared by the shard, or one per socket. */
export const COMPRESSION_MODES = ['off', 'shared', 'dedicated'] as const;
export type CompressionMode = (typeof COMPRESSION_MODES)[number];

/** What loadConfig needs to know about the machine; the caller reads it. */
export interface ConfigHost {
  readonly availableParallelism: number;
}

export const CONFIG_SECTIONS = [
  'Listening and threads',
  'Per-socket limits',
  'Outbound backpressure',
  'Draining',
  'History and idempotency',
  'Tenant, user and IP limits',
  'Presence',
  'Redis',
  'Identity and upgrades',
  'Backend hooks',
  'Lifecycle webhooks',
  'Offline push',
  'Admin and observability',
] as const;
export type ConfigSection = (typeof CONFIG_SECTIONS)[number];

export type Parsed<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly accepts: string };

export interface ValueType<T> {
  /** What a valid value looks like ("an integer from 1 to 20 (ms)"), for errors and the doc. */
  readonly accepts: string;
  /** Parses a non-empty raw value; never trims it. */
  parse(raw: string): Parsed<T>;
}

export interface ConfigVar<K extends keyof Config = keyof Config> {
  readonly name: string;
  readonly key: K;
  readonly section: ConfigSection;
  readonly type: ValueType<NonNullable<Config[K]>>;
  readonly default: Config[K] | ((host: ConfigHost) => Config[K]);
  /** How the doc shows the default, when the value itself would not say it. */
  readonly defaultDoc?: string;
  /** Never echoed: not in errors, not in redactedConfig. */
  readonly secret?: boolean;
  readonly doc: string;
}

export interface ConfigProblem {
  readonly name: string;
  readonly value: string;
  readonly accepts: string;
}

export const REDACTED = '[redacted]';

function int(min: number, max: number, unit?: string): ValueType<number> {
  const accepts = `an integer from ${min} to ${max}${unit === undefined ? '' : ` (${unit})`}`;
  return {
    accepts,
    parse(raw) {
      // Digits only: Number() would also take "1e3", "0x10", " 8 " and "".
      if (!/^[0-9]+$/.test(raw)) return { ok: false, accepts };
      const n = Number(raw);
      return n >= min && n <= max ? { ok: true, value: n } : { ok: false, accepts };
    },
  };
}

/** 0 (off), or an integer from min to max. */
function zeroOrInt(min: number, max: number, unit?: string): ValueType<number> {
  const range = int(min, max);
  const accepts = `0, or an integer from ${min} to ${max}${unit === undefined ? '' : ` (${unit})`}`;
  return {
    accepts,
    parse(raw) {
      if (raw === '0') return { ok: true, value: 0 };
      const r = range.parse(raw);
      return r.ok ? r : { ok: false, accepts };
    },
  };
}

function hostname(): ValueType<string> {
  const accepts = 'a host name or IP address';
  return {
    accepts,
    parse: (raw) => (/^\S+$/.test(raw) ? { ok: true, value: raw } : { ok: false, accepts }),
  };
}

function oneOf<const T extends string>(values: readonly T[]): ValueType<T> {
  const accepts = `one of ${values.join(', ')}`;
  return {
    accepts,
    parse: (raw) => (values.includes(raw as T) ? { ok: true, value: raw as T } : { ok: false, accepts }),
  };
}

function secretToken(): ValueType<string> {
  // The token travels in an HTTP header: anything outside visible ASCII
  // would be mangled or refused on the way, and the token would never match.
  const accepts = 'a token of visible ASCII characters';
  return {
    accepts,
    parse: (raw) => (/^[\x21-\x7e]+$/.test(raw) ? { ok: true, value: raw } : { ok: false, accepts }),
  };
}

/** Free text without control characters (they would be invisible in a deploy file), of at least `minLength`. */
function text(accepts: string, minLength = 1): ValueType<string> {
  return { accepts, parse: (raw) => (raw.length >= minLength && !hasControlChar(raw) ? { ok: true, value: raw } : { ok: false, accepts }) };
}

function originList(): ValueType<string> {
  const accepts = 'a comma-separated list of origins (scheme://host[:port], https://*.example.com for every subdomain)';
  return { accepts, parse: (raw) => (parseOriginList(raw) === undefined ? { ok: false, accepts } : { ok: true, value: raw }) };
}

function bool(): ValueType<boolean> {
  const accepts = '0 or 1 (also false or true)';
  return {
    accepts,
    parse: (raw) => (raw === '1' || raw === 'true' ? { ok: true, value: true }
      : raw === '0' || raw === 'false' ? { ok: true, value: false } : { ok: false, accepts }),
  };
}

function topicPatterns(): ValueType<string> {
  const accepts = 'a comma-separated list of topic patterns (a topic name, a prefix ending in *, or *)';
  const one = /^[A-Za-z0-9:_.-]{1,200}\*?$|^\*$/;
  return { accepts, parse: (raw) => (raw.split(',').every((p) => one.test(p)) ? { ok: true, value: raw } : { ok: false, accepts }) };
}

function httpUrl(): ValueType<string> {
  const accepts = 'an http:// or https:// URL';
  return {
    accepts,
    parse(raw) {
      let u: URL;
      try {
        u = new URL(raw);
      } catch {
        return { ok: false, accepts };
      }
      return (u.protocol === 'http:' || u.protocol === 'https:') && !/\s/.test(raw) ? { ok: true, value: raw } : { ok: false, accepts };
    },
  };
}

function eventList(): ValueType<string> {
  const accepts = `a comma-separated list of ${WEBHOOK_EVENTS.join(', ')}`;
  return {
    accepts,
    parse: (raw) => (raw.split(',').every((e) => (WEBHOOK_EVENTS as readonly string[]).includes(e)) ? { ok: true, value: raw } : { ok: false, accepts }),
  };
}

function queueName(): ValueType<string> {
  const accepts = 'a queue name of 1 to 100 letters, digits, - and _';
  return { accepts, parse: (raw) => (/^[A-Za-z0-9_-]{1,100}$/.test(raw) ? { ok: true, value: raw } : { ok: false, accepts }) };
}

const REDIS_URL = /^rediss?:\/\/(?:[^\s@/]*@)?[A-Za-z0-9.\-[\]:]+(?::[0-9]{1,5})?(?:\/[0-9]{1,2})?$/;

/** `host:port,host:port` (Sentinels): the list, or undefined when any entry is not one. */
export function parseHostPorts(raw: string): { host: string; port: number }[] | undefined {
  const out: { host: string; port: number }[] = [];
  for (const entry of raw.split(',')) {
    const m = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})$/.exec(entry);
    if (m === null) return undefined;
    const port = Number(m[2]);
    if (port < 1 || port > 65535) return undefined;
    out.push({ host: m[1]!.replace(/^\[|\]$/g, ''), port });
  }
  return out;
}

function masterName(): ValueType<string> {
  const accepts = 'a master name as in sentinel.conf (1 to 100 letters, digits, ., - and _)';
  return { accepts, parse: (raw) => (/^[A-Za-z0-9._-]{1,100}$/.test(raw) ? { ok: true, value: raw } : { ok: false, accepts }) };
}

function hostPorts(): ValueType<string> {
  const accepts = 'a comma-separated list of host:port (for example 10.0.0.1:26379,10.0.0.2:26379)';
  return { accepts, parse: (raw) => (parseHostPorts(raw) === undefined ? { ok: false, accepts } : { ok: true, value: raw }) };
}

function redisUrls(): ValueType<string> {
  const accepts = 'a redis:// or rediss:// URL (with REDIS_CLUSTER=1, a comma-separated list of them)';
  return {
    accepts,
    parse: (raw) => (raw.split(',').every((u) => REDIS_URL.test(u)) ? { ok: true, value: raw } : { ok: false, accepts }),
  };
}

// One function per entry keeps K, so the check below the schema can see every key.
function v<K extends keyof Config>(spec: ConfigVar<K>): ConfigVar<K> {
  return Object.freeze(spec);
}

const MAX_WORKERS = 256;
const PORT_RANGE = 'TCP port; 0 picks a free port';

const schema = [
  // Listening and threads
  v({
    name: 'PORT', key: 'port', section: 'Listening and threads',
    type: int(0, 65535, PORT_RANGE), default: 8080,
    doc: 'Public WebSocket and health port.',
  }),
  v({
    name: 'HOST', key: 'host', section: 'Listening and threads',
    type: hostname(), default: '0.0.0.0',
    doc: 'Address the public port binds.',
  }),
  v({
    name: 'ADMIN_PORT', key: 'adminPort', section: 'Listening and threads',
    type: int(0, 65535, PORT_RANGE), default: 9090,
    doc: 'Admin HTTP port: health, metrics, publish API.',
  }),
  v({
    name: 'ADMIN_HOST', key: 'adminHost', section: 'Listening and threads',
    type: hostname(), default: '0.0.0.0',
    doc: 'Address the admin port binds.',
  }),
  v({
    name: 'WS_WORKERS', key: 'workers', section: 'Listening and threads',
    type: int(1, MAX_WORKERS, 'threads'),
    // Clamped so that a machine with more cores still gets a default inside the range.
    default: (host) => Math.min(MAX_WORKERS, Math.max(1, Math.floor(host.availableParallelism))),
    defaultDoc: 'available parallelism',
    doc: `Shard threads. The default is capped at ${MAX_WORKERS}.`,
  }),
  v({
    name: 'WS_MAX_SOCKETS', key: 'maxSockets', section: 'Listening and threads',
    type: int(0, 10_000_000, 'sockets; 0 means no limit'), default: 0,
    doc: 'Node-wide socket cap; at the cap upgrades get 503 and readiness fails.',
  }),
  v({
    name: 'WS_UPGRADE_RATE', key: 'upgradeRate', section: 'Listening and threads',
    type: int(0, 1_000_000, 'upgrades per second, whole node; 0 = no budget'), default: 5000,
    doc: 'Upgrades the node accepts per second, with a burst of a tenth of that; above it 503 `unavailable` whose `retryAfterMs` '
      + 'spreads the refused over the time the backlog needs at this rate. Readiness is not affected.',
  }),

  // Per-socket limits
  v({
    name: 'WS_MAX_FRAME_BYTES', key: 'maxFrameBytes', section: 'Per-socket limits',
    type: int(64, 67_108_864, 'bytes'), default: 131_072,
    doc: 'Soft frame cap: a larger frame gets the reply `payload_too_large`.',
  }),
  v({
    name: 'WS_HARD_MAX_FRAME_BYTES', key: 'hardMaxFrameBytes', section: 'Per-socket limits',
    type: int(64, 67_108_864, 'bytes'), default: 1_048_576,
    doc: 'Hard frame cap: a larger frame closes the socket with 1009.',
  }),
  v({
    name: 'WS_COMPRESSION', key: 'compression', section: 'Per-socket limits',
    type: oneOf(COMPRESSION_MODES), default: 'off',
    doc: 'permessage-deflate for events: `off`, `shared` (one compressor per shard thread, each message deflated on its own), `dedicated` (a compressor with a 4 KB window per socket, kept between messages).',
  }),
  v({
    name: 'WS_MAX_MESSAGES', key: 'maxMessages', section: 'Per-socket limits',
    type: int(1, 1_000_000, 'frames per window'), default: 20,
    doc: 'Frames a socket may send per `WS_RATE_WINDOW_MS`; above it frames get the reply `rate_limited`.',
  }),
  v({
    name: 'WS_RATE_WINDOW_MS', key: 'rateWindowMs', section: 'Per-socket limits',
    type: int(1, 3_600_000, 'ms'), default: 1000,
    doc: 'Fixed window for `WS_MAX_MESSAGES`; every frame counts, pings too.',
  }),
  v({
    name: 'WS_MAX_JOINS', key: 'maxJoins', section: 'Per-socket limits',
    type: int(1, 100_000, 'topics per socket'), default: 50,
    doc: 'Topics a socket may join at once; above it joins get the reply `too_many_joins`.',
  }),
  v({
    name: 'WS_MAX_STRIKES', key: 'maxStrikes', section: 'Per-socket limits',
    type: int(1, 1_000_000, 'rejected frames in a row'), default: 50,
    doc: 'Rejected frames in a row before the socket is closed with 1008 `abusive`.',
  }),
  v({
    name: 'WS_HEARTBEAT_MS', key: 'heartbeatMs', section: 'Per-socket limits',
    type: int(1000, 600_000, 'ms'), default: 25_000,
    doc: 'Advertised in `welcome`; the server closes a socket that sends nothing (no frame, no pong) for two heartbeats.',
  }),
  v({
    name: 'WS_RETRY_AFTER_MIN_MS', key: 'retryAfterMinMs', section: 'Per-socket limits',
    type: int(0, 3_600_000, 'ms'), default: 1000,
    doc: 'Lower end of the jitter range for `retryAfterMs` in closes and 503s.',
  }),
  v({
    name: 'WS_RETRY_AFTER_MAX_MS', key: 'retryAfterMaxMs', section: 'Per-socket limits',
    type: int(0, 3_600_000, 'ms'), default: 6000,
    doc: 'Upper end of the jitter range for `retryAfterMs` in closes and 503s.',
  }),

  // Outbound backpressure
  v({
    name: 'WS_MAX_BUFFERED_BYTES', key: 'maxBufferedBytes', section: 'Outbound backpressure',
    type: int(4096, 1_073_741_824, 'bytes'), default: 1_048_576,
    doc: 'Unsent bytes at which a socket is closed with 1013 `buffer_limit`.',
  }),
  v({
    name: 'WS_SLOW_CLIENT_BUFFER_BYTES', key: 'slowClientBufferBytes', section: 'Outbound backpressure',
    type: int(1024, 1_073_741_824, 'bytes'), default: 262_144,
    doc: 'Unsent bytes from which a socket counts as congested and its events wait in its mailbox. ' +
      'Forced to at most half of `WS_MAX_BUFFERED_BYTES` (the start logs it).',
  }),
  v({
    name: 'WS_MAX_CONGESTED_MS', key: 'maxCongestedMs', section: 'Outbound backpressure',
    type: int(0, 86_400_000, 'ms; 0 = never'), default: 30_000,
    doc: 'How long a socket may stay congested before it is closed with 1013 `congested`.',
  }),
  v({
    name: 'WS_EPHEMERAL_DROP_QUEUE_LEN', key: 'ephemeralDropQueueLen', section: 'Outbound backpressure',
    type: int(0, 1_000_000, 'events'), default: 100,
    doc: 'Mailbox length from which ephemeral events for a congested socket are dropped.',
  }),
  v({
    name: 'WS_SLOW_CONSUMER_QUEUE_LEN', key: 'slowConsumerQueueLen', section: 'Outbound backpressure',
    type: int(1, 10_000_000, 'events'), default: 1000,
    doc: 'Mailbox length past which a congested socket is closed with 4503 `slow_consumer`.',
  }),
  v({
    name: 'WS_COALESCE_INTERVAL_MS', key: 'coalesceIntervalMs', section: 'Outbound backpressure',
    type: int(0, 3_600_000, 'ms; 0 = off'), default: 0,
    doc: 'At most one keyed event per (socket, topic, key) per interval; the newest wins.',
  }),

  // Draining
  v({
    name: 'WS_DRAIN_DELAY_MS', key: 'drainDelayMs', section: 'Draining',
    type: int(0, 3_600_000, 'ms'), default: 5000,
    doc: 'After SIGTERM or `POST /admin/drain`, how long readiness fails before the first socket is closed.',
  }),
  v({
    name: 'WS_DRAIN_RATE', key: 'drainRate', section: 'Draining',
    type: int(1, 1_000_000, 'sockets per second, whole node'), default: 500,
    doc: 'How fast a draining node closes its sockets (1012 with a jittered `retryAfterMs`).',
  }),
  v({
    name: 'WS_DRAIN_MAX_MS', key: 'drainMaxMs', section: 'Draining',
    type: int(0, 86_400_000, 'ms'), default: 30_000,
    doc: 'When the drain began plus this, every socket still open is closed and the process exits 0.',
  }),

  // History and idempotency
  v({
    name: 'WS_HISTORY_SIZE', key: 'historySize', section: 'History and idempotency',
    type: int(0, 10_000_000, 'events per topic; 0 disables history'), default: 1000,
    doc: 'Events kept per topic for resume with `since`.',
  }),
  v({
    name: 'WS_HISTORY_TTL_MS', key: 'historyTtlMs', section: 'History and idempotency',
    type: int(1000, 604_800_000, 'ms'), default: 600_000,
    doc: 'How long an event stays in history.',
  }),
  v({
    name: 'WS_POSITION_REFRESH_MS', key: 'positionRefreshMs', section: 'History and idempotency',
    type: zeroOrInt(1000, 3_600_000, 'ms; 0 sends none'), default: 1_800_000,
    doc: 'A joined topic without a durable event for this long gets a `position` frame with a fresh resume point, so that a ' +
      'subscriber of a quiet topic (keyed or ephemeral events only) can resume with `since` after any time connected. ' +
      'Each shard looks at 1000 of its topics a second, so a mark comes up to (topics per shard / 1000) s after it is due.',
  }),
  v({
    name: 'WS_IDEMPOTENCY_TTL_MS', key: 'idempotencyTtlMs', section: 'History and idempotency',
    type: int(1000, 86_400_000, 'ms'), default: 300_000,
    doc: 'How long a publish idempotency key is remembered.',
  }),

  // Tenant and IP limits
  v({
    name: 'WS_TENANT_MSG_LIMIT', key: 'tenantMsgLimit', section: 'Tenant, user and IP limits',
    type: int(1, 1_000_000_000, 'publishes per window'), default: 1000,
    doc: 'Publishes one tenant may make per `WS_TENANT_WINDOW_MS`, summed over every socket and node (sliding window); ' +
      'above it publishes get `tenant_rate_limited` with `retryAfterMs`.',
  }),
  v({
    name: 'WS_TENANT_WINDOW_MS', key: 'tenantWindowMs', section: 'Tenant, user and IP limits',
    type: int(100, 86_400_000, 'ms'), default: 1000,
    doc: 'Sliding window for `WS_TENANT_MSG_LIMIT`.',
  }),
  v({
    name: 'WS_IP_CONNECT_LIMIT', key: 'ipConnectLimit', section: 'Tenant, user and IP limits',
    type: int(1, 1_000_000_000, 'upgrade attempts per window'), default: 60,
    doc: 'Upgrade attempts one client address may make per `WS_IP_WINDOW_MS`, over every node (sliding window); above it upgrades get 429.',
  }),
  v({
    name: 'WS_IP_WINDOW_MS', key: 'ipWindowMs', section: 'Tenant, user and IP limits',
    type: int(100, 86_400_000, 'ms'), default: 60_000,
    doc: 'Sliding window for `WS_IP_CONNECT_LIMIT`.',
  }),
  v({
    name: 'WS_USER_MSG_LIMIT', key: 'userMsgLimit', section: 'Tenant, user and IP limits',
    type: int(0, 1_000_000_000, 'publishes per window; 0 = off'), default: 0,
    doc: 'Publishes one user (a token\'s `sub`, per tenant) may make per `WS_USER_WINDOW_MS`, summed over every socket of the user ' +
      'on every node (sliding window); above it publishes get `user_rate_limited` with `retryAfterMs`, which is not a strike. ' +
      'Applies with `WS_AUTH=jwt` (with `WS_AUTH=none` there are no users).',
  }),
  v({
    name: 'WS_USER_WINDOW_MS', key: 'userWindowMs', section: 'Tenant, user and IP limits',
    type: int(100, 86_400_000, 'ms'), default: 1000,
    doc: 'Sliding window for `WS_USER_MSG_LIMIT`.',
  }),
  v({
    name: 'WS_TENANT_CONNECT_LIMIT', key: 'tenantConnectLimit', section: 'Tenant, user and IP limits',
    type: int(0, 1_000_000_000, 'upgrade attempts per window; 0 = off'), default: 0,
    doc: 'Upgrade attempts with a valid token one tenant may make per `WS_TENANT_CONNECT_WINDOW_MS`, over every node (sliding window); ' +
      'above it upgrades get 429 `tenant_rate_limited` with `retryAfterMs` and `Retry-After`.',
  }),
  v({
    name: 'WS_TENANT_CONNECT_WINDOW_MS', key: 'tenantConnectWindowMs', section: 'Tenant, user and IP limits',
    type: int(100, 86_400_000, 'ms'), default: 1000,
    doc: 'Sliding window for `WS_TENANT_CONNECT_LIMIT`.',
  }),
  v({
    name: 'WS_MAX_USER_SOCKETS', key: 'maxUserSockets', section: 'Tenant, user and IP limits',
    type: int(0, 1_000_000, 'sockets; 0 = off'), default: 0,
    doc: 'Open sockets one user may hold across the cluster; the upgrade of one more gets 429 `too_many_sockets`. ' +
      'Applies with `WS_AUTH=jwt`. While Redis is unreachable it is not applied (upgrades go on, counted).',
  }),

  // Presence
  v({
    name: 'WS_PRESENCE_TOPICS', key: 'presenceTopics', section: 'Presence',
    type: topicPatterns(), default: undefined, defaultDoc: 'unset (no topic keeps presence)',
    doc: 'Topics that keep presence (who is joined, by user, across the cluster): `presence_state` after a join, batched `presence_diff`, ' +
      'the `presence` frame and `GET /v1/presence`. Patterns as in a token\'s rights: `room:42`, `room:*`, `*`.',
  }),
  v({
    name: 'WS_PRESENCE_DIFF_MS', key: 'presenceDiffMs', section: 'Presence',
    type: int(10, 60_000, 'ms'), default: 1000,
    doc: 'Joins and leaves of a presence topic are sent as at most one `presence_diff` per topic per socket in this time.',
  }),
  v({
    name: 'WS_PRESENCE_TTL_MS', key: 'presenceTtlMs', section: 'Presence',
    type: int(1000, 3_600_000, 'ms'), default: 30_000,
    doc: 'Cluster mode: a node that stops renewing its lease (it died, or lost Redis) has its users taken out of presence within this time. ' +
      'It renews every quarter of it.',
  }),
  v({
    name: 'WS_PRESENCE_MAX_USERS', key: 'presenceMaxUsers', section: 'Presence',
    type: int(1, 100_000, 'users'), default: 1000,
    doc: 'The most users a `presence_state` or presence answer lists; `count` is always the full number and `truncated` says the list is cut.',
  }),

  // Redis
  v({
    name: 'REDIS_URL', key: 'redisUrl', section: 'Redis',
    type: redisUrls(), default: undefined, defaultDoc: 'unset (embedded mode)', secret: true,
    doc: 'Cluster mode: fan-out across nodes, history and idempotency in Redis, cluster-wide tenant and IP windows. ' +
      'Unset: one node, everything in memory.',
  }),
  v({
    name: 'REDIS_CLUSTER', key: 'redisCluster', section: 'Redis',
    type: bool(), default: false,
    doc: '`REDIS_URL` names Redis Cluster seed nodes: sharded pub/sub (SSUBSCRIBE/SPUBLISH) and hash-tagged keys.',
  }),
  v({
    name: 'REDIS_SENTINELS', key: 'redisSentinels', section: 'Redis',
    type: hostPorts(), default: undefined, defaultDoc: 'unset',
    doc: 'Cluster mode on the master that these Redis Sentinels name (`REDIS_SENTINEL_NAME`); a failover moves every connection to the new master. ' +
      '`REDIS_URL` is then optional and gives only credentials, database and TLS (`rediss:`), not the address. Not with `REDIS_CLUSTER`.',
  }),
  v({
    name: 'REDIS_SENTINEL_NAME', key: 'redisSentinelName', section: 'Redis',
    type: masterName(), default: 'mymaster',
    doc: 'The master group the Sentinels monitor (`sentinel monitor <name> ...`). Only with `REDIS_SENTINELS`.',
  }),
  v({
    name: 'REDIS_SENTINEL_PASSWORD', key: 'redisSentinelPassword', section: 'Redis',
    type: text('a password'), default: undefined, defaultDoc: 'unset', secret: true,
    doc: 'The Sentinels\' own password (`requirepass` in sentinel.conf), when they have one. Only with `REDIS_SENTINELS`.',
  }),
  v({
    name: 'WS_REDIS_ACK_REPLICAS', key: 'redisAckReplicas', section: 'Redis',
    type: int(0, 16, 'replicas'), default: 0,
    doc: 'A durable publish is acknowledged only once this many replicas of its Redis master confirmed it (`WAIT`); on ' +
      '`WS_REDIS_ACK_TIMEOUT_MS` the publisher gets `unavailable` and resends with its idempotency key. 0: acknowledged once the master ' +
      'stored it, and a failover can lose what the replicas had not copied (docs/operations.md, Redis failover). Cluster mode only.',
  }),
  v({
    name: 'WS_REDIS_ACK_TIMEOUT_MS', key: 'redisAckTimeoutMs', section: 'Redis',
    type: int(10, 60_000, 'ms'), default: 1000,
    doc: 'How long a durable publish waits for `WS_REDIS_ACK_REPLICAS` replicas before it is answered `unavailable`.',
  }),
  v({
    name: 'WS_NODE_ANSWER_MS', key: 'nodeAnswerMs', section: 'Redis',
    type: int(100, 60_000, 'ms'), default: 1000,
    doc: 'Cluster mode: how long a question to the other nodes waits for their answers: a publish to users and `GET /v1/online` ' +
      '(which of the users each node holds), the admin views (`/v1/nodes`, `/v1/topics`, `/v1/connections`) and a drain of another node. ' +
      'A node that does not answer in time was still sent the event, but its users are not in `online` (a push goes to them), and the views ' +
      'show it `unresponsive`. Answers take milliseconds on a healthy network; raise it where a node can stall longer (a busy or shared host).',
  }),

  // Identity and upgrades
  v({
    name: 'WS_AUTH', key: 'auth', section: 'Identity and upgrades',
    type: oneOf(AUTH_MODES), default: 'none',
    doc: '`jwt`: every upgrade needs a valid token (header, `?token=` or `bearer.` subprotocol) whose claims decide user, tenant and topic rights. ' +
      '`hook`: every upgrade is asked of the backend at `WS_CONNECT_HOOK_URL`, whose answer decides them (docs/operations.md, Backend hooks). ' +
      '`none`: everyone is `anonymous` of tenant `default` and may join and publish anywhere; the start logs a warning.',
  }),
  v({
    name: 'WS_JWT_SECRET', key: 'jwtSecret', section: 'Identity and upgrades',
    type: text('at least 32 characters without control characters', 32), default: undefined, defaultDoc: 'unset', secret: true,
    doc: 'HS256 key for `WS_AUTH=jwt`. Set this or `WS_JWT_PUBLIC_KEY_FILE`, not both.',
  }),
  v({
    name: 'WS_JWT_PUBLIC_KEY_FILE', key: 'jwtPublicKeyFile', section: 'Identity and upgrades',
    type: text('a file path'), default: undefined, defaultDoc: 'unset',
    doc: 'PEM public key (RSA for RS256, P-256 for ES256) for `WS_AUTH=jwt`, read once at start.',
  }),
  v({
    name: 'WS_JWT_ISSUER', key: 'jwtIssuer', section: 'Identity and upgrades',
    type: text('a string without control characters'), default: undefined, defaultDoc: 'unset',
    doc: 'When set, a token\'s `iss` must equal it.',
  }),
  v({
    name: 'WS_JWT_AUDIENCE', key: 'jwtAudience', section: 'Identity and upgrades',
    type: text('a string without control characters'), default: undefined, defaultDoc: 'unset',
    doc: 'When set, a token\'s `aud` must be or contain it.',
  }),
  v({
    name: 'WS_ALLOWED_ORIGINS', key: 'allowedOrigins', section: 'Identity and upgrades',
    type: originList(), default: undefined, defaultDoc: 'unset (any origin)',
    doc: 'Browsers whose `Origin` is not listed get 403 `forbidden_origin` at the upgrade. A request without `Origin` (not a browser) is not affected.',
  }),
  v({
    name: 'WS_TRUST_PROXY', key: 'trustProxy', section: 'Identity and upgrades',
    type: int(0, 16, 'trusted proxy hops; 0 = none'), default: 0,
    doc: 'Proxies in front that append to `X-Forwarded-For`: the client address is the entry this many places from the right. ' +
      '0 uses the TCP peer and ignores the header.',
  }),
  v({
    name: 'WS_MAX_HEADER_BYTES', key: 'maxHeaderBytes', section: 'Identity and upgrades',
    type: int(1024, 65_536, 'bytes'), default: 8192,
    doc: 'Upgrade requests whose URL and headers together are larger get 431.',
  }),
  v({
    name: 'WS_REVOCATION_TTL_MS', key: 'revocationTtlMs', section: 'Identity and upgrades',
    type: int(1000, 31_536_000_000, 'ms'), default: 86_400_000,
    doc: 'How long a revocation (`POST /v1/revoke`) is kept: set it to at least the longest token lifetime, ' +
      'or a revoked token becomes usable again once its revocation is forgotten.',
  }),

  // Backend hooks
  v({
    name: 'WS_CONNECT_HOOK_URL', key: 'connectHookUrl', section: 'Backend hooks',
    type: httpUrl(), default: undefined, defaultDoc: 'unset', secret: true,
    doc: 'With `WS_AUTH=hook`: each upgrade POSTs its identity material (cookie, authorization, origin, client address, token) here and ' +
      'the answer is the socket\'s identity or a refusal; a `refresh` frame asks it again. Required with `WS_AUTH=hook`, refused without it.',
  }),
  v({
    name: 'WS_SUBSCRIBE_HOOK_URL', key: 'subscribeHookUrl', section: 'Backend hooks',
    type: httpUrl(), default: undefined, defaultDoc: 'unset', secret: true,
    doc: 'Joins of topics matching `WS_SUBSCRIBE_HOOK_TOPICS` are asked here (allow or deny, with a time the answer may be cached). ' +
      'Set both or neither.',
  }),
  v({
    name: 'WS_SUBSCRIBE_HOOK_TOPICS', key: 'subscribeHookTopics', section: 'Backend hooks',
    type: topicPatterns(), default: undefined, defaultDoc: 'unset',
    doc: 'Topic patterns whose joins ask `WS_SUBSCRIBE_HOOK_URL`, after the socket\'s own rights allowed the join.',
  }),
  v({
    name: 'WS_PUBLISH_HOOK_URL', key: 'publishHookUrl', section: 'Backend hooks',
    type: httpUrl(), default: undefined, defaultDoc: 'unset', secret: true,
    doc: 'Publishes to topics matching `WS_PUBLISH_HOOK_TOPICS` are asked here: accepted (optionally with new `data`) or refused; ' +
      'the ack follows the answer. Set both or neither.',
  }),
  v({
    name: 'WS_PUBLISH_HOOK_TOPICS', key: 'publishHookTopics', section: 'Backend hooks',
    type: topicPatterns(), default: undefined, defaultDoc: 'unset',
    doc: 'Topic patterns whose publishes ask `WS_PUBLISH_HOOK_URL`, after the socket\'s rights and limits allowed the publish.',
  }),
  v({
    name: 'WS_HOOK_TIMEOUT_MS', key: 'hookTimeoutMs', section: 'Backend hooks',
    type: int(10, 60_000, 'ms'), default: 1000,
    doc: 'A hook call not answered in this time fails: `unavailable` (503 with `Retry-After` at the upgrade).',
  }),
  v({
    name: 'WS_HOOK_MAX_INFLIGHT', key: 'hookMaxInflight', section: 'Backend hooks',
    type: int(1, 100_000, 'calls per hook per node'), default: 1000,
    doc: 'Calls of one hook waiting for the backend at once, across the node\'s shards; one more is refused at once with `unavailable`.',
  }),
  v({
    name: 'WS_HOOK_BREAKER_FAILURES', key: 'hookBreakerFailures', section: 'Backend hooks',
    type: int(1, 10_000, 'failures in a row'), default: 5,
    doc: 'Failures in a row (timeout, refused connection, non-2xx, an answer that is not the contract\'s) that open a hook\'s circuit breaker ' +
      'in a shard: while open, calls are answered `unavailable` without asking the backend.',
  }),
  v({
    name: 'WS_HOOK_BREAKER_MS', key: 'hookBreakerMs', section: 'Backend hooks',
    type: int(100, 600_000, 'ms'), default: 5000,
    doc: 'How long an open breaker refuses before one call probes the backend again; a success closes it, a failure opens it again.',
  }),
  v({
    name: 'WS_HOOK_MAX_RESPONSE_BYTES', key: 'hookMaxResponseBytes', section: 'Backend hooks',
    type: int(1024, 16_777_216, 'bytes'), default: 1_048_576,
    doc: 'A hook answer larger than this is cut off and counts as a failure of the backend.',
  }),
  v({
    name: 'WS_HOOK_SECRET', key: 'hookSecret', section: 'Backend hooks',
    type: text('at least 32 characters without control characters', 32), default: undefined, defaultDoc: 'unset (hook calls unsigned)', secret: true,
    doc: 'When set, every hook call carries `x-sluice-timestamp` and `x-sluice-signature` (HMAC-SHA256, as the webhooks), so the backend ' +
      'can tell the gateway from anyone else who reaches it.',
  }),
  v({
    name: 'WS_SUBSCRIBE_CACHE_SIZE', key: 'subscribeCacheSize', section: 'Backend hooks',
    type: int(0, 10_000_000, 'decisions per shard; 0 = no cache'), default: 100_000,
    doc: 'Subscribe-hook decisions a shard keeps per (tenant, user, topic) for the `cacheMs` the backend gave; the oldest go first.',
  }),

  // Lifecycle webhooks
  v({
    name: 'WS_WEBHOOK_URL', key: 'webhookUrl', section: 'Lifecycle webhooks',
    type: httpUrl(), default: undefined, defaultDoc: 'unset (no webhooks)', secret: true,
    doc: 'Lifecycle events (connect, disconnect, presence join and leave, topic occupied and vacated) are POSTed here in signed batches, ' +
      'at least once, each with an id to deduplicate by. Needs `WS_WEBHOOK_SECRET`.',
  }),
  v({
    name: 'WS_WEBHOOK_SECRET', key: 'webhookSecret', section: 'Lifecycle webhooks',
    type: text('at least 32 characters without control characters', 32), default: undefined, defaultDoc: 'unset', secret: true,
    doc: 'Key of the HMAC-SHA256 in `x-sluice-signature` over `<x-sluice-timestamp>.<body>`.',
  }),
  v({
    name: 'WS_WEBHOOK_EVENTS', key: 'webhookEvents', section: 'Lifecycle webhooks',
    type: eventList(), default: WEBHOOK_EVENTS.join(','), defaultDoc: 'every event',
    doc: 'The event types sent; the others are not even collected.',
  }),
  v({
    name: 'WS_WEBHOOK_BATCH_MAX', key: 'webhookBatchMax', section: 'Lifecycle webhooks',
    type: int(1, 10_000, 'events'), default: 100,
    doc: 'The most events in one POST.',
  }),
  v({
    name: 'WS_WEBHOOK_BATCH_MS', key: 'webhookBatchMs', section: 'Lifecycle webhooks',
    type: int(1, 60_000, 'ms'), default: 200,
    doc: 'The longest an event waits for others to share its POST.',
  }),
  v({
    name: 'WS_WEBHOOK_QUEUE_MAX', key: 'webhookQueueMax', section: 'Lifecycle webhooks',
    type: int(1, 10_000_000, 'events'), default: 100_000,
    doc: 'Events a node keeps while the receiver is slow or down; beyond it the oldest are dropped and counted ' +
      '(`sluice_webhook_events_dropped_total`).',
  }),
  v({
    name: 'WS_WEBHOOK_TIMEOUT_MS', key: 'webhookTimeoutMs', section: 'Lifecycle webhooks',
    type: int(10, 120_000, 'ms'), default: 5000,
    doc: 'A POST not answered 2xx in this time failed, and is retried.',
  }),
  v({
    name: 'WS_WEBHOOK_RETRY_MAX_MS', key: 'webhookRetryMaxMs', section: 'Lifecycle webhooks',
    type: int(10, 3_600_000, 'ms'), default: 30_000,
    doc: 'Retries wait twice as long each time, with full jitter, up to this.',
  }),

  // Offline push
  v({
    name: 'WS_PUSH_QUEUE', key: 'pushQueue', section: 'Offline push',
    type: queueName(), default: 'sluice-push',
    doc: 'The BullMQ queue (on `REDIS_URL`) that `POST /v1/publish` with `push` adds jobs to, and `pnpm push-worker` takes them from.',
  }),
  v({
    name: 'WS_PUSH_MAX_DELAY_MS', key: 'pushMaxDelayMs', section: 'Offline push',
    type: int(0, 86_400_000, 'ms'), default: 3_600_000,
    doc: 'The largest `push.delayMs` a publish may ask for.',
  }),

  // Admin and observability
  v({
    name: 'ADMIN_TOKEN', key: 'adminToken', section: 'Admin and observability',
    type: secretToken(), default: undefined, defaultDoc: 'unset', secret: true,
    doc: 'Every admin endpoint but `/health/*` and `/metrics` requires `Authorization: Bearer <token>`. ' +
      'With `WS_AUTH=jwt` the start is refused without it unless `ADMIN_INSECURE=1`; with `WS_AUTH=none` and no token the admin API ' +
      'is open to anyone who reaches the admin port, and the start logs a warning.',
  }),
  v({
    name: 'ADMIN_INSECURE', key: 'adminInsecure', section: 'Admin and observability',
    type: bool(), default: false,
    doc: 'Says that the admin port is reachable only by trusted callers: with `WS_AUTH=jwt` and no `ADMIN_TOKEN` the gateway starts, ' +
      'its admin API open, with a warning.',
  }),
  v({
    name: 'LOG_LEVEL', key: 'logLevel', section: 'Admin and observability',
    type: oneOf(LOG_LEVELS), default: 'info',
    doc: 'Least severe level written to the log; `silent` writes nothing.',
  }),
  v({
    name: 'WS_METRICS_WAIT_MS', key: 'metricsWaitMs', section: 'Admin and observability',
    type: int(1, 10_000, 'ms'), default: 25,
    doc: 'How long `/metrics` waits for each shard thread\'s fresh figures. A shard busy for longer (a large fan-out on a loaded ' +
      'machine) is stood in for by its previous answer, and its late answer is kept for the next scrape: figures at most one scrape ' +
      'old, counters never going back, and a scrape as quick as the coordinator alone. A shard that has not answered any scrape yet is ' +
      'waited for up to 2 s.',
  }),
  v({
    name: 'WS_TRACING_MODULE', key: 'tracingModule', section: 'Admin and observability',
    type: text('a path to an ES module file (absolute, or relative to the working directory)'), default: undefined, defaultDoc: 'unset (no spans)',
    doc: 'OpenTelemetry tracing: an ES module that registers an SDK (tracer provider and exporter) with `@opentelemetry/api`. ' +
      'Every thread (the coordinator and each shard) imports it at start, since each thread has its own API globals; a module ' +
      'that fails to load stops the start. Sluice bundles no SDK. Unset: no span is made and no tracing code runs.',
  }),
];

// Compile-time guard: a Config field with no schema entry makes this a type error naming the field.
type Unschemed = Exclude<keyof Config, (typeof schema)[number]['key']>;
const _everyFieldHasAVariable: [Unschemed] extends [never] ? true : Unschemed = true;

export const configSchema: readonly ConfigVar[] = Object.freeze(schema);

const byName = new Map<string, ConfigVar>(configSchema.map((spec) => [spec.name, spec]));

/** Pairs that must satisfy low <= high once each parses on its own. */
const ORDERED_PAIRS: readonly { readonly low: string; readonly high: string }[] = [
  { low: 'WS_MAX_FRAME_BYTES', high: 'WS_HARD_MAX_FRAME_BYTES' },
  { low: 'WS_RETRY_AFTER_MIN_MS', high: 'WS_RETRY_AFTER_MAX_MS' },
];

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly problems: readonly ConfigProblem[];

  constructor(problems: readonly ConfigProblem[]) {
    const count = `${problems.length} problem${problems.length === 1 ? '' : 's'}`;
    const lines = problems.map((p) => `  ${p.name}=${JSON.stringify(p.value)}: expected ${p.accepts}`);
    super(`Invalid configuration (${count}):\n${lines.join('\n')}`);
    this.problems = Object.freeze(problems.map((p) => Object.freeze({ ...p })));
  }
}

function parseValue(spec: ConfigVar, raw: string): Parsed<unknown> {
  // Trimming would hide a stray quote or newline from the deploy file; refuse instead, and say why.
  if (raw.trim() !== raw) {
    return { ok: false, accepts: `${spec.type.accepts}, without leading or trailing whitespace` };
  }
  return spec.type.parse(raw);
}

/**
 * Reads every variable of the schema from env once. An unset or empty
 * variable takes its default. Throws one ConfigError listing every bad
 * value; otherwise returns a frozen Config and warnings for unknown WS_*
 * variables.
 */
export function loadConfig(
  env: Readonly<Record<string, string | undefined>>,
  host: ConfigHost,
): { config: Config; warnings: string[] } {
  const problems: ConfigProblem[] = [];
  const values: Record<string, unknown> = {};
  const invalid = new Set<string>();

  for (const spec of configSchema) {
    const raw = env[spec.name];
    if (raw === undefined || raw === '') {
      values[spec.key] = typeof spec.default === 'function' ? spec.default(host) : spec.default;
      continue;
    }
    const parsed = parseValue(spec, raw);
    if (parsed.ok) {
      values[spec.key] = parsed.value;
    } else {
      invalid.add(spec.name);
      problems.push({ name: spec.name, value: spec.secret ? REDACTED : raw, accepts: parsed.accepts });
    }
  }

  for (const { low, high } of ORDERED_PAIRS) {
    if (invalid.has(low) || invalid.has(high)) continue;
    const lowSpec = byName.get(low)!;
    const highSpec = byName.get(high)!;
    const lowValue = values[lowSpec.key] as number;
    const highValue = values[highSpec.key] as number;
    if (lowValue <= highValue) continue;
    // Blame the variable the operator set; if both are set, the upper bound.
    const describe = (name: string, value: number) => `${name} (${value}${isSet(env, name) ? '' : ', its default'})`;
    if (isSet(env, high) || !isSet(env, low)) {
      problems.push({ name: high, value: env[high] ?? String(highValue), accepts: `at least ${describe(low, lowValue)}` });
    } else {
      problems.push({ name: low, value: env[low] ?? String(lowValue), accepts: `at most ${describe(high, highValue)}` });
    }
  }

  problems.push(...authProblems(env, values, invalid));
  problems.push(...hookProblems(env, values, invalid));
  if ((values.auth === 'jwt' || values.auth === 'hook') && values.adminToken === undefined && values.adminInsecure !== true &&
    !invalid.has('ADMIN_TOKEN') && !invalid.has('ADMIN_INSECURE')) {
    problems.push({ name: 'ADMIN_TOKEN', value: '', accepts: `a token for the admin API with WS_AUTH=${String(values.auth)} ` +
      '(or ADMIN_INSECURE=1 when only trusted callers reach ADMIN_PORT)' });
  }
  problems.push(...redisProblems(env, values, invalid));
  if (!invalid.has('REDIS_URL') && !invalid.has('REDIS_CLUSTER') && values.redisSentinels === undefined) {
    if (values.redisCluster === true && values.redisUrl === undefined) {
      problems.push({ name: 'REDIS_URL', value: '', accepts: 'the seed nodes of the Redis Cluster (REDIS_CLUSTER=1 is set)' });
    } else if (values.redisCluster !== true && typeof values.redisUrl === 'string' && values.redisUrl.includes(',')) {
      problems.push({ name: 'REDIS_URL', value: REDACTED, accepts: 'one URL unless REDIS_CLUSTER=1' });
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
  // The Sentinels alone turn cluster mode on; the URL then carries no address.
  if (values.redisSentinels !== undefined && values.redisUrl === undefined) values.redisUrl = `redis://${String(values.redisSentinelName)}`;

  const warnings: string[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith('WS_') || byName.has(name)) continue;
    const near = closestName(name);
    warnings.push(`unknown variable ${name}${near === undefined ? '' : `, did you mean ${near}?`}`);
  }

  // Config holds only primitives, so freezing the object freezes it deeply.
  return { config: Object.freeze(values) as unknown as Config, warnings };
}

/** Sentinels are one way to name Redis (not with a Cluster, one URL at most); their settings and replica acks need them or a URL. */
function redisProblems(env: Readonly<Record<string, string | undefined>>, values: Record<string, unknown>,
  invalid: ReadonlySet<string>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const sentinels = values.redisSentinels !== undefined;
  if (sentinels && !invalid.has('REDIS_SENTINELS')) {
    if (values.redisCluster === true && !invalid.has('REDIS_CLUSTER')) {
      problems.push({ name: 'REDIS_CLUSTER', value: env.REDIS_CLUSTER!, accepts: 'unset with REDIS_SENTINELS (Sentinel watches one master; a Cluster fails over by itself)' });
    } else if (typeof values.redisUrl === 'string' && values.redisUrl.includes(',')) {
      problems.push({ name: 'REDIS_URL', value: REDACTED, accepts: 'one URL with REDIS_SENTINELS (its credentials, database and scheme; the Sentinels name the master)' });
    }
  }
  if (!sentinels && !invalid.has('REDIS_SENTINELS')) {
    for (const name of ['REDIS_SENTINEL_NAME', 'REDIS_SENTINEL_PASSWORD']) {
      if (isSet(env, name) && !invalid.has(name)) {
        problems.push({ name, value: byName.get(name)!.secret ? REDACTED : env[name]!, accepts: 'unset unless REDIS_SENTINELS is set' });
      }
    }
  }
  if (values.redisAckReplicas !== 0 && !invalid.has('WS_REDIS_ACK_REPLICAS') && values.redisUrl === undefined && !sentinels &&
    !invalid.has('REDIS_URL') && !invalid.has('REDIS_SENTINELS')) {
    problems.push({ name: 'WS_REDIS_ACK_REPLICAS', value: env.WS_REDIS_ACK_REPLICAS!,
      accepts: '0 in embedded mode (replicas are Redis\'s: set REDIS_URL or REDIS_SENTINELS)' });
  }
  return problems;
}

/** WS_AUTH=jwt needs exactly one key; a key without WS_AUTH=jwt would leave the gateway open while the operator thinks it is not. */
function authProblems(env: Readonly<Record<string, string | undefined>>, values: Record<string, unknown>,
  invalid: ReadonlySet<string>): ConfigProblem[] {
  if (invalid.has('WS_AUTH')) return [];
  const keys = ['WS_JWT_SECRET', 'WS_JWT_PUBLIC_KEY_FILE'].filter((n) => isSet(env, n));
  if (keys.some((n) => invalid.has(n))) return [];
  const shown = (name: string) => (byName.get(name)!.secret ? REDACTED : env[name]!);
  if (values.auth === 'jwt') {
    if (keys.length === 1) return [];
    if (keys.length === 0) {
      return [{ name: 'WS_JWT_SECRET', value: '', accepts: 'a key for WS_AUTH=jwt: set WS_JWT_SECRET or WS_JWT_PUBLIC_KEY_FILE' }];
    }
    return [{ name: 'WS_JWT_PUBLIC_KEY_FILE', value: shown('WS_JWT_PUBLIC_KEY_FILE'), accepts: 'unset when WS_JWT_SECRET is set (one key, one algorithm)' }];
  }
  return ['WS_JWT_SECRET', 'WS_JWT_PUBLIC_KEY_FILE', 'WS_JWT_ISSUER', 'WS_JWT_AUDIENCE'].filter((n) => isSet(env, n) && !invalid.has(n))
    .map((name) => ({ name, value: shown(name), accepts: `unset unless WS_AUTH=jwt (tokens are not checked with WS_AUTH=${String(values.auth)})` }));
}

/** WS_AUTH=hook and its URL go together; so do each hook's URL and topics, and the webhook URL and its secret; presence's TTL holds a flush. */
function hookProblems(env: Readonly<Record<string, string | undefined>>, values: Record<string, unknown>,
  invalid: ReadonlySet<string>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const shown = (name: string) => (byName.get(name)!.secret ? REDACTED : env[name] ?? '');
  if (!invalid.has('WS_AUTH') && !invalid.has('WS_CONNECT_HOOK_URL')) {
    if (values.auth === 'hook' && values.connectHookUrl === undefined) {
      problems.push({ name: 'WS_CONNECT_HOOK_URL', value: '', accepts: 'the backend URL that decides identities (WS_AUTH=hook is set)' });
    } else if (values.auth !== 'hook' && values.connectHookUrl !== undefined) {
      problems.push({ name: 'WS_CONNECT_HOOK_URL', value: shown('WS_CONNECT_HOOK_URL'), accepts: 'unset unless WS_AUTH=hook' });
    }
  }
  const pairs: readonly (readonly [string, string, string])[] = [
    ['WS_SUBSCRIBE_HOOK_URL', 'WS_SUBSCRIBE_HOOK_TOPICS', 'the topics whose joins ask'],
    ['WS_PUBLISH_HOOK_URL', 'WS_PUBLISH_HOOK_TOPICS', 'the topics whose publishes ask'],
    ['WS_WEBHOOK_URL', 'WS_WEBHOOK_SECRET', 'the key that signs the webhooks of'],
  ];
  for (const [url, other, what] of pairs) {
    if (invalid.has(url) || invalid.has(other)) continue;
    if (isSet(env, url) && !isSet(env, other)) problems.push({ name: other, value: '', accepts: `${what} ${url} (it is set)` });
    else if (!isSet(env, url) && isSet(env, other)) problems.push({ name: other, value: shown(other), accepts: `unset unless ${url} is set` });
  }
  if (!invalid.has('WS_PRESENCE_TTL_MS') && !invalid.has('WS_PRESENCE_DIFF_MS') &&
    (values.presenceTtlMs as number) < 4 * (values.presenceDiffMs as number)) {
    // A lease of TTL/2, a renewal every TTL/4 and a flush must fit in the TTL.
    const name = isSet(env, 'WS_PRESENCE_TTL_MS') || !isSet(env, 'WS_PRESENCE_DIFF_MS') ? 'WS_PRESENCE_TTL_MS' : 'WS_PRESENCE_DIFF_MS';
    problems.push(name === 'WS_PRESENCE_TTL_MS'
      ? { name, value: String(values.presenceTtlMs), accepts: `at least 4 × WS_PRESENCE_DIFF_MS (${String(values.presenceDiffMs)})` }
      : { name, value: String(values.presenceDiffMs), accepts: `at most WS_PRESENCE_TTL_MS / 4 (${String(values.presenceTtlMs)} / 4)` });
  }
  return problems;
}

function isSet(env: Readonly<Record<string, string | undefined>>, name: string): boolean {
  const raw = env[name];
  return raw !== undefined && raw !== '';
}

function closestName(name: string): string | undefined {
  // Typos are a letter or three; a larger allowance would suggest unrelated names.
  const allowance = Math.min(3, Math.floor(name.length / 3));
  let best: string | undefined;
  let bestDistance = allowance + 1;
  for (const candidate of byName.keys()) {
    const d = editDistance(name, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1);
      row.push(Math.min(prev[j]! + 1, row[j - 1]! + 1, substitution));
    }
    prev = row;
  }
  return prev[b.length]!;
}

export type RedactedConfig = { -readonly [K in keyof Config]: Config[K] | typeof REDACTED };

/** A plain copy of config for logging, with every set secret replaced by "[redacted]". */
export function redactedConfig(config: Config): RedactedConfig {
  const copy: RedactedConfig = { ...config };
  for (const spec of configSchema) {
    if (spec.secret && copy[spec.key] !== undefined) copy[spec.key] = REDACTED;
  }
  return copy;
}

/** Markdown for docs/configuration.md. */
export function renderConfigDoc(): string {
  const lines = [
    '# Configuration',
    '',
    'This file is generated from `packages/core/src/config.ts` by `pnpm docs:config`; do not edit it by hand.',
    '',
    'The gateway reads every variable below once, at start. An unset or empty variable takes its default. ' +
      'Integers are decimal digits only (no sign, exponent, separator or unit) and must lie in the stated range; ' +
      'a value with leading or trailing whitespace is rejected, not trimmed. ' +
      'A bad value stops the start with one message that lists every problem: the variable, its value and what it accepts. ' +
      'An unknown `WS_*` variable is logged as a warning, with the closest known name when there is one.',
  ];
  for (const section of CONFIG_SECTIONS) {
    lines.push('', `## ${section}`, '', '| Variable | Default | Unit/accepted values | Description |', '|---|---|---|---|');
    for (const spec of configSchema.filter((s) => s.section === section)) {
      const description = spec.doc + orderNote(spec.name) + (spec.secret ? ' Secret: shown as `[redacted]` in logs and errors.' : '');
      const cells = [`\`${spec.name}\``, defaultCell(spec), spec.type.accepts.replace(/^an? /, ''), description];
      lines.push(`| ${cells.map((c) => c.replaceAll('|', '\\|')).join(' | ')} |`);
    }
  }
  return `${lines.join('\n')}\n`;
}

function defaultCell(spec: ConfigVar): string {
  if (spec.defaultDoc !== undefined) return spec.defaultDoc;
  return typeof spec.default === 'function' ? 'computed at start' : `\`${String(spec.default)}\``;
}

function orderNote(name: string): string {
  const notes: string[] = [];
  for (const { low, high } of ORDERED_PAIRS) {
    if (name === low) notes.push(` Must be at most \`${high}\`.`);
    if (name === high) notes.push(` Must be at least \`${low}\`.`);
  }
  return notes.join('');
}
