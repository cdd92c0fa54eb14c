import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { type Config, type ControlCommand, describeCommand, type DisconnectTarget, hasControlChar, type HistoryRequest, type HistoryResult,
  MAX_SUB_LENGTH, type PublishRequest, type PublishResult } from '@sluice/core';
import { decodeFrameObject, encodeEventFrame, EVENT_ID_PATTERN, type PublishFrame, TOPIC_PATTERN, TRACEPARENT_PATTERN, USER_TOPIC } from '@sluice/protocol';
import type { Logger } from '@sluice/telemetry';
import type { AdminViews } from './admin-views.ts';
import { DRAIN_VALID_MS, MAX_TOP_TOPICS, RedisUnavailable } from './control-plane.ts';
import { keepsPresence, presencePatterns } from './presence-hub.ts';
import type { PushRequest, PushResult } from './push-queue.ts';

/** What a publish to users came to: the users among those named that had a socket open, or not sent at all. */
export type UsersResult = { readonly ok: true; readonly online: readonly string[] } | { readonly ok: false; readonly reason: 'unavailable'; readonly message: string };

/** What a server-side control command came to: taken (it reaches every node within 1 s), or not taken at all. */
export type ControlResult = { readonly ok: true } | { readonly ok: false; readonly reason: 'unavailable'; readonly message: string };

export interface AdminDeps {
  readonly config: Config;
  readonly log: Logger;
  ready(): boolean;
  metrics(): Promise<{ text: string; contentType: string }>;
  publish(req: PublishRequest): Promise<PublishResult>;
  /** Reads a topic's durable history: embedded mode on the shard that owns the topic, cluster mode from Redis. */
  history(req: HistoryRequest): Promise<HistoryResult>;
  /** Sends a command to every shard of every node. Resolves once it is on its way (cluster mode: Redis took it). */
  control(cmd: ControlCommand): Promise<ControlResult>;
  /** A presence topic's `data` (JSON) now, from its owner; undefined when that is unavailable. */
  presence(tenant: string, topic: string): Promise<string | undefined>;
  /** Sends one `$user` event frame to every open socket of `users` (of `tenant`) on every node. */
  toUsers(tenant: string, users: readonly string[], frame: string): Promise<UsersResult>;
  /** Which of `users` (of `tenant`) have a socket open on some node now; nothing is sent. */
  online(tenant: string, users: readonly string[]): Promise<UsersResult>;
  /** Offline push: a job per user of `users`; undefined in embedded mode (no BullMQ). */
  push: ((tenant: string, users: readonly string[], push: PushRequest) => Promise<PushResult>) | undefined;
  /** Starts the drain, as SIGTERM does; the admin server keeps answering until the process exits. */
  drain(): void;
  /** The admin page's views of the cluster and the drain of a named node. */
  readonly views: AdminViews;
  /** The admin page's built files (index.html, assets/); GET /ui answers 503 when they are not there. */
  readonly uiDir: URL;
}

/** Every route the admin server answers; docs/admin-api.openapi.json documents each (a test holds the two together). */
export const ADMIN_ROUTES = [
  { method: 'GET', path: '/health/live', auth: false },
  { method: 'GET', path: '/health/ready', auth: false },
  { method: 'GET', path: '/metrics', auth: false },
  { method: 'POST', path: '/v1/publish', auth: true },
  { method: 'GET', path: '/v1/history', auth: true },
  { method: 'GET', path: '/v1/presence', auth: true },
  { method: 'GET', path: '/v1/online', auth: true },
  { method: 'POST', path: '/v1/revoke', auth: true },
  { method: 'POST', path: '/v1/disconnect', auth: true },
  { method: 'POST', path: '/v1/subscribe', auth: true },
  { method: 'POST', path: '/v1/unsubscribe', auth: true },
  { method: 'POST', path: '/admin/drain', auth: true },
  { method: 'GET', path: '/v1/nodes', auth: true },
  { method: 'GET', path: '/v1/topics', auth: true },
  { method: 'GET', path: '/v1/connections', auth: true },
  { method: 'GET', path: '/ui', auth: false },
  { method: 'GET', path: '/ui/assets/{file}', auth: false },
] as const satisfies readonly { method: string; path: string; auth: boolean }[];

type Route = (typeof ADMIN_ROUTES)[number];

/** The largest body a control request (revoke, disconnect, subscribe) may have: its fields are short. */
const CONTROL_BODY_BYTES = 16 * 1024;
const CONNECTION_ID = /^[A-Za-z0-9.]{1,200}$/;
const TENANT_RULE = 'tenant must match ^[A-Za-z0-9:_.\\-]{1,200}$';

/** An error answer: every one has a reason and a message. */
class Refused {
  constructor(readonly status: number, readonly reason: string, readonly message: string, readonly headers: Record<string, string> = {},
    /** More fields of the answer, after reason and message. */
    readonly extra: Record<string, unknown> = {}) {}
}

/**
 * The admin HTTP server (ADMIN_PORT): health, metrics, server-side publish,
 * history reads, control (revoke, disconnect, subscribe, unsubscribe) and
 * the drain.
 * Plain node:http: nothing here is on the hot path.
 *
 * Every route but /health/* and /metrics needs `Authorization: Bearer
 * $ADMIN_TOKEN` when it is set (config refuses WS_AUTH=jwt without it unless
 * ADMIN_INSECURE=1). Every error answer is `{"reason","message"}`. No
 * request can take the process down: a handler that throws or whose
 * dependency rejects is logged and answered 500 `internal` (or, when the
 * answer had begun, the connection is cut).
 */
export function createAdminServer(deps: AdminDeps): Server {
  const token = deps.config.adminToken === undefined ? undefined : Buffer.from(`Bearer ${deps.config.adminToken}`);
  const authorized = (req: IncomingMessage): boolean => {
    if (token === undefined) return true;
    const got = Buffer.from(req.headers.authorization ?? '');
    return got.length === token.length && timingSafeEqual(got, token);
  };
  const presenceTopics = presencePatterns(deps.config);
  const byPath = new Map<string, Route[]>();
  for (const r of ADMIN_ROUTES) byPath.set(r.path, [...(byPath.get(r.path) ?? []), r]);

  const failed = (res: ServerResponse, route: string) => (err: unknown): void => {
    if (err instanceof Refused) {
      if (!res.headersSent) json(res, err.status, { reason: err.reason, message: err.message, ...err.extra }, err.headers);
      return;
    }
    deps.log.error({ err, route }, 'admin request failed');
    if (!res.headersSent) json(res, 500, { reason: 'internal', message: 'the request failed inside the gateway; see its log' });
    else res.destroy();
  };

  const ui = new UiFiles(deps.uiDir, deps.config.adminToken !== undefined);
  return createServer((req, res) => {
    let path = (req.url ?? '/').split('?')[0]!;
    // The page's assets are one route (their names are the build's).
    if (path.startsWith('/ui/assets/')) path = '/ui/assets/{file}';
    else if (path === '/ui/' || path === '/ui/index.html') path = '/ui';
    const route = `${req.method} ${path}`;
    // handle is async: whatever it throws arrives here as a rejection.
    handle(req, res, path).catch(failed(res, route));
  });

  async function handle(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const routes = byPath.get(path);
    if (routes === undefined) throw new Refused(404, 'not_found', `no admin route ${path}`);
    const r = routes.find((x) => x.method === req.method);
    if (r === undefined) {
      const allow = routes.map((x) => x.method).join(', ');
      throw new Refused(405, 'method_not_allowed', `${path} answers ${allow}`, { allow });
    }
    if (r.auth && !authorized(req)) {
      throw new Refused(401, 'unauthorized', 'this route needs Authorization: Bearer <ADMIN_TOKEN>', { 'www-authenticate': 'Bearer' });
    }
    // A browser sends Origin with a cross-site POST: a page elsewhere must not act through an operator's browser
    // (without ADMIN_TOKEN nothing else would stop it). Backends and curl send no Origin.
    if (req.method === 'POST' && crossOrigin(req)) {
      throw new Refused(403, 'forbidden', 'a POST from a page of another origin is refused: the admin API acts only for its own page and for clients without Origin');
    }
    switch (r.path) {
      case '/health/live':
        return json(res, 200, { status: 'live' });
      case '/health/ready':
        return deps.ready() ? json(res, 200, { status: 'ready' }) : json(res, 503, { status: 'unavailable' });
      case '/metrics': {
        let m: { text: string; contentType: string };
        try {
          m = await deps.metrics();
        } catch (err) {
          deps.log.warn({ err }, 'metrics collection failed');
          throw new Refused(500, 'internal', 'collecting the metrics failed; see the log');
        }
        res.writeHead(200, { 'content-type': m.contentType });
        res.end(m.text);
        return;
      }
      case '/v1/publish': {
        const body = await readJson(req, deps.config.hardMaxFrameBytes);
        if (sourceOf(req) !== 'ui') return publish(deps, req, body, res);
        // A person's publish from the admin page is an action, and logged as one, with its outcome; a backend's
        // publishes are traffic, and are not.
        const what = { tenant: body.tenant ?? 'default', topic: body.topic, topics: body.topics, users: body.users, from: req.socket.remoteAddress,
          source: 'ui' };
        try {
          await publish(deps, req, body, res);
        } catch (err) {
          deps.log.info({ ...what, refused: err instanceof Refused ? err.reason : 'internal' }, 'admin: publish refused');
          throw err;
        }
        deps.log.info({ ...what, status: res.statusCode }, 'admin: publish');
        return;
      }
      case '/v1/history': {
        const result = await deps.history(historyRequest(req.url ?? path));
        if (!result.ok) throw new Refused(result.reason === 'unavailable' ? 503 : 500, result.reason, result.message);
        return send(res, 200, historyBody(result.events, result.recovered));
      }
      case '/v1/revoke':
      case '/v1/disconnect':
      case '/v1/subscribe':
      case '/v1/unsubscribe': {
        const cmd = controlCommand(r.path, await readJson(req, CONTROL_BODY_BYTES), deps.config, Date.now());
        deps.log.info({ ...describeCommand(cmd), from: req.socket.remoteAddress, source: sourceOf(req) }, `admin: ${r.path.slice(4)}`);
        const result = await deps.control(cmd);
        if (!result.ok) throw new Refused(503, result.reason, result.message);
        return json(res, 202, { status: r.path === '/v1/revoke' ? 'revoked' : 'accepted' });
      }
      case '/v1/presence': {
        const q = query(req.url ?? path, '/v1/presence', ['tenant', 'topic']);
        const tenant = q.get('tenant') ?? 'default';
        if (!TOPIC_PATTERN.test(tenant)) throw bad(TENANT_RULE);
        const topic = q.get('topic');
        if (topic === undefined || !TOPIC_PATTERN.test(topic)) throw bad('topic must be given and match ^[A-Za-z0-9:_.\\-]{1,200}$');
        if (!keepsPresence(presenceTopics, topic)) throw bad(`${topic} does not keep presence (WS_PRESENCE_TOPICS)`);
        const data = await deps.presence(tenant, topic);
        if (data === undefined) throw new Refused(503, 'unavailable', 'the shard that holds the topic\'s presence is unavailable now; retry');
        return send(res, 200, data);
      }
      case '/v1/online': {
        const { tenant, users } = onlineRequest(req.url ?? path);
        const result = await deps.online(tenant, users);
        if (!result.ok) throw new Refused(503, result.reason, 'the nodes could not be asked now (redis did not take the request); retry');
        return json(res, 200, { online: result.online });
      }
      case '/admin/drain': {
        const node = drainTarget(await readJson(req, CONTROL_BODY_BYTES, true));
        const self = node === undefined || node === deps.views.selfId;
        deps.log.info({ from: req.socket.remoteAddress, node: node ?? 'this node', source: sourceOf(req) }, 'drain requested on the admin port');
        if (!self && deps.config.adminToken === undefined) {
          throw bad('draining another node needs ADMIN_TOKEN: the request to it is signed with it, so that no Redis client can stop a node');
        }
        if (self) {
          deps.drain();
          return json(res, 202, { status: 'draining', node: deps.views.selfId });
        }
        const r = await unlessRedisDown(deps.views.drain(node));
        if (r === 'unknown') throw new Refused(404, 'not_found', `no node ${node} is alive in the cluster (GET /v1/nodes lists them)`);
        if (r === 'unanswered') {
          throw new Refused(503, 'unavailable', `node ${node} did not confirm the drain within ${deps.config.nodeAnswerMs} ms: it drains if the request reaches it within ` +
            `${DRAIN_VALID_MS / 1000} s, else not; check GET /v1/nodes before you retry`);
        }
        return json(res, 202, { status: 'draining', node });
      }
      case '/v1/nodes':
        query(req.url ?? path, '/v1/nodes', []);
        return json(res, 200, await unlessRedisDown(deps.views.nodes()));
      case '/v1/topics': {
        const q = query(req.url ?? path, '/v1/topics', ['tenant', 'limit']);
        const tenant = q.get('tenant');
        if (tenant !== undefined && !TOPIC_PATTERN.test(tenant)) throw bad(TENANT_RULE);
        const limit = wholeNumber(q.get('limit'), 'limit', 1, MAX_TOP_TOPICS, 20);
        const r = await unlessRedisDown(deps.views.topics(tenant, limit));
        return json(res, 200, { topics: r.topics, unanswered: r.unanswered, at: Date.now() });
      }
      case '/v1/connections': {
        const q = query(req.url ?? path, '/v1/connections', ['tenant', 'user']);
        const tenant = q.get('tenant') ?? 'default';
        if (!TOPIC_PATTERN.test(tenant)) throw bad(TENANT_RULE);
        const user = subject(q.get('user'), 'user');
        return json(res, 200, await unlessRedisDown(deps.views.connections(tenant, user)));
      }
      case '/ui':
      case '/ui/assets/{file}':
        return ui.serve(req, res);
    }
  }
}

/**
 * A GET's query, or a 400 naming a parameter that is not one of `allowed`
 * or that is given twice. As with the bodies, an unknown parameter is
 * refused: a typo (`?sinc=`) must not turn into another request.
 */
function query(url: string, route: string, allowed: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const [k, v] of new URL(url, 'http://admin').searchParams) {
    if (!allowed.includes(k)) throw bad(`unknown query parameter ${JSON.stringify(k)}; ${route} takes ${allowed.length === 0 ? 'no query parameter' : allowed.join(', ')}`);
    if (out.has(k)) throw bad(`${k} is given twice`);
    out.set(k, v);
  }
  return out;
}

/**
 * A control request's body as a command, or a 400 that names the field.
 * Unknown fields are refused: a typo (`usr`) must not turn into a request
 * that names nobody.
 */
export function controlCommand(path: '/v1/revoke' | '/v1/disconnect' | '/v1/subscribe' | '/v1/unsubscribe', body: Record<string, unknown>,
  cfg: Pick<Config, 'auth' | 'revocationTtlMs'>, now: number): ControlCommand {
  const allowed: Record<typeof path, readonly string[]> = {
    '/v1/revoke': ['tenant', 'user', 'jti'],
    '/v1/disconnect': ['tenant', 'user', 'connectionId', 'reconnect'],
    '/v1/subscribe': ['tenant', 'user', 'topic'],
    '/v1/unsubscribe': ['tenant', 'user', 'topic'],
  };
  for (const k of Object.keys(body)) {
    if (!allowed[path].includes(k)) throw bad(`unknown field ${JSON.stringify(k)}; ${path} takes ${allowed[path].join(', ')}`);
  }
  const tenant = body.tenant ?? 'default';
  if (typeof tenant !== 'string' || !TOPIC_PATTERN.test(tenant)) throw bad(TENANT_RULE);
  switch (path) {
    case '/v1/revoke': {
      if (cfg.auth === 'none') throw bad('revocation needs WS_AUTH=jwt or hook: this gateway takes no tokens');
      const { user, jti } = body;
      if ((user === undefined) === (jti === undefined)) throw bad('name exactly one of user (every token of the user) and jti (one token)');
      const expiresAt = now + cfg.revocationTtlMs;
      if (user !== undefined) return { op: 'revoke', revocation: { kind: 'user', tenant, user: subject(user, 'user'), at: now, expiresAt } };
      return { op: 'revoke', revocation: { kind: 'token', tenant, jti: subject(jti, 'jti'), expiresAt } };
    }
    case '/v1/disconnect': {
      const { user, connectionId, reconnect = false } = body;
      if (typeof reconnect !== 'boolean') throw bad('reconnect must be true or false');
      if ((user === undefined) === (connectionId === undefined)) throw bad('name exactly one of user and connectionId');
      let target: DisconnectTarget;
      if (user !== undefined) target = { tenant, user: subject(user, 'user') };
      else {
        if (typeof connectionId !== 'string' || !CONNECTION_ID.test(connectionId)) {
          throw bad('connectionId must be a connection id as the welcome frame gives it (letters, digits and dots, at most 200)');
        }
        // With a tenant, the socket is closed only if it is that tenant's.
        target = body.tenant === undefined ? { connectionId } : { connectionId, tenant };
      }
      return { op: 'disconnect', target, retry: reconnect };
    }
    case '/v1/subscribe':
    case '/v1/unsubscribe': {
      const user = subject(body.user, 'user');
      const { topic } = body;
      if (typeof topic !== 'string' || !TOPIC_PATTERN.test(topic)) throw bad('topic must match ^[A-Za-z0-9:_.\\-]{1,200}$');
      return { op: path === '/v1/subscribe' ? 'subscribe' : 'unsubscribe', tenant, user, topic };
    }
  }
}

/** A user id or token id: what a token's `sub` or `jti` may be. */
function subject(v: unknown, name: 'user' | 'jti'): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > MAX_SUB_LENGTH || hasControlChar(v)) {
    throw bad(`${name} must be a string of 1 to ${MAX_SUB_LENGTH} characters without control characters`);
  }
  return v;
}

function bad(message: string): Refused {
  return new Refused(400, 'bad_request', message);
}

/**
 * The fields of an admin publish: a client publish frame's without `type` (a
 * `ref` is taken and ignored, as v1 did), a tenant, and `topics` (1 to
 * MAX_BROADCAST_TOPICS) instead of `topic`.
 */
const PUBLISH_FIELDS = ['tenant', 'topic', 'topics', 'users', 'data', 'key', 'ephemeral', 'idempotencyKey', 'traceparent', 'ref', 'push'];
const PUSH_FIELDS = ['collapseKey', 'delayMs', 'notification'];
/** The largest `push.notification`, as JSON. */
export const MAX_PUSH_NOTIFICATION_BYTES = 4096;
const MAX_BROADCAST_TOPICS = 100;
/** The most users one publish may name (PROTOCOL.md). */
export const MAX_USER_TARGETS = 1000;


async function publish(deps: AdminDeps, req: IncomingMessage, obj: Record<string, unknown>, res: ServerResponse): Promise<void> {
  for (const k of Object.keys(obj)) {
    if (!PUBLISH_FIELDS.includes(k)) throw bad(`unknown field ${JSON.stringify(k)}; /v1/publish takes ${PUBLISH_FIELDS.join(', ')}`);
  }
  const tenant = obj.tenant ?? 'default';
  if (typeof tenant !== 'string' || !TOPIC_PATTERN.test(tenant)) throw bad(TENANT_RULE);
  // W3C Trace Context: the body's field, else the request's header (an invalid header is ignored, as the spec says).
  const header = req.headers.traceparent;
  const headerTrace = typeof header === 'string' && TRACEPARENT_PATTERN.test(header) ? header : undefined;
  if (obj.push !== undefined && obj.users === undefined) throw bad('push needs users: offline push is for events to users, not to topics');
  if (obj.users !== undefined) return toUsers(deps, tenant, obj, headerTrace, res);
  if (obj.topics !== undefined) return broadcast(deps, tenant, obj, headerTrace, res);
  const f = publishFrame(obj);
  const result = await deps.publish({ tenant, topic: f.topic, dataJson: f.dataJson, cls: f.cls, key: f.key,
    idempotencyKey: f.idempotencyKey, traceparent: f.traceparent ?? headerTrace });
  if (!result.ok) throw publishFailed(result.reason, '');
  const out: Record<string, unknown> = {};
  if (result.id !== undefined) out.id = result.id;
  if (result.duplicate) out.duplicate = true;
  return json(res, 200, out);
}

/** The body as a client publish frame would be decoded (the same checks and messages), or a 400. */
function publishFrame(obj: Record<string, unknown>): PublishFrame {
  const r = decodeFrameObject({ ...obj, type: 'publish' });
  if (!r.ok) throw bad(r.message ?? 'not a publish');
  if (r.frame.type !== 'publish') throw bad('not a publish');
  return r.frame;
}

function publishFailed(reason: 'unavailable' | 'internal', detail: string, extra: Record<string, unknown> = {}): Refused {
  return new Refused(503, reason, (reason === 'unavailable'
    ? 'the event could not be published now (the store or a shard is unavailable); retry with the same idempotencyKey'
    : 'the publish failed inside the gateway; see its log') + detail, {}, extra);
}

/**
 * `topics`: every topic is checked before anything is published (a bad one
 * is a 400 and nothing is sent), then the event is published to each in the
 * order given, as that many single publishes would be, idempotency key
 * included (it is per topic). A publish that fails stops the rest: the 503
 * names the topic and carries the ids of those already published, so that a
 * retry with the same idempotencyKey publishes each topic once.
 */
async function broadcast(deps: AdminDeps, tenant: string, obj: Record<string, unknown>, headerTrace: string | undefined,
  res: ServerResponse): Promise<void> {
  const topics = obj.topics;
  if (obj.topic !== undefined) throw bad('give topic or topics, not both');
  if (!Array.isArray(topics) || topics.length === 0 || topics.length > MAX_BROADCAST_TOPICS) {
    throw bad(`topics must be an array of 1 to ${MAX_BROADCAST_TOPICS} topic names`);
  }
  const seen = new Set<string>();
  const rest = { ...obj };
  delete rest.topics;
  const frames = topics.map((t, i) => {
    if (typeof t !== 'string') throw bad(`topics[${i}] is not a string`);
    if (seen.has(t)) throw bad(`topics[${i}] ${JSON.stringify(t)} is given twice`);
    seen.add(t);
    try {
      return publishFrame({ ...rest, topic: t });
    } catch (e) {
      throw e instanceof Refused ? bad(`topics[${i}]: ${e.message}`) : e;
    }
  });
  const ids: Record<string, string> = {};
  for (const f of frames) {
    // Idempotency records are per (tenant, key): each topic gets its own key,
    // the given one and the topic after DEL (\x7f), which no client key can
    // hold and no internal message format uses as a separator (they use
    // \x00, \x1e and \x1f), so a retry matches topic by topic.
    const idempotencyKey = f.idempotencyKey === undefined ? undefined : `${f.idempotencyKey}\x7f${f.topic}`;
    const result = await deps.publish({ tenant, topic: f.topic, dataJson: f.dataJson, cls: f.cls, key: f.key,
      idempotencyKey, traceparent: f.traceparent ?? headerTrace });
    if (!result.ok) {
      const done = Object.keys(ids).length;
      throw publishFailed(result.reason, `; failed at ${JSON.stringify(f.topic)}, after ${done} of ${frames.length} topics were published`,
        { ids });
    }
    if (result.id !== undefined) ids[f.topic] = result.id;
  }
  return json(res, 200, Object.keys(ids).length === 0 ? {} : { ids });
}

/**
 * `users`: one `$user` event (ephemeral class: not stored, no id) to every
 * open socket of each user named, on every node. Everything is checked
 * before it is sent; the answer names the users that had a socket open.
 * A topic, a key or an idempotency key cannot apply to it and is refused.
 */
async function toUsers(deps: AdminDeps, tenant: string, obj: Record<string, unknown>, headerTrace: string | undefined,
  res: ServerResponse): Promise<void> {
  if (obj.topic !== undefined || obj.topics !== undefined) throw bad('give users or a topic (topic, topics), not both');
  if (obj.key !== undefined) throw bad('an event to users is ephemeral: key does not apply');
  if (obj.idempotencyKey !== undefined) throw bad('an event to users is ephemeral and not stored: idempotencyKey does not apply');
  if (obj.ephemeral !== undefined && obj.ephemeral !== true) throw bad('an event to users is always ephemeral: leave ephemeral out or set it true');
  const users = obj.users;
  if (!Array.isArray(users) || users.length === 0 || users.length > MAX_USER_TARGETS) {
    throw bad(`users must be an array of 1 to ${MAX_USER_TARGETS} user ids`);
  }
  const seen = new Set<string>();
  users.forEach((u, i) => {
    if (typeof u !== 'string' || u.length === 0 || u.length > MAX_SUB_LENGTH || hasControlChar(u)) {
      throw bad(`users[${i}] must be a user id: a string of 1 to ${MAX_SUB_LENGTH} characters without control characters`);
    }
    if (seen.has(u)) throw bad(`users[${i}] ${JSON.stringify(u)} is given twice`);
    seen.add(u);
  });
  // The data and traceparent are checked as a publish frame's are (the topic is a stand-in: $user is not a topic name).
  const push = obj.push === undefined ? undefined : pushRequest(obj.push, deps.config);
  const rest: Record<string, unknown> = { ...obj, topic: 'user', ephemeral: true };
  delete rest.users;
  delete rest.push;
  const f = publishFrame(rest);
  const frame = encodeEventFrame({ topic: USER_TOPIC, key: undefined, dataJson: f.dataJson, traceparent: f.traceparent ?? headerTrace },
    undefined);
  if (push !== undefined && deps.push === undefined) throw bad('push needs REDIS_URL (BullMQ): this gateway runs embedded');
  const result = await deps.toUsers(tenant, users as string[], frame);
  if (!result.ok) {
    throw new Refused(503, result.reason, result.message + (push === undefined ? '' : '; no push job was added'),
      {}, push === undefined ? {} : { delivered: false });
  }
  if (push === undefined) return json(res, 200, { online: result.online });
  const online = new Set(result.online);
  const pushed = await deps.push!(tenant, (users as string[]).filter((u) => !online.has(u)), push);
  const pushOut = { queued: pushed.queued, collapsed: pushed.collapsed };
  if (!pushed.ok) {
    throw new Refused(503, 'unavailable', `the event was delivered to the users online, but ${pushed.message}: ` +
      'the push jobs of the users not listed in push were not added; retry (a retry collapses onto the jobs already added)',
      {}, { delivered: true, online: result.online, push: pushOut });
  }
  return json(res, 200, { online: result.online, push: pushOut });
}

/** `push` of a publish to users, or a 400 naming the field. */
function pushRequest(v: unknown, cfg: Pick<Config, 'pushMaxDelayMs'>): PushRequest {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad('push must be an object: {"collapseKey","delayMs","notification"}');
  const p = v as Record<string, unknown>;
  for (const k of Object.keys(p)) {
    if (!PUSH_FIELDS.includes(k)) throw bad(`unknown field push.${k}; push takes ${PUSH_FIELDS.join(', ')}`);
  }
  const { collapseKey, delayMs = 0, notification } = p;
  if (typeof collapseKey !== 'string' || collapseKey.length === 0 || collapseKey.length > 128 || hasControlChar(collapseKey)) {
    throw bad('push.collapseKey must be a string of 1 to 128 characters without control characters');
  }
  if (typeof delayMs !== 'number' || !Number.isInteger(delayMs) || delayMs < 0 || delayMs > cfg.pushMaxDelayMs) {
    throw bad(`push.delayMs must be a whole number of ms from 0 to ${cfg.pushMaxDelayMs} (WS_PUSH_MAX_DELAY_MS)`);
  }
  if (typeof notification !== 'object' || notification === null || Array.isArray(notification)) {
    throw bad('push.notification must be a JSON object (the payload the push sender gets)');
  }
  const notificationJson = JSON.stringify(notification);
  if (Buffer.byteLength(notificationJson) > MAX_PUSH_NOTIFICATION_BYTES) {
    throw bad(`push.notification is above ${MAX_PUSH_NOTIFICATION_BYTES} bytes as JSON`);
  }
  return { collapseKey, delayMs, notificationJson };
}

/** POST /admin/drain's body: `{}` or none (this node), or `{"node": id}`. */
function drainTarget(body: Record<string, unknown>): string | undefined {
  for (const k of Object.keys(body)) if (k !== 'node') throw bad(`unknown field ${JSON.stringify(k)}; /admin/drain takes node`);
  const { node } = body;
  if (node === undefined) return undefined;
  if (typeof node !== 'string' || !/^[A-Za-z0-9._-]{1,64}$/.test(node)) throw bad('node must be a node id as GET /v1/nodes gives it');
  return node;
}

/** Who sent a request, as it says (X-Sluice-Source: the admin page sends `ui`): for the log line of an action only. */
function sourceOf(req: IncomingMessage): string {
  const v = req.headers['x-sluice-source'];
  return typeof v === 'string' && /^[a-z0-9_-]{1,32}$/.test(v) ? v : 'api';
}

/** A question to the other nodes: a 503 when Redis did not take it (anything else is a failure inside: 500, logged). */
async function unlessRedisDown<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof RedisUnavailable) throw new Refused(503, 'unavailable', 'the other node could not be asked (redis did not take the question); retry');
    throw err;
  }
}

/** The request carries an Origin that is not the admin port's own (a page of another site, in a browser). */
function crossOrigin(req: IncomingMessage): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return false;
  try {
    return new URL(origin).host !== req.headers.host;
  } catch {
    return true;
  }
}

/** A whole-number query parameter from `min` to `max`, `dflt` when absent, or a 400 naming it. */
function wholeNumber(v: string | undefined, name: string, min: number, max: number, dflt: number): number {
  if (v === undefined) return dflt;
  const n = /^[0-9]{1,6}$/.test(v) ? Number(v) : NaN;
  if (!(n >= min && n <= max)) throw bad(`${name} must be a whole number from ${min} to ${max}`);
  return n;
}

/**
 * The admin page's files, read once from the build and kept. Served with a
 * Content-Security-Policy that lets the page load only its own scripts and
 * styles and talk only to this origin (the admin API); the page can be
 * framed by nothing. index.html is never cached (a new build's asset names
 * change); the assets, whose names hold their hash, are immutable. The
 * index carries whether the API wants a token (`<meta name="sluice-auth">`),
 * so that the page shows its login without a request answered 401.
 */
const UI_CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
const UI_TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.html': 'text/html; charset=utf-8', '.svg': 'image/svg+xml',
  '.png': 'image/png', '.woff2': 'font/woff2', '.json': 'application/json',
};
const UI_ASSET = /^\/ui\/assets\/([A-Za-z0-9_.-]{1,200})$/;

class UiFiles {
  private readonly cache = new Map<string, Buffer>();

  constructor(private readonly dir: URL, private readonly tokenRequired: boolean) {}

  async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]!;
    let name = 'index.html';
    if (path.startsWith('/ui/assets/')) {
      const m = UI_ASSET.exec(path);
      if (m === null || m[1]!.startsWith('.')) throw new Refused(404, 'not_found', `no admin page file ${path}`);
      name = `assets/${m[1]}`;
    }
    const ext = name.slice(name.lastIndexOf('.'));
    const type = UI_TYPES[ext];
    if (type === undefined) throw new Refused(404, 'not_found', `no admin page file ${path}`);
    let body = this.cache.get(name);
    if (body === undefined) {
      try {
        body = await readFile(new URL(name, this.dir));
      } catch (err) {
        if (name !== 'index.html') throw new Refused(404, 'not_found', `no admin page file ${path}`);
        throw new Refused(503, 'unavailable', `the admin page is not built here (${(err as Error).message}): run pnpm build`);
      }
      if (name === 'index.html') {
        const meta = `<meta name="sluice-auth" content="${this.tokenRequired ? 'token' : 'none'}">`;
        body = Buffer.from(body.toString('utf8').replace('<head>', `<head>\n    ${meta}`));
      }
      this.cache.set(name, body);
    }
    res.writeHead(200, {
      'content-type': type,
      'content-length': body.length,
      'content-security-policy': UI_CSP,
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'x-frame-options': 'DENY',
      'cache-control': name === 'index.html' ? 'no-cache' : 'public, max-age=31536000, immutable',
    });
    res.end(body);
  }
}

/** GET /v1/online's query (`?tenant=&user=&user=`), or a 400 naming the parameter. */
function onlineRequest(url: string): { tenant: string; users: string[] } {
  const params = new URL(url, 'http://admin').searchParams;
  let tenant = 'default';
  const users: string[] = [];
  const seen = new Set<string>();
  let tenants = 0;
  for (const [k, v] of params) {
    if (k === 'tenant') {
      if (++tenants > 1) throw bad('tenant is given twice');
      tenant = v;
    } else if (k === 'user') {
      if (v.length === 0 || v.length > MAX_SUB_LENGTH || hasControlChar(v)) {
        throw bad(`user must be a user id: a string of 1 to ${MAX_SUB_LENGTH} characters without control characters`);
      }
      if (!seen.has(v)) users.push(v);
      seen.add(v);
    } else throw bad(`unknown query parameter ${JSON.stringify(k)}; /v1/online takes tenant, user`);
  }
  if (!TOPIC_PATTERN.test(tenant)) throw bad(TENANT_RULE);
  if (users.length === 0 || users.length > MAX_USER_TARGETS) throw bad(`user must be given 1 to ${MAX_USER_TARGETS} times`);
  return { tenant, users };
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  send(res, status, JSON.stringify(body), headers);
}

/** Answers `text`, which is JSON already. */
function send(res: ServerResponse, status: number, text: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

const HISTORY_PARAMS = ['tenant', 'topic', 'since', 'limit'];
/** `limit` of a history read when none is given, and the most it may be (PROTOCOL.md). */
export const HISTORY_DEFAULT_LIMIT = 100;
export const HISTORY_MAX_LIMIT = 1000;

/** A history read's query (`?tenant=&topic=&since=&limit=`) as a request, or a 400 that names what is wrong. */
export function historyRequest(url: string): HistoryRequest {
  const q = query(url, '/v1/history', HISTORY_PARAMS);
  const tenant = q.get('tenant') ?? 'default';
  if (!TOPIC_PATTERN.test(tenant)) throw bad(TENANT_RULE);
  const topic = q.get('topic');
  if (topic === undefined) throw bad('topic is missing: name the topic whose history to read');
  if (!TOPIC_PATTERN.test(topic)) throw bad('topic must match ^[A-Za-z0-9:_.\\-]{1,200}$');
  const since = q.get('since');
  if (since !== undefined && !EVENT_ID_PATTERN.test(since)) {
    throw bad('since must be an event id such as "1732900000000-0", as an event\'s id gives it');
  }
  let limit = HISTORY_DEFAULT_LIMIT;
  const rawLimit = q.get('limit');
  if (rawLimit !== undefined) {
    limit = /^[0-9]{1,4}$/.test(rawLimit) ? Number(rawLimit) : 0;
    if (limit < 1 || limit > HISTORY_MAX_LIMIT) {
      throw bad(`limit must be a whole number from 1 to ${HISTORY_MAX_LIMIT} (at most ${HISTORY_MAX_LIMIT} events per request: read on with since)`);
    }
  }
  return { tenant, topic, since, limit };
}

/**
 * `{"events":[{"id","data"},...],"recovered"}` built as text: each event's
 * data is the JSON it was stored as, spliced in, not parsed and serialized
 * again (an answer may hold 1000 events of up to WS_MAX_FRAME_BYTES each).
 * Ids match EVENT_ID_PATTERN, so they need no escaping.
 */
function historyBody(events: readonly { readonly id: string; readonly data: string }[], recovered: boolean): string {
  const parts = events.map((e) => `{"id":"${e.id}","data":${e.data}}`);
  return `{"events":[${parts.join(',')}],"recovered":${recovered}}`;
}

/** The body as a JSON object, or the 400 or 413 that says why not. */
async function readJson(req: IncomingMessage, limit: number, emptyIsNone = false): Promise<Record<string, unknown>> {
  let body: string | undefined;
  try {
    body = await readBody(req, limit);
  } catch {
    throw bad('request body could not be read');
  }
  if (body === undefined) throw new Refused(413, 'payload_too_large', `the body is above ${limit} bytes`);
  if (emptyIsNone && body.trim() === '') return {};
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch {
    throw bad('body is not valid JSON');
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw bad('body must be a JSON object');
  return raw as Record<string, unknown>;
}

/** Reads a body of at most `limit` bytes; undefined when it is larger. */
function readBody(req: IncomingMessage, limit: number): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > limit) over = true;
      else chunks.push(c);
    });
    req.on('end', () => resolve(over ? undefined : Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
