/**
 * Every key Sluice builds for a store, in one place: the in-process keys
 * (topic keys, idempotency scopes, window keys) and the Redis keys and
 * channels built on them.
 *
 * The rules that keep keys apart:
 *
 * - Tenants and topics match TOPIC_PATTERN (`[A-Za-z0-9:_.-]`): no `/`,
 *   no braces, no `$`, `@` or `#`. A topic key `<tenant>/<topic>` can so be
 *   split at its first `/`, and the kinds below that add a marker after the
 *   `/` (`@` for users) never equal a topic key.
 * - User ids (a token's `sub`), token ids (`jti`) and idempotency keys are
 *   free text: where one ends a key it needs no escaping; where one sits
 *   inside a Redis hash tag it is percent-encoded (`tagSafe`); where one is
 *   followed by more text its length is written first.
 * - Window keys (one namespace, the WindowStore's) start with a kind and a
 *   colon (`t:`, `tc:`, `ip:`, `u:`): no kind is a prefix of another.
 * - Redis keys start with `sluice:<kind>:`. Every key a script or a
 *   pipeline reads or writes together carries the same hash tag, so that
 *   with Redis Cluster they live in one slot: a topic's stream, floor,
 *   channel, idempotency records (Cluster) and presence share the tag
 *   `{<tenant>/<topic>}`; a user's channel and socket counts share
 *   `{<tenant>/@<user>}`; a window's buckets share `{<window key>}`.
 */

/**
 * Inside the gateway a topic is namespaced by its tenant, so that one tenant
 * can never receive another's events. Tenant ids never contain '/'.
 */
export function topicKey(tenant: string, topic: string): string {
  return `${tenant}/${topic}`;
}

/** Idempotency keys are per tenant: two tenants may use the same key (the in-memory table's key). */
export function idempotencyScope(tenant: string, key: string): string {
  return `${tenant}\u0000${key}`;
}

/**
 * A user of a tenant, as the gateway indexes sockets by user (revocation,
 * disconnect, server-side subscribe, user-addressed events, presence).
 * The `@` after the tenant's `/` keeps it apart from every topic key.
 */
export function userKey(tenant: string, user: string): string {
  return `${tenant}/@${user}`;
}

// --- window keys (the WindowStore's namespace) ------------------------------

/** A tenant's publish window (WS_TENANT_MSG_LIMIT). */
export function tenantWindowKey(tenant: string): string {
  return `t:${tenant}`;
}

/** A tenant's upgrade-attempt window (WS_TENANT_CONNECT_LIMIT). */
export function tenantConnectWindowKey(tenant: string): string {
  return `tc:${tenant}`;
}

/** An address's upgrade-attempt window (WS_IP_CONNECT_LIMIT). */
export function ipWindowKey(ip: string): string {
  return `ip:${ip}`;
}

/** A user's publish window, over every socket of the user (WS_USER_MSG_LIMIT). */
export function userWindowKey(tenant: string, user: string): string {
  return `u:${userKey(tenant, user)}`;
}

// --- Redis keys -------------------------------------------------------------

export const REDIS_PREFIX = 'sluice:';

/**
 * Text that may stand inside a Redis hash tag: braces and `%` are
 * percent-encoded, so that the text cannot end the tag early or open
 * another, and the empty text is `%` (Redis ignores an empty tag `{}`).
 */
export function tagSafe(text: string): string {
  if (text === '') return '%';
  if (!/[%{}]/.test(text)) return text;
  return text.replace(/[%{}]/g, (c) => (c === '%' ? '%25' : c === '{' ? '%7B' : '%7D'));
}

/**
 * What Redis Cluster hashes for a key's slot: the text between the first
 * `{` and the first `}` after it when that is not empty, else the whole key.
 */
export function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  if (open < 0) return key;
  const close = key.indexOf('}', open + 1);
  if (close < 0 || close === open + 1) return key;
  return key.slice(open + 1, close);
}

/** A topic's Redis keys, all in the topic's slot (`topic` is a topic key). */
export interface TopicRedisKeys {
  /** The history stream; its ids are the events' ids. */
  readonly stream: string;
  /** The newest id trimmed from the stream (what `recovered` is judged by). */
  readonly floor: string;
}

export function topicRedisKeys(topic: string): TopicRedisKeys {
  return { stream: `${REDIS_PREFIX}h:{${topic}}`, floor: `${REDIS_PREFIX}f:{${topic}}` };
}

export const TOPIC_CHANNEL_PREFIX = `${REDIS_PREFIX}c:`;

/** A topic's pub/sub channel (sharded with Cluster); `topic` is a topic key. */
export function topicChannel(topic: string): string {
  return `${TOPIC_CHANNEL_PREFIX}{${topic}}`;
}

/** The topic key of a channel made by `topicChannel`; undefined for any other channel. */
export function topicOfChannel(channel: string): string | undefined {
  if (!channel.startsWith(TOPIC_CHANNEL_PREFIX) || !channel.endsWith('}')) return undefined;
  return channel.slice(TOPIC_CHANNEL_PREFIX.length + 1, -1);
}

/**
 * An idempotency record in Redis. Standalone: one record per (tenant, key),
 * as in memory (the tenant's length first, so that no tenant and key run
 * into another pair). Cluster: the record must share the topic's slot to be
 * written by the publish script, so it is per (tenant, topic, key).
 */
export function idempotencyRedisKey(cluster: boolean, tenant: string, topic: string, key: string): string {
  return cluster ? `${REDIS_PREFIX}i:{${topic}}:${key}` : `${REDIS_PREFIX}i:${tenant.length}:${tenant}:${key}`;
}

/** A window key's bucket: `<prefix>{<key>}:<bucket>`; both buckets a settle reads share the tag. */
export function windowRedisKey(prefix: string, key: string, bucket: number): string {
  return `${prefix}{${tagSafe(key)}}:${bucket}`;
}

export const WINDOW_PREFIX = `${REDIS_PREFIX}win:`;

// --- Redis keys of the 2026-12 additions (users, presence, revocation) ------

/** The tag of a user's keys: `<tenant>/@<user>`, the user encoded. */
function userTag(tenant: string, user: string): string {
  return `{${userKey(tenant, tagSafe(user))}}`;
}

/**
 * A user's open sockets across the cluster (WS_MAX_USER_SOCKETS, `online`):
 * a hash of holder (a shard generation, `HOLDERS_KEY`) to count.
 */
export function userSocketsKey(tenant: string, user: string): string {
  return `${REDIS_PREFIX}us:${userTag(tenant, user)}`;
}

/**
 * Every revocation in force, cluster-wide: one sorted set whose members are
 * the revocations (`encodeRevocation`, JSON) and whose scores are their
 * expiries (ms). One key, so that a node that starts, or finds Redis again,
 * reads them all with one ZRANGEBYSCORE and drops the expired ones with one
 * ZREMRANGEBYSCORE (with Cluster it lives in one slot, like any key).
 */
export const REVOCATIONS_KEY = `${REDIS_PREFIX}rv`;

/** `userSocketsKey` of a `userKey` (`<tenant>/@<user>`: a tenant never holds a `/`). */
export function userSocketsKeyOf(key: string): string {
  const at = key.indexOf('/@');
  return userSocketsKey(key.slice(0, at), key.slice(at + 2));
}

/**
 * The holders of user sockets (WS_MAX_USER_SOCKETS): a sorted set of shard
 * generations, scored by when each last said it was alive (ms). A user's
 * count (`userSocketsKey`) sums only the fields of live holders.
 */
export const HOLDERS_KEY = `${REDIS_PREFIX}holders`;

/**
 * The cluster's control channel: revocations, disconnects and server-side
 * subscribes and unsubscribes, sent to every node (each acts on the sockets
 * it holds).
 */
export const CONTROL_CHANNEL = `${REDIS_PREFIX}ctl`;

/**
 * The control channel's answers to one node (`"users"` publishes: which of
 * the users each node holds). Events to users go over the control channel,
 * one message per publish: no node subscribes per user.
 */
export function controlReplyChannel(node: string): string {
  return `${CONTROL_CHANNEL}:r:${node}`;
}

/**
 * The nodes alive, cluster-wide: a sorted set of node ids scored by when
 * each one's lease ends (ms, Redis's clock). A node renews its own; one that
 * stops renewing is dropped by the next node that renews after it ended.
 */
export const NODES_KEY = `${REDIS_PREFIX}nodes`;

/**
 * One node's members of a presence topic: a hash of user to connection
 * count, and the field `\x00seq` (no user id holds a control character),
 * the number of the node's last write, in the topic's slot (`topic` is a
 * topic key, `node` a node id: hex).
 */
export function presenceKey(topic: string, node: string): string {
  return `${REDIS_PREFIX}p:{${topic}}:${node}`;
}

/** A presence topic's joins and leaves, for the nodes that batch them into diffs. */
export function presenceChannel(topic: string): string {
  return `${REDIS_PREFIX}pc:{${topic}}`;
}
