/**
 * Per-socket state, typed, stored as the uWS user data. Made once at the
 * upgrade (admission.ts); each part of the shard states the slice of it it
 * reads and writes.
 */
import { ANONYMOUS, type FixedWindowState, type Identity, type Mailbox, type MailItem, type Rights, type StrikeState, tenantWindowKey, userKey,
  userWindowKey } from '@sluice/core';
import { closeCodeOf, type CloseReason, encodeCloseReason, type JoinFrame, type PublishFrame } from '@sluice/protocol';
import type { WebSocket } from '@sluice/uws';
import type { LaneData } from '../slow-lane.ts';
import type { UserSlot } from '../user-slot.ts';
import type { ShardTask } from './task.ts';

export interface SocketData extends FixedWindowState, StrikeState, LaneData {
  /**
   * The connection id is `idPrefix` (the shard generation's, one string for
   * all its sockets) and `seq` in base 36: made by `socketId` when it is
   * needed (the welcome, webhooks, hooks, logs), not held per socket.
   */
  readonly idPrefix: string;
  readonly seq: number;
  /** Who the socket is: fixed at the upgrade, never changed. */
  readonly tenant: string;
  /** The tenant's publish-window key, made once here rather than per frame. */
  readonly tenantWindowKey: string;
  readonly user: string;
  /** `userKey(tenant, user)`: how the shard indexes its sockets by user. */
  readonly userKey: string;
  /** The user's publish-window key; empty when WS_USER_MSG_LIMIT is off. */
  readonly userWindowKey: string;
  /** It holds a place under WS_MAX_USER_SOCKETS (claimed at the upgrade, or again after a Redis outage): given back at its close. */
  claimed: boolean;
  /** The current token's `iat` (ms, -Infinity without one) and `jti`: what a revocation is checked against. */
  issuedAt: number;
  jti: string | undefined;
  /** The client address (X-Forwarded-For only behind WS_TRUST_PROXY). */
  readonly ip: string;
  /** Topics the socket may join and publish to: the token's, replaced by a `refresh`'s. */
  join: Rights;
  pub: Rights;
  /** The token's exp in ms; Infinity without a token. The socket is closed with 4001 then, unless a `refresh` moved it. */
  expiresAt: number;
  /** False from the moment the shard decided to close it (or it closed): nothing more is sent. */
  open: boolean;
  /** Publishes sent to the broker whose ack the client has not been sent yet. */
  inflight: number;
  /** Joined topics: client name to tenant-scoped key. Created on first join. */
  topics: Map<string, string> | null;
  /** Joined topics the operator subscribed the socket to (`POST /v1/subscribe`): a refresh's rights do not take them away. */
  granted: Set<string> | null;
  /** Joins waiting for the subscribe hook, by topic (not yet in `topics`); created on the first. */
  hookJoins: Map<string, HookJoin> | null;
  /** Publishes waiting for (or queued behind) the publish hook, oldest first: they reach the broker in frame order. */
  hookPubs: PublishFrame[] | null;
  /** Presence topics (keys) whose join completed: the socket counts toward its user's presence there. */
  present: Set<string> | null;
  /** Since when the socket's unsent bytes are above the soft limit; -1 when they are not. */
  congestedSince: number;
  /** The socket's mailbox while it is in the slow lane. */
  mailbox: Mailbox<MailItem> | null;
  unsent: number;
}

/** A socket: its state is `ws.getUserData().d` (see UserSlot for why not the user data itself). */
export type Socket = WebSocket<SocketSlot>;
export type SocketSlot = UserSlot<SocketData>;

/** A join the subscribe hook is deciding: a `leave` meanwhile cancels it; joins of the same topic meanwhile wait for it. */
export interface HookJoin {
  cancelled: boolean;
  readonly waiting: JoinFrame[];
}

/** The part of a connection id every socket of one shard generation shares: `<node>.<shard>.<generation>.`. */
export function socketIdPrefix(t: Pick<ShardTask, 'nodeId' | 'shard' | 'generation'>): string {
  return `${t.nodeId}.${t.shard}.${t.generation}.`;
}

/** The socket's connection id, `<node>.<shard>.<generation>.<seq in base 36>`. */
export function socketId(d: Pick<SocketData, 'idPrefix' | 'seq'>): string {
  return d.idPrefix + d.seq.toString(36);
}

/**
 * Tenants' publish-window keys, one string per tenant shared by its
 * sockets rather than one per socket. Tenants are few; past this many the
 * key is made per socket again.
 */
const TENANT_KEYS_MAX = 10_000;
const tenantKeys = new Map<string, string>();
/** WS_AUTH=none: every socket is ANONYMOUS, and shares its user key. */
const ANONYMOUS_USER_KEY = userKey(ANONYMOUS.tenant, ANONYMOUS.user);

function tenantKeyOf(tenant: string): string {
  let key = tenantKeys.get(tenant);
  if (key === undefined) {
    key = tenantWindowKey(tenant);
    if (tenantKeys.size < TENANT_KEYS_MAX) tenantKeys.set(tenant, key);
  }
  return key;
}

/** Every field set, in one order, so that every socket's data has one shape. */
export function newSocketData(idPrefix: string, seq: number, who: Identity, ip: string, userLimit: boolean, claimed: boolean): SocketData {
  return {
    idPrefix,
    seq,
    tenant: who.tenant,
    tenantWindowKey: tenantKeyOf(who.tenant),
    user: who.user,
    userKey: who === ANONYMOUS ? ANONYMOUS_USER_KEY : userKey(who.tenant, who.user),
    userWindowKey: userLimit ? userWindowKey(who.tenant, who.user) : '',
    claimed,
    issuedAt: who.issuedAt,
    jti: who.jti,
    ip,
    join: who.join,
    pub: who.publish,
    expiresAt: who.expiresAt,
    open: true,
    strikes: 0,
    inflight: 0,
    topics: null,
    granted: null,
    hookJoins: null,
    hookPubs: null,
    present: null,
    congestedSince: -1,
    mailbox: null,
    unsent: 0,
    windowStart: 0,
    windowCount: 0,
  };
}

/**
 * Closes a socket with the code and JSON reason of the protocol's close
 * table, once: a socket already closing is left alone. `closes` counts it.
 */
export function closeSocket(ws: Socket, d: { open: boolean }, reason: CloseReason, closes: Record<string, number>,
  retryAfterMs?: number): void {
  if (!d.open) return;
  d.open = false;
  closes[reason] = (closes[reason] ?? 0) + 1;
  ws.end(closeCodeOf(reason, retryAfterMs), encodeCloseReason(reason, retryAfterMs));
}
