// The backend hooks' contract, pure: what the gateway sends (the request
// bodies are built by the gateway) and what an answer must look like. An
// answer that is not the contract's is a failure of the backend, exactly as
// a timeout is: the request it was for is answered `unavailable`, never
// admitted on a guess. The gateway does the I/O (undici) and the bounds.
import { hasControlChar, type Identity, MAX_SUB_LENGTH, rightsClaim, TENANT_PATTERN } from './identity.ts';

/** Which hook a call is for: `refresh` is the connect hook asked again on an open socket. */
export const HOOK_NAMES = ['connect', 'refresh', 'subscribe', 'publish'] as const;
export type HookName = (typeof HOOK_NAMES)[number];

/** What became of one hook call, as the metrics count it. */
export const HOOK_OUTCOMES = ['allowed', 'refused', 'timeout', 'error', 'bad_status', 'bad_answer', 'breaker_open', 'overloaded'] as const;
export type HookOutcome = (typeof HOOK_OUTCOMES)[number];
/** The outcomes that are the backend's failure: they count toward the breaker and answer `unavailable`. */
export type HookFailure = Exclude<HookOutcome, 'allowed' | 'refused'>;

/** The longest `message` a backend may give a refusal: it is shown to the client. */
export const MAX_HOOK_MESSAGE = 200;
/** The longest a subscribe decision may be cached. */
export const MAX_HOOK_CACHE_MS = 86_400_000;

export type HookParse<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly why: string };

/** A connect (or refresh) hook's answer: the identity, or a refusal with the status the upgrade gets. */
export type ConnectAnswer =
  | { readonly allow: true; readonly identity: Identity }
  | { readonly allow: false; readonly status: 401 | 403; readonly message: string | undefined };

export interface SubscribeAnswer {
  readonly allow: boolean;
  /** 0: not cached. */
  readonly cacheMs: number;
  readonly message: string | undefined;
}

export type PublishAnswer =
  | { readonly allow: true; readonly dataJson: string | undefined }
  | { readonly allow: false; readonly message: string | undefined };

const CONNECT_FIELDS = new Set(['user', 'tenant', 'topics', 'publish', 'expiresAt']);
const REFUSE_FIELDS = new Set(['status', 'message']);
const SUBSCRIBE_FIELDS = new Set(['allow', 'cacheMs', 'message']);
const PUBLISH_FIELDS = new Set(['allow', 'data', 'message']);

function object(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? v as Record<string, unknown> : undefined;
}

function unknownField(o: Record<string, unknown>, known: ReadonlySet<string>): string | undefined {
  for (const k of Object.keys(o)) if (!known.has(k)) return k;
  return undefined;
}

function message(v: unknown): HookParse<string | undefined> {
  if (v === undefined) return { ok: true, value: undefined };
  if (typeof v !== 'string' || v.length > MAX_HOOK_MESSAGE || hasControlChar(v)) {
    return { ok: false, why: `message must be a string of at most ${MAX_HOOK_MESSAGE} characters without control characters` };
  }
  return { ok: true, value: v };
}

/**
 * A connect or refresh answer: `{"user","tenant"?,"topics"?,"publish"?,"expiresAt"?}`
 * admits (tenant `default`, no rights, no expiry when left out), or
 * `{"refuse":{"status":401|403,"message"?}}` refuses. `expiresAt` is ms
 * since the epoch and must lie ahead of `now`. The identity is issued `now`:
 * a revocation of the user made before it does not hold it.
 */
export function parseConnectAnswer(body: unknown, now: number): HookParse<ConnectAnswer> {
  const o = object(body);
  if (o === undefined) return { ok: false, why: 'the answer must be a JSON object' };
  if (o.refuse !== undefined) {
    const r = object(o.refuse);
    if (Object.keys(o).length !== 1 || r === undefined) return { ok: false, why: 'a refusal is {"refuse":{"status":401|403,"message"?}} alone' };
    const extra = unknownField(r, REFUSE_FIELDS);
    if (extra !== undefined) return { ok: false, why: `refuse.${extra} is not a field of a refusal` };
    if (r.status !== 401 && r.status !== 403) return { ok: false, why: 'refuse.status must be 401 or 403' };
    const m = message(r.message);
    if (!m.ok) return { ok: false, why: `refuse.${m.why}` };
    return { ok: true, value: { allow: false, status: r.status, message: m.value } };
  }
  const extra = unknownField(o, CONNECT_FIELDS);
  if (extra !== undefined) return { ok: false, why: `${extra} is not a field of an identity` };
  const { user, tenant = 'default', topics = [], publish = [], expiresAt } = o;
  if (typeof user !== 'string' || user.length === 0 || user.length > MAX_SUB_LENGTH || hasControlChar(user)) {
    return { ok: false, why: `user must be a string of 1 to ${MAX_SUB_LENGTH} characters without control characters` };
  }
  if (typeof tenant !== 'string' || !TENANT_PATTERN.test(tenant)) return { ok: false, why: 'tenant must match ^[A-Za-z0-9:_.\\-]{1,200}$' };
  let expires = Infinity;
  if (expiresAt !== undefined) {
    if (typeof expiresAt !== 'number' || !Number.isSafeInteger(expiresAt)) return { ok: false, why: 'expiresAt must be an integer (ms since the epoch)' };
    if (expiresAt <= now) return { ok: false, why: 'expiresAt is not in the future' };
    expires = expiresAt;
  }
  const join = rightsClaim(topics, 'topics');
  if (typeof join === 'string') return { ok: false, why: join };
  const pub = rightsClaim(publish, 'publish');
  if (typeof pub === 'string') return { ok: false, why: pub };
  return {
    ok: true,
    value: { allow: true, identity: Object.freeze({ user, tenant, join, publish: pub, expiresAt: expires, issuedAt: now, jti: undefined }) },
  };
}

/** A subscribe answer: `{"allow":bool,"cacheMs"?:0..86400000,"message"?}`. */
export function parseSubscribeAnswer(body: unknown): HookParse<SubscribeAnswer> {
  const o = object(body);
  if (o === undefined) return { ok: false, why: 'the answer must be a JSON object' };
  const extra = unknownField(o, SUBSCRIBE_FIELDS);
  if (extra !== undefined) return { ok: false, why: `${extra} is not a field of a subscribe answer` };
  if (typeof o.allow !== 'boolean') return { ok: false, why: 'allow must be true or false' };
  const cacheMs = o.cacheMs ?? 0;
  if (typeof cacheMs !== 'number' || !Number.isSafeInteger(cacheMs) || cacheMs < 0 || cacheMs > MAX_HOOK_CACHE_MS) {
    return { ok: false, why: `cacheMs must be an integer from 0 to ${MAX_HOOK_CACHE_MS}` };
  }
  const m = message(o.message);
  if (!m.ok) return m;
  return { ok: true, value: { allow: o.allow, cacheMs, message: m.value } };
}

/**
 * A publish answer: `{"allow":true,"data"?}` (data replaces what was sent,
 * re-serialized, at most `maxDataBytes`) or `{"allow":false,"message"?}`.
 */
export function parsePublishAnswer(body: unknown, maxDataBytes: number): HookParse<PublishAnswer> {
  const o = object(body);
  if (o === undefined) return { ok: false, why: 'the answer must be a JSON object' };
  const extra = unknownField(o, PUBLISH_FIELDS);
  if (extra !== undefined) return { ok: false, why: `${extra} is not a field of a publish answer` };
  if (typeof o.allow !== 'boolean') return { ok: false, why: 'allow must be true or false' };
  const m = message(o.message);
  if (!m.ok) return m;
  if (!o.allow) {
    if (o.data !== undefined) return { ok: false, why: 'a refusal has no data' };
    return { ok: true, value: { allow: false, message: m.value } };
  }
  if (m.value !== undefined) return { ok: false, why: 'an accepted publish has no message' };
  if (o.data === undefined) return { ok: true, value: { allow: true, dataJson: undefined } };
  const dataJson = JSON.stringify(o.data);
  if (Buffer.byteLength(dataJson) > maxDataBytes) return { ok: false, why: `data above ${maxDataBytes} bytes` };
  return { ok: true, value: { allow: true, dataJson } };
}
