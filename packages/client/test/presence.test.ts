/**
 * Presence against the real gateway (WS_AUTH=jwt, WS_PRESENCE_TOPICS=room:*,
 * WS_PRESENCE_DIFF_MS=100), as the SDK sees it: users of other clients seen
 * through presence_state and presence_diff, a leave, fetchPresence() and
 * its refusals, the fresh state after a reconnect (who came and went while
 * away), a truncated list (WS_PRESENCE_MAX_USERS=1), and `$user` events
 * (admin `POST /v1/publish` with `users`), which reach
 * `client.on('user-event')` on every socket of those users and no
 * subscription.
 *
 * The gateway's presence_state comes from its worker's replica, which
 * follows the topic's owner by one flush (at most one per
 * WS_PRESENCE_DIFF_MS): a state may miss the last changes, and the diff
 * that follows brings them. So the checks are on what the kept presence
 * becomes, and on what the events of one socket say together, not on the
 * state alone.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import type { PresenceEvent, SluiceClient, SluiceError, SluiceEvent, Subscription, TokenRequest } from '../src/index.ts';
import { eventually, type Gateway, ofType, sdk, sleep, startGateway, type Tap } from './helpers.ts';

const SECRET = 'presence-test-secret-of-at-least-32-characters';
const key = new TextEncoder().encode(SECRET);

/** A token of `user` that may join `room:*` (presence topics) and `plain:*` (not). */
function token(user: string): Promise<string> {
  return new SignJWT({ sub: user, topics: ['room:*', 'plain:*'], publish: ['room:*'] }).setProtectedHeader({ alg: 'HS256' })
    .setExpirationTime(Math.floor(Date.now() / 1000) + 600).sign(key);
}

interface Member {
  readonly client: SluiceClient;
  readonly tap: Tap;
  /** Every presence event of the client, all topics. */
  readonly events: PresenceEvent[];
  /** For each event, how many sockets the client had opened when it came: 2 after the first reconnect. */
  readonly onSocket: number[];
  readonly log: ReturnType<typeof sdk>['log'];
}

function member(gw: Gateway, user: string, tokenFor: (req: TokenRequest) => Promise<string> = () => token(user)): Member {
  const { client, tap, log } = sdk({ url: gw.url(), token: tokenFor });
  const events: PresenceEvent[] = [];
  const onSocket: number[] = [];
  client.on('presence', (ev) => {
    events.push(ev);
    onSocket.push(tap.sockets.length);
  });
  client.connect();
  return { client, tap, events, onSocket, log };
}

/** Plain objects, for deepEqual: the SDK's records have no prototype. */
const plain = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

/** The users a subscription's kept presence lists, sorted. */
const users = (sub: Subscription): string[] => Object.keys(sub.presence()?.users ?? {}).sort();

/** Waits until the admin's `GET /v1/presence` lists exactly `expected` on `topic`. */
async function presentAre(gw: Gateway, topic: string, expected: readonly string[]): Promise<void> {
  await eventually(async () => {
    const res = await gw.adminFetch(`/v1/presence?tenant=default&topic=${encodeURIComponent(topic)}`);
    assert.equal(res.status, 200, await res.clone().text());
    const body = (await res.json()) as { users: Record<string, unknown>; count: number };
    return Object.keys(body.users).sort().join() === [...expected].sort().join() && body.count === expected.length;
  }, 5000);
}

describe('presence on a real gateway', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({
      WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_PRESENCE_TOPICS: 'room:*', WS_PRESENCE_DIFF_MS: '100',
      // The 4000's retryAfterMs is drawn from this range: short, so that the test is.
      WS_RETRY_AFTER_MIN_MS: '300', WS_RETRY_AFTER_MAX_MS: '600',
    });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('two users see each other (state, then diff), fetch, a leave; after a reconnect the fresh state tells who came and went', async () => {
    const topic = 'room:p1';
    const outage: { during?: () => Promise<void> } = {};
    let asked = 0;
    const alice = member(gw, 'u1', async () => {
      // The second ask is the reconnect after the operator's 4000: others come and go while alice has no socket.
      if (++asked === 2) await outage.during!();
      return token('u1');
    });
    const aliceSub = alice.client.subscribe(topic, () => undefined);
    await aliceSub.ready;
    await eventually(() => alice.events.length >= 1, 5000);
    assert.deepEqual(plain(alice.events[0]),
      { topic, joins: { u1: { connections: 1 } }, leaves: {}, users: { u1: { connections: 1 } }, count: 1, truncated: false });
    await presentAre(gw, topic, ['u1']);

    const bob = member(gw, 'u2');
    const bobSub = bob.client.subscribe(topic, () => undefined);
    await bobSub.ready;
    await eventually(() => users(bobSub).join() === 'u1,u2', 5000);
    assert.ok(Object.hasOwn(bob.events[0]!.users, 'u2'), 'bob\'s presence_state lists bob');
    assert.equal(bob.tap.received.find((w) => String(w.frame.type).startsWith('presence'))?.frame.type, 'presence_state', 'the state comes first');
    await eventually(() => users(aliceSub).join() === 'u1,u2', 5000);
    const joined = alice.events.find((e) => Object.hasOwn(e.joins, 'u2'));
    assert.ok(joined !== undefined, 'alice saw bob join through a diff');
    assert.deepEqual(plain(joined.leaves), {});

    const fetched = await bobSub.fetchPresence();
    assert.deepEqual(Object.keys(fetched.users).sort(), ['u1', 'u2']);
    assert.equal(fetched.count, 2);
    assert.equal(fetched.truncated, false);
    await assert.rejects(bob.client.fetchPresence('plain:1'), (e: SluiceError) => e.code === 'bad_request', 'a topic without presence');
    await assert.rejects(bob.client.fetchPresence('secret:1'), (e: SluiceError) => e.code === 'forbidden', 'a topic the token may not join');

    bobSub.unsubscribe();
    await eventually(() => alice.events.some((e) => Object.hasOwn(e.leaves, 'u2')), 5000);
    assert.deepEqual(users(aliceSub), ['u1']);

    const carol = member(gw, 'u3');
    await carol.client.subscribe(topic, () => undefined).ready;
    await eventually(() => users(aliceSub).join() === 'u1,u3', 5000);

    // While alice is away: carol goes, bob comes back. Her rejoin waits until the gateway's presence says so.
    outage.during = async () => {
      await carol.client.close();
      await bob.client.subscribe(topic, () => undefined).ready;
      await presentAre(gw, topic, ['u2']);
    };
    const res = await gw.adminPost('/v1/disconnect', { tenant: 'default', user: 'u1', reconnect: true });
    assert.equal(res.status, 202);
    await eventually(() => ofType(alice.log, 'connected').length === 2, 10_000);
    assert.deepEqual(ofType(alice.log, 'disconnected').map((d) => d.ev.code), [4000]);
    await eventually(() => alice.onSocket.includes(2) && users(aliceSub).join() === 'u1,u2', 5000);
    assert.equal(aliceSub.presence()!.count, 2);
    // What the new socket's state (its first event) and the diffs after it said, together: the changes while away.
    const onNew = alice.events.filter((_, i) => alice.onSocket[i] === 2);
    assert.deepEqual([...new Set(onNew.flatMap((e) => Object.keys(e.joins)))], ['u2'], 'bob came while alice was away');
    assert.deepEqual([...new Set(onNew.flatMap((e) => Object.keys(e.leaves)))], ['u3'], 'carol went while alice was away');
    assert.equal(alice.tap.received.filter((w) => w.frame.type === 'presence_state' && w.frame.topic === topic).length, 2,
      'one presence_state per socket');
    assert.deepEqual(ofType(alice.log, 'error'), []);
    await Promise.all([alice.client.close(), bob.client.close()]);
  });

  test('POST /v1/publish with users reaches client.on(\'user-event\') on each socket of those users, no subscription and no other user', async () => {
    const members = ['u1', 'u1', 'u2'].map((user) => member(gw, user));
    const userEvents = members.map(() => [] as unknown[]);
    const topicEvents = members.map(() => [] as SluiceEvent[]);
    members.forEach((m, i) => m.client.on('user-event', (data) => userEvents[i]!.push(data)));
    await Promise.all(members.map((m, i) => m.client.subscribe('plain:ue', (e) => topicEvents[i]!.push(e)).ready));
    const res = await gw.adminPost('/v1/publish', { users: ['u1', 'nobody'], data: { dm: 'hi u1' } });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { online: ['u1'] });
    await eventually(() => userEvents[0]!.length === 1 && userEvents[1]!.length === 1, 5000);
    assert.deepEqual(userEvents.slice(0, 2), [[{ dm: 'hi u1' }], [{ dm: 'hi u1' }]], 'every socket of the user');
    // That u2 got nothing is checked after a topic event published later has reached every client, and 50 ms more.
    assert.equal((await gw.adminPost('/v1/publish', { topic: 'plain:ue', data: 'topic' })).status, 200);
    await eventually(() => topicEvents.every((t) => t.length === 1), 5000);
    await sleep(50);
    assert.deepEqual(userEvents[2], [], 'another user gets nothing');
    assert.deepEqual(topicEvents.map((t) => t.map((e) => [e.topic, e.data])), [[['plain:ue', 'topic']], [['plain:ue', 'topic']], [['plain:ue', 'topic']]],
      'the user event reached no subscription');
    await Promise.all(members.map((m) => m.client.close()));
  });
});

describe('presence on a real gateway, WS_PRESENCE_MAX_USERS=1', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({
      WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_PRESENCE_TOPICS: 'room:*', WS_PRESENCE_DIFF_MS: '100', WS_PRESENCE_MAX_USERS: '1',
    });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('a truncated state: one user listed, count 3, truncated: true; fetchPresence() the same', async () => {
    const topic = 'room:t';
    const alice = member(gw, 'u1');
    const aliceSub = alice.client.subscribe(topic, () => undefined);
    const bob = member(gw, 'u2');
    const bobSub = bob.client.subscribe(topic, () => undefined);
    // Once both count each other, every worker's replica that exists has both, and a worker without a socket on the
    // topic starts its replica from the owner's: carol's state lists the cluster's users.
    await eventually(() => aliceSub.presence()?.count === 2 && bobSub.presence()?.count === 2, 5000);
    const carol = member(gw, 'u3');
    const sub = carol.client.subscribe(topic, () => undefined);
    await sub.ready;
    await eventually(() => sub.presence() !== undefined, 5000);
    const p = sub.presence()!;
    assert.deepEqual([Object.keys(p.users).length, p.count, p.truncated], [1, 3, true]);
    const fetched = await sub.fetchPresence();
    assert.deepEqual([Object.keys(fetched.users).length, fetched.count, fetched.truncated], [1, 3, true]);
    await Promise.all([alice.client.close(), bob.client.close(), carol.client.close()]);
  });
});
