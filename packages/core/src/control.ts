// Server-side control of open sockets (PROTOCOL.md, additions of 2026-12):
// revocations, disconnects, server-side subscribes and unsubscribes. An admin
// request becomes one ControlCommand; the coordinator sends it to every
// shard of every node (Redis pub/sub in cluster mode), and each shard acts on
// the sockets it holds. The revocation set is kept in memory by every shard,
// so that the check at an upgrade or a refresh is a map lookup, never a round
// trip. Pure code: no I/O.
import { userKey } from './keys.ts';

/** Every token of a user issued at or before `at` (ms), or one token by its `jti`; forgotten at `expiresAt` (ms). */
export type Revocation =
  | { readonly kind: 'user'; readonly tenant: string; readonly user: string; readonly at: number; readonly expiresAt: number }
  | { readonly kind: 'token'; readonly tenant: string; readonly jti: string; readonly expiresAt: number };

/** Which sockets a disconnect closes: a user's, or one connection (when `tenant` is given, only if it is that tenant's). */
export type DisconnectTarget =
  | { readonly tenant: string; readonly user: string }
  | { readonly connectionId: string; readonly tenant?: string };

export type ControlCommand =
  | { readonly op: 'revoke'; readonly revocation: Revocation }
  /** Every revocation a node knows (its start, Redis reachable again): added, and applied to open sockets as `revoke` is. */
  | { readonly op: 'revocations'; readonly list: readonly Revocation[] }
  /** With `retry`: 4000 with a jittered `retryAfterMs`; without: 1008. */
  | { readonly op: 'disconnect'; readonly target: DisconnectTarget; readonly retry: boolean }
  | { readonly op: 'subscribe'; readonly tenant: string; readonly user: string; readonly topic: string }
  | { readonly op: 'unsubscribe'; readonly tenant: string; readonly user: string; readonly topic: string };

export type ControlAction = 'revoke' | 'disconnect' | 'subscribe' | 'unsubscribe';

/** A command's target, for log lines: who and what, never a token. */
export function describeCommand(cmd: ControlCommand): Record<string, unknown> {
  switch (cmd.op) {
    case 'revoke': {
      const r = cmd.revocation;
      return r.kind === 'user' ? { tenant: r.tenant, user: r.user } : { tenant: r.tenant, jti: r.jti };
    }
    case 'revocations':
      return { revocations: cmd.list.length };
    case 'disconnect':
      return { ...cmd.target, reconnect: cmd.retry };
    case 'subscribe':
    case 'unsubscribe':
      return { tenant: cmd.tenant, user: cmd.user, topic: cmd.topic };
  }
}

/** The admin action a command counts under (`revocations` is a revoke). */
export function actionOf(cmd: ControlCommand): ControlAction {
  return cmd.op === 'revocations' ? 'revoke' : cmd.op;
}

const isStr = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

function isRevocation(v: unknown): v is Revocation {
  if (typeof v !== 'object' || v === null) return false;
  const r = v as Record<string, unknown>;
  if (!isStr(r.tenant) || !isNum(r.expiresAt)) return false;
  return r.kind === 'user' ? isStr(r.user) && isNum(r.at) : r.kind === 'token' && isStr(r.jti);
}

/**
 * Whether `v` is a command this version knows, in full: what a node checks
 * before it acts on one from the control channel (another node's, maybe of
 * another version, or anything a Redis client published there).
 */
export function isControlCommand(v: unknown): v is ControlCommand {
  if (typeof v !== 'object' || v === null) return false;
  const c = v as Record<string, unknown>;
  switch (c.op) {
    case 'revoke':
      return isRevocation(c.revocation);
    case 'revocations':
      return Array.isArray(c.list) && c.list.every(isRevocation);
    case 'disconnect': {
      const t = c.target as Record<string, unknown> | null;
      if (typeof c.retry !== 'boolean' || typeof t !== 'object' || t === null) return false;
      if (isStr(t.connectionId)) return t.tenant === undefined || isStr(t.tenant);
      return isStr(t.tenant) && isStr(t.user);
    }
    case 'subscribe':
    case 'unsubscribe':
      return isStr(c.tenant) && isStr(c.user) && isStr(c.topic);
    default:
      return false;
  }
}

/** What a token says about itself, as far as revocation is concerned. */
export interface TokenStamp {
  readonly tenant: string;
  readonly user: string;
  /** The token's `iat` in ms; -Infinity without one (it counts as issued before any revocation). */
  readonly issuedAt: number;
  readonly jti: string | undefined;
}

/**
 * The revocations in force. A user revocation holds tokens whose `iat`
 * (whole seconds) is at or before it: a token issued in the same second as
 * the revocation is revoked too. Two revocations of one user keep the later
 * time and the later expiry.
 */
export class Revocations {
  private readonly users = new Map<string, { at: number; expiresAt: number }>();
  private readonly tokens = new Map<string, number>();

  get size(): number {
    return this.users.size + this.tokens.size;
  }

  /** Adds one; false when it adds nothing (already held, or expired at `now`). */
  add(r: Revocation, now: number): boolean {
    if (r.expiresAt <= now) return false;
    if (r.kind === 'token') {
      const key = tokenKey(r.tenant, r.jti);
      const held = this.tokens.get(key);
      if (held !== undefined && held >= r.expiresAt) return false;
      this.tokens.set(key, r.expiresAt);
      return held === undefined;
    }
    const key = userKey(r.tenant, r.user);
    const held = this.users.get(key);
    if (held === undefined) {
      this.users.set(key, { at: r.at, expiresAt: r.expiresAt });
      return true;
    }
    const later = r.at > held.at;
    held.at = Math.max(held.at, r.at);
    held.expiresAt = Math.max(held.expiresAt, r.expiresAt);
    return later;
  }

  /** Whether a token is revoked at `now`. Two map lookups. */
  revoked(t: TokenStamp, now: number): boolean {
    if (this.users.size > 0) {
      const u = this.users.get(userKey(t.tenant, t.user));
      if (u !== undefined && u.expiresAt > now && Math.floor(t.issuedAt / 1000) <= Math.floor(u.at / 1000)) return true;
    }
    if (t.jti !== undefined && this.tokens.size > 0) {
      const exp = this.tokens.get(tokenKey(t.tenant, t.jti));
      if (exp !== undefined && exp > now) return true;
    }
    return false;
  }

  /** Forgets what expired. */
  prune(now: number): void {
    for (const [k, u] of this.users) if (u.expiresAt <= now) this.users.delete(k);
    for (const [k, exp] of this.tokens) if (exp <= now) this.tokens.delete(k);
  }

  /** Every revocation held, for a shard that starts. */
  list(): Revocation[] {
    const out: Revocation[] = [];
    for (const [k, u] of this.users) {
      const slash = k.indexOf('/@');
      out.push({ kind: 'user', tenant: k.slice(0, slash), user: k.slice(slash + 2), at: u.at, expiresAt: u.expiresAt });
    }
    for (const [k, expiresAt] of this.tokens) {
      const nul = k.indexOf('\u0000');
      out.push({ kind: 'token', tenant: k.slice(0, nul), jti: k.slice(nul + 1), expiresAt });
    }
    return out;
  }
}

/** A token of a tenant by its `jti`: how revocations and the shards' token index key it. */
export function tokenKey(tenant: string, jti: string): string {
  return `${tenant}\u0000${jti}`;
}

/**
 * A revocation as a Redis sorted-set member (the score is its expiry):
 * JSON, so that free-text users and token ids need no escaping.
 */
export function encodeRevocation(r: Revocation): string {
  return r.kind === 'user' ? JSON.stringify(['u', r.tenant, r.user, r.at]) : JSON.stringify(['j', r.tenant, r.jti]);
}

/** The revocation of a member made by encodeRevocation, with its score; undefined for anything else. */
export function decodeRevocation(member: string, expiresAt: number): Revocation | undefined {
  let v: unknown;
  try {
    v = JSON.parse(member);
  } catch {
    return undefined;
  }
  if (!Array.isArray(v) || typeof v[1] !== 'string' || typeof v[2] !== 'string' || !Number.isFinite(expiresAt)) return undefined;
  if (v[0] === 'u' && v.length === 4 && typeof v[3] === 'number') return { kind: 'user', tenant: v[1], user: v[2], at: v[3], expiresAt };
  if (v[0] === 'j' && v.length === 3) return { kind: 'token', tenant: v[1], jti: v[2], expiresAt };
  return undefined;
}
