import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import type { Config, PublishRequest, PublishResult } from '@sluice/core';
import { decodeFrameObject, TOPIC_PATTERN, TRACEPARENT_PATTERN } from '@sluice/protocol';
import type { Logger } from '@sluice/telemetry';

export interface AdminDeps {
  readonly config: Config;
  readonly log: Logger;
  ready(): boolean;
  metrics(): Promise<{ text: string; contentType: string }>;
  publish(req: PublishRequest): Promise<PublishResult>;
  /** Starts the drain, as SIGTERM does; the admin server keeps answering until the process exits. */
  drain(): void;
}

/**
 * The admin HTTP server (ADMIN_PORT): health, metrics and the server-side
 * publish API. Plain node:http: nothing here is on the hot path.
 *
 * No request can take the process down: a handler that throws or whose
 * dependency rejects is logged and answered 500 `{"reason":"internal"}`
 * (or, when the answer had begun, the connection is cut).
 */
export function createAdminServer(deps: AdminDeps): Server {
  const token = deps.config.adminToken === undefined ? undefined : Buffer.from(`Bearer ${deps.config.adminToken}`);
  const authorized = (req: IncomingMessage): boolean => {
    if (token === undefined) return true;
    const got = Buffer.from(req.headers.authorization ?? '');
    return got.length === token.length && timingSafeEqual(got, token);
  };

  const failed = (res: ServerResponse, route: string) => (err: unknown): void => {
    deps.log.error({ err, route }, 'admin request failed');
    if (!res.headersSent) json(res, 500, { reason: 'internal', message: 'the request failed inside the gateway; see its log' });
    else res.destroy();
  };

  return createServer((req, res) => {
    const route = `${req.method} ${(req.url ?? '/').split('?')[0]}`;
    // handle is async: whatever it throws arrives here as a rejection.
    handle(req, res, route).catch(failed(res, route));
  });

  async function handle(req: IncomingMessage, res: ServerResponse, route: string): Promise<void> {
    switch (route) {
      case 'GET /health/live':
        return json(res, 200, { status: 'live' });
      case 'GET /health/ready':
        return deps.ready() ? json(res, 200, { status: 'ready' }) : json(res, 503, { status: 'unavailable' });
      case 'GET /metrics': {
        let m: { text: string; contentType: string };
        try {
          m = await deps.metrics();
        } catch (err) {
          deps.log.warn({ err }, 'metrics collection failed');
          return json(res, 500, { reason: 'internal' });
        }
        res.writeHead(200, { 'content-type': m.contentType });
        res.end(m.text);
        return;
      }
      case 'POST /v1/publish': {
        if (!authorized(req)) return json(res, 401, { reason: 'unauthorized' });
        let body: string | undefined;
        try {
          body = await readBody(req, deps.config.hardMaxFrameBytes);
        } catch {
          return json(res, 400, { reason: 'bad_request', message: 'request body could not be read' });
        }
        if (body === undefined) return json(res, 413, { reason: 'payload_too_large' });
        return publish(deps, req, body, res);
      }
      case 'POST /admin/drain':
        if (!authorized(req)) return json(res, 401, { reason: 'unauthorized' });
        deps.log.info('drain requested on the admin port');
        deps.drain();
        return json(res, 202, { status: 'draining' });
      default:
        return json(res, 404, { reason: 'not_found' });
    }
  }
}

async function publish(deps: AdminDeps, req: IncomingMessage, body: string, res: ServerResponse): Promise<void> {
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch {
    return json(res, 400, { reason: 'bad_request', message: 'body is not valid JSON' });
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return json(res, 400, { reason: 'bad_request', message: 'body must be a JSON object' });
  }
  const obj = raw as Record<string, unknown>;
  const tenant = obj.tenant ?? 'default';
  if (typeof tenant !== 'string' || !TOPIC_PATTERN.test(tenant)) {
    return json(res, 400, { reason: 'bad_request', message: 'tenant must match ^[A-Za-z0-9:_.\\-]{1,200}$' });
  }
  const r = decodeFrameObject({ ...obj, type: 'publish' });
  if (!r.ok) return json(res, 400, { reason: 'bad_request', message: r.message });
  if (r.frame.type !== 'publish') return json(res, 400, { reason: 'bad_request' });
  const f = r.frame;
  // W3C Trace Context: the body's field, else the request's header (an invalid header is ignored, as the spec says).
  const header = req.headers.traceparent;
  const traceparent = f.traceparent ?? (typeof header === 'string' && TRACEPARENT_PATTERN.test(header) ? header : undefined);
  const result = await deps.publish({ tenant, topic: f.topic, dataJson: f.dataJson, cls: f.cls, key: f.key,
    idempotencyKey: f.idempotencyKey, traceparent });
  if (!result.ok) return json(res, 503, { reason: result.reason });
  const out: Record<string, unknown> = {};
  if (result.id !== undefined) out.id = result.id;
  if (result.duplicate) out.duplicate = true;
  return json(res, 200, out);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
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
