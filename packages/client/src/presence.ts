/**
 * Presence kept per topic, as phoenix.js's `Presence.syncState` and
 * `syncDiff` keep it: pure functions from the kept state and a server frame
 * to the next state and what changed in its list of users.
 *
 * A state is never changed once made: every change makes a new one, so a
 * state handed to the application (`presence()`, a `presence` event) stays
 * what it was. Records are made without a prototype: a user id is any JWT
 * `sub`, `__proto__` included.
 */
import type { PresenceData, PresenceUser } from '@sluice/protocol';

export type Users = Readonly<Record<string, PresenceUser>>;

/** The next state, and who entered (`joins`) or left (`leaves`) its `users`. `joins` and `leaves` never share a user. */
export interface PresenceChange {
  readonly state: PresenceData;
  readonly joins: Users;
  readonly leaves: Users;
}

const users = (): Record<string, PresenceUser> => Object.create(null) as Record<string, PresenceUser>;

/**
 * A `presence_state` replaces the kept state: the first after a join, or
 * the fresh one after a rejoin. Compared with what was kept (the last state
 * before the socket went), users that are new are joins and users that are
 * gone are leaves: who came and went while the client was away.
 */
export function replaceState(old: PresenceData | undefined, next: PresenceData): PresenceChange {
  const before = old?.users ?? {};
  const list = users();
  const joins = users();
  const leaves = users();
  for (const u in next.users) {
    list[u] = next.users[u]!;
    if (!Object.hasOwn(before, u)) joins[u] = list[u];
  }
  for (const u in before) if (!Object.hasOwn(list, u)) leaves[u] = before[u]!;
  return { state: { users: list, count: next.count, truncated: next.truncated }, joins, leaves };
}

/**
 * A `presence_diff`: joins, then leaves. A user that joins and leaves in
 * one diff ends absent and is in neither list. `count` follows every user:
 * a leave of a user the truncated list did not show counts too. Once the
 * list holds `count` users it is whole again (`truncated: false`).
 */
export function applyDiff(old: PresenceData, diff: { readonly joins: Users; readonly leaves: Readonly<Record<string, unknown>> }): PresenceChange {
  const list = users();
  for (const u in old.users) list[u] = old.users[u]!;
  const joins = users();
  const leaves = users();
  let count = old.count;
  for (const u in diff.joins) {
    // A user already listed (which the server should not send) keeps its place and is not a join.
    if (!Object.hasOwn(list, u)) {
      joins[u] = diff.joins[u]!;
      count++;
    }
    list[u] = diff.joins[u]!;
  }
  for (const u in diff.leaves) {
    if (Object.hasOwn(list, u)) {
      if (Object.hasOwn(joins, u)) delete joins[u];
      else leaves[u] = list[u]!;
      delete list[u];
      count--;
    } else if (old.truncated) count--; // one of the users the list left out
  }
  const listed = Object.keys(list).length;
  count = Math.max(count, listed);
  return { state: { users: list, count, truncated: old.truncated && listed < count }, joins, leaves };
}
