// Type-checked by test/package.test.ts with `tsc --strict --noEmit` (module
// NodeNext) in the project where the packed tarball was installed: every
// line uses the shipped dist/index.d.ts, so a missing or wrong declaration,
// or a type that fell back to `any`, fails the check (the @ts-expect-error
// lines must be errors). No DOM library and no Node types: the declarations
// must stand on their own.
import {
  afterClose, type ClientState, type ConnectedEvent, DEFAULT_BACKOFF, type Disposition, fullJitter, Pacer, type PresenceEvent,
  type PresenceState, type PresenceUser, type PublishResult, reconnectDelay, SluiceClient, type SluiceClientOptions, SluiceError, type SluiceErrorCode, type SluiceEvent, type Subscription,
  type WebSocketConstructor, type WebSocketLike,
} from '@sluice/client';
import { SluiceClient as BrowserClient } from '@sluice/client/browser';

class FakeSocket implements WebSocketLike {
  readonly readyState = 0;
  readonly protocol = '';
  onopen: ((ev: never) => unknown) | null = null;
  onmessage: ((ev: never) => unknown) | null = null;
  onclose: ((ev: never) => unknown) | null = null;
  onerror: ((ev: never) => unknown) | null = null;
  constructor(readonly url: string, readonly protocols?: string | string[]) {}
  send(_data: string): void {}
  close(_code?: number, _reason?: string): void {}
}

const WebSocket: WebSocketConstructor = FakeSocket;
const options: SluiceClientOptions = {
  url: ['ws://gw-1.test/ws', 'ws://gw-2.test/ws'],
  WebSocket,
  token: async ({ refresh, reason }) => (refresh ? `fresh.${reason ?? 'none'}` : 'cached'),
  tokenIn: 'protocol',
  backoff: { initialMs: 250, maxMs: 10_000 },
  outboxLimit: 10,
};
export const client = new SluiceClient(options);
export const seen: unknown[] = [];
const state: ClientState = client.state;
export const stateName: string = state;

export const removeListener: () => void = client.on('connected', (ev: ConnectedEvent) => {
  // Limits comes from @sluice/protocol: inlined into the declarations.
  const limits: { maxFrameBytes: number; maxMessages: number; rateWindowMs: number; maxJoins: number } = ev.limits;
  seen.push(ev.connectionId.toUpperCase(), ev.heartbeatMs.toFixed(0), limits.maxFrameBytes + 1);
});
client.on('reconnecting', ({ inMs, attempt, status }) => seen.push(inMs + attempt, status?.toFixed(0)));
client.on('error', (err) => {
  const e: SluiceError = err;
  const code: SluiceErrorCode = e.code;
  seen.push(code, e.closeCode, e.topic);
});

export const sub: Subscription = client.subscribe('room:42', (event: SluiceEvent) => {
  const id: string | undefined = event.id;
  seen.push(event.topic.length, id, event.data);
}, { since: '1796000000123-0' });
export const ready: Promise<boolean | undefined> = sub.ready.then((r) => r.recovered);

// Presence (2026-12): the kept state, its events on the subscription and the client, and a fetch.
export const present: Readonly<Record<string, PresenceUser>> | undefined = sub.presence()?.users;
export const stopListening: () => void = sub.on('presence', (ev: PresenceEvent) => {
  seen.push(ev.topic, Object.keys(ev.joins), Object.keys(ev.leaves), ev.users['u1']?.connections, ev.count, ev.truncated);
});
client.on('presence', ({ topic, count }) => seen.push(topic, count.toFixed(0)));
export const fetched: Promise<number> = sub.fetchPresence().then((p: PresenceState) => p.count);
export const lobby: Promise<boolean> = client.fetchPresence('lobby').then((p) => p.truncated);
client.on('user-event', (data: unknown) => seen.push(data));

export const acked: Promise<string | undefined> = client.publish('room:42', { text: 'hi' }, { idempotencyKey: 'k-1' })
  .then((r: PublishResult) => (r.duplicate === true ? `dup ${r.id ?? ''}` : r.id));
export const closed: Promise<void> = client.close();

export const disposition: Disposition = afterClose(1012, '{"reason":"unavailable","retryAfterMs":500}');
export const wait: number = reconnectDelay(2, DEFAULT_BACKOFF, Math.random, 500) + fullJitter(1, DEFAULT_BACKOFF, () => 0.5);
export const pacer: Pacer = new Pacer(20, 1000);
export const browserClient: BrowserClient = new BrowserClient({ url: 'wss://chat.test/ws', WebSocket });
export const error: SluiceError = new SluiceError('outbox_full', 'full');

// @ts-expect-error -- a topic is a string: the types are real, not `any`
client.publish(42, {});
// @ts-expect-error -- no such event
client.on('no-such-event', () => undefined);
// @ts-expect-error -- a subscription's only event is presence
sub.on('connected', () => undefined);
// @ts-expect-error -- url is required
export const bad = new SluiceClient({ WebSocket });
