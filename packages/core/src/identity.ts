// Who a socket is, decided once at the upgrade: the claims of a verified
// token turned into a user, a tenant and two sets of topic rights; the
// Origin rule of WS_ALLOWED_ORIGINS; the client address behind trusted
// proxies. Pure functions: the gateway does the I/O (jose, headers).
import { TOPIC_PATTERN } from '@sluice/protocol';

/** Topic patterns a socket may use: exact names and prefixes (`prices:*`); `*` alone is everything. */
export interface Rights {
  readonly all: boolean;
  readonly exact: ReadonlySet<string>;
  readonly prefixes: readonly string[];
}

export const ALL_RIGHTS: Rights = Object.freeze({ all: true, exact: new Set<string>(), prefixes: Object.freeze([]) });
export const NO_RIGHTS: Rights = Object.freeze({ all: false, exact: new Set<string>(), prefixes: Object.freeze([]) });

/** A topic pattern: a topic name, optionally ending in `*` (a prefix wildcard); `*` alone matches every topic. */
export const TOPIC_RIGHT_PATTERN = /^(?:[A-Za-z0-9:_.-]{1,200}\*?|\*)$/;
/** Tenant ids share the topic alphabet: `/` separates tenant and topic inside the gateway, so a tenant can never contain it. */
export const TENANT_PATTERN = TOPIC_PATTERN;
export const DEFAULT_TENANT = 'default';
export const ANONYMOUS_USER = 'anonymous';
/** More patterns than this in one claim is refused rather than scanned on every frame. */
export const MAX_RIGHTS_PATTERNS = 1000;
/** The longest `sub` (user id) and `jti` a token may carry, and an admin request may name. */
export const MAX_SUB_LENGTH = 256;

/** Whether `s` holds a C0 control character or DEL. */
export function hasControlChar(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

export function compileRights(patterns: readonly string[]): Rights {
  if (patterns.length === 0) return NO_RIGHTS;
  const exact = new Set<string>();
  const prefixes: string[] = [];
  for (const p of patterns) {
    if (p === '*') return ALL_RIGHTS;
    if (p.endsWith('*')) prefixes.push(p.slice(0, -1));
    else exact.add(p);
  }
  // A prefix covered by a shorter one adds nothing; fewer prefixes, fewer comparisons per frame.
  prefixes.sort((a, b) => a.length - b.length);
  const kept: string[] = [];
  for (const p of prefixes) if (!kept.some((k) => p.startsWith(k))) kept.push(p);
  return Object.freeze({ all: false, exact, prefixes: Object.freeze(kept) });
}

/** Whether `rights` allow `topic` (a topic name already checked against TOPIC_PATTERN). */
export function allows(rights: Rights, topic: string): boolean {
  if (rights.all) return true;
  if (rights.exact.has(topic)) return true;
  const prefixes = rights.prefixes;
  for (let i = 0; i < prefixes.length; i++) if (topic.startsWith(prefixes[i]!)) return true;
  return false;
}

export interface Identity {
  readonly user: string;
  readonly tenant: string;
  /** Topics the socket may join. */
  readonly join: Rights;
  /** Topics the socket may publish to. */
  readonly publish: Rights;
  /** The token's `exp` in ms since the epoch; Infinity when there is no token. */
  readonly expiresAt: number;
  /** The token's `iat` in ms; -Infinity without one (a revocation of the user then always holds it). */
  readonly issuedAt: number;
  /** The token's `jti`, by which `POST /v1/revoke` can revoke it alone. */
  readonly jti: string | undefined;
}

/** WS_AUTH=none: everyone is `anonymous` of tenant `default` and may join and publish anywhere. */
export const ANONYMOUS: Identity = Object.freeze({
  user: ANONYMOUS_USER, tenant: DEFAULT_TENANT, join: ALL_RIGHTS, publish: ALL_RIGHTS, expiresAt: Infinity, issuedAt: -Infinity,
  jti: undefined,
});

export type ClaimsResult = { readonly ok: true; readonly identity: Identity } | { readonly ok: false; readonly message: string };

/**
 * The identity a verified token's claims grant. The signature, `exp`, `iss`
 * and `aud` are checked before this by the verifier; this checks the shapes:
 * `sub` a string, `tenant` a tenant id (default `default`), `topics` and
 * `publish` lists of topic patterns (default: none), `exp` a number.
 */
export function identityFromClaims(claims: Readonly<Record<string, unknown>>): ClaimsResult {
  const { sub, tenant = DEFAULT_TENANT, topics = [], publish = [], exp, iat, jti } = claims;
  if (typeof sub !== 'string' || sub.length === 0 || sub.length > MAX_SUB_LENGTH || hasControlChar(sub)) {
    return { ok: false, message: `sub must be a string of 1 to ${MAX_SUB_LENGTH} characters without control characters` };
  }
  if (typeof tenant !== 'string' || !TENANT_PATTERN.test(tenant)) {
    return { ok: false, message: 'tenant must match ^[A-Za-z0-9:_.\\-]{1,200}$' };
  }
  if (typeof exp !== 'number' || !Number.isFinite(exp)) return { ok: false, message: 'exp must be a number (seconds since the epoch)' };
  if (iat !== undefined && (typeof iat !== 'number' || !Number.isFinite(iat))) {
    return { ok: false, message: 'iat must be a number (seconds since the epoch)' };
  }
  if (jti !== undefined && (typeof jti !== 'string' || jti.length === 0 || jti.length > MAX_SUB_LENGTH || hasControlChar(jti))) {
    return { ok: false, message: `jti must be a string of 1 to ${MAX_SUB_LENGTH} characters without control characters` };
  }
  const join = rightsClaim(topics, 'topics');
  if (typeof join === 'string') return { ok: false, message: join };
  const pub = rightsClaim(publish, 'publish');
  if (typeof pub === 'string') return { ok: false, message: pub };
  return {
    ok: true,
    identity: Object.freeze({ user: sub, tenant, join, publish: pub, expiresAt: exp * 1000, issuedAt: iat === undefined ? -Infinity : iat * 1000,
      jti }),
  };
}

/** A claim (or hook answer field) of topic patterns: the compiled rights, or what it should have been. */
export function rightsClaim(value: unknown, name: string): Rights | string {
  const accepts = `${name} must be a list of at most ${MAX_RIGHTS_PATTERNS} topic patterns (a topic, optionally ending in *)`;
  if (!Array.isArray(value) || value.length > MAX_RIGHTS_PATTERNS) return accepts;
  for (const p of value) if (typeof p !== 'string' || !TOPIC_RIGHT_PATTERN.test(p)) return accepts;
  return compileRights(value as string[]);
}

// --- Origin --------------------------------------------------------------------

/** An allowed origin: exact (`https://app.example.com`) or every subdomain (`https://*.example.com`). */
export interface OriginRule {
  readonly scheme: string;
  /** The host, or the suffix after `*.` for a wildcard rule (with its leading dot). */
  readonly host: string;
  readonly wildcard: boolean;
  /** `:8443`, or empty for the scheme's default port. */
  readonly port: string;
}

const ORIGIN = /^(https?):\/\/(\*\.)?([a-z0-9-]+(?:\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])(:[0-9]{1,5})?$/;

/** One entry of WS_ALLOWED_ORIGINS, lower-cased; undefined when it is not an origin. */
export function parseOriginRule(raw: string): OriginRule | undefined {
  const m = ORIGIN.exec(raw.toLowerCase());
  if (m === null) return undefined;
  const wildcard = m[2] !== undefined;
  return Object.freeze({ scheme: m[1]!, host: wildcard ? `.${m[3]!}` : m[3]!, wildcard, port: m[4] ?? '' });
}

/** WS_ALLOWED_ORIGINS: a comma-separated list of origins; undefined when an entry is not one. */
export function parseOriginList(raw: string): readonly OriginRule[] | undefined {
  const rules: OriginRule[] = [];
  for (const entry of raw.split(',')) {
    const rule = parseOriginRule(entry.trim());
    if (rule === undefined) return undefined;
    rules.push(rule);
  }
  return Object.freeze(rules);
}

/**
 * Whether a browser's `Origin` header is allowed. A wildcard rule matches any
 * subdomain, never the bare domain. An `Origin` that is not a plain
 * scheme://host[:port] (`null` from a sandboxed page, garbage) never matches.
 */
export function originAllowed(rules: readonly OriginRule[], origin: string): boolean {
  const o = parseOriginRule(origin);
  if (o === undefined || o.wildcard) return false;
  for (const r of rules) {
    if (r.scheme !== o.scheme || r.port !== o.port) continue;
    if (r.wildcard ? o.host.endsWith(r.host) && o.host.length > r.host.length : o.host === r.host) return true;
  }
  return false;
}

// --- Client address --------------------------------------------------------------

const IP_TEXT = /^[0-9A-Fa-f:.]{2,45}$/;

/**
 * The client's address. With `trustedHops` 0 it is the TCP peer. Behind
 * trusted proxies each one appends the address it saw to X-Forwarded-For, so
 * the client is the entry `trustedHops` from the right: entries further left
 * were written by the client itself and prove nothing. A header with fewer
 * entries, or an entry that is not an address, leaves the TCP peer.
 */
export function clientAddress(peer: string, forwardedFor: string, trustedHops: number): string {
  if (trustedHops === 0 || forwardedFor === '') return peer;
  const parts = forwardedFor.split(',');
  if (parts.length < trustedHops) return peer;
  const candidate = parts[parts.length - trustedHops]!.trim();
  return IP_TEXT.test(candidate) ? candidate : peer;
}
