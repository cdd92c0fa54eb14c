/**
 * An in-process fake gateway for the SDK's timing cases (as centrifuge-js's
 * fakeServer.ts): it speaks protocol v1 with @sluice/protocol's own decoder
 * and encoders, over in-memory sockets the SDK gets as its WebSocket, on a
 * virtual clock the SDK gets as its clock. Nothing sleeps: a test moves time
 * with `clock.advance(ms)`, and every timer due on the way fires in order.
 *
 * Defaults answer as the gateway does (welcome, join ok, publish ok with an
 * id, pong); a test overrides `onUpgrade` and `onFrame`, or pushes and
 * closes from the server's side, for the case it checks. Each socket keeps
 * the topics it is joined to (by a default join answer, or by the server's
 * `subscribe`), so that `publish` reaches the sockets a gateway's would.
 *
 * Presence (2026-12) as the gateway's contract says, without its batching:
 * `presence` holds the users of each presence topic; a join of one is
 * answered by the reply, then `presence_state`; a `presence` frame by the
 * same data, or `bad_request` for a topic without presence; `presenceDiff`
 * changes the users and sends the diff to every socket joined.
 */
import {
  type ClientFrame, type CloseReason, decodeClientFrame, encodeCloseReason, encodePong, encodeReplyError, encodeReplyOk, type Limits,
  type PresenceUser, welcomeFrame, welcomePrefix,
} from '@sluice/protocol';
import type { Clock, TimerHandle } from '../src/clock.ts';
import { SluiceClient, type SluiceClientOptions, type WebSocketConstructor, type WebSocketLike } from '../src/index.ts';
import type { UpgradeResponseLike } from '../src/socket.ts';

/** Lets every queued socket event and promise callback run; no time passes. */
export async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise<void>((r) => setImmediate(r));
}

export class FakeClock implements Clock {
  private t = 1_000_000;
  private seq = 0;
  private readonly timers = new Map<number, { readonly at: number; readonly fn: () => void }>();

  now(): number {
    return this.t;
  }

  /** The virtual epoch: 2026-12-01T00:00:00Z plus the virtual time passed. */
  wall(): number {
    return 1_796_083_200_000 + this.t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = ++this.seq;
    this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return id;
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers.delete(handle as number);
  }

  /** Timers armed now. */
  get armed(): number {
    return this.timers.size;
  }

  /** Moves time forward by `ms`, firing each timer at its due time, in order, and letting what it starts run. */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    await settle();
    for (;;) {
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const e of this.timers) if (e[1].at <= end && (next === undefined || e[1].at < next[1].at)) next = e;
      if (next === undefined) break;
      this.timers.delete(next[0]);
      this.t = next[1].at;
      next[1].fn();
      await settle();
    }
    this.t = end;
  }
}

/** What the fake does with an upgrade: welcome it, open it without a welcome, refuse it over HTTP, or drop it. */
export type Upgrade =
  | { readonly kind: 'welcome' }
  | { readonly kind: 'silent' }
  | { readonly kind: 'refuse'; readonly status: number; readonly body: string; readonly retryAfter?: string }
  | { readonly kind: 'drop' };

export interface Received {
  readonly at: number;
  readonly socket: FakeSocket;
  readonly frame: ClientFrame;
}

type Users = Record<string, PresenceUser>;

const LIMITS: Limits = { maxFrameBytes: 131072, hardMaxFrameBytes: 1048576, maxMessages: 20, rateWindowMs: 1000, maxJoins: 50 };

export class FakeServer {
  readonly clock = new FakeClock();
  readonly sockets: FakeSocket[] = [];
  readonly received: Received[] = [];
  readonly WebSocket: WebSocketConstructor;
  heartbeatMs = 25_000;
  limits: Limits = LIMITS;
  /** Set: welcome carries `expiresAt`, this many ms after it on the wall clock (a token's life, as WS_AUTH=jwt says it). */
  tokenLifeMs: number | undefined;
  onUpgrade: (url: string, protocols: string[]) => Upgrade = () => ({ kind: 'welcome' });
  /** The answer to a client frame: frames to send back, or undefined for the gateway's default answer. */
  onFrame: (frame: ClientFrame, socket: FakeSocket) => string[] | undefined = () => undefined;
  /** The presence topics and their users (WS_PRESENCE_TOPICS); a test changes them at will. */
  readonly presence = new Map<string, Users>();
  /** WS_PRESENCE_MAX_USERS: a state lists at most this many users, the first ones in the record. */
  presenceMaxUsers = 1000;
  private ids = 0;
  private conns = 0;

  constructor() {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the class below is made per server
    const server = this;
    this.WebSocket = class extends FakeSocket {
      constructor(url: string, protocols?: string | string[]) {
        super(server, url, typeof protocols === 'string' ? [protocols] : [...(protocols ?? [])]);
      }
    };
  }

  /** A client of this server, on its clock. */
  client(options: Partial<SluiceClientOptions> = {}): SluiceClient {
    return new SluiceClient({ url: 'ws://fake/ws', WebSocket: this.WebSocket, ...options }, this.clock);
  }

  /** A client that has connected and been welcomed, and the time it was. */
  async open(options: Partial<SluiceClientOptions> = {}): Promise<{ client: SluiceClient; t0: number }> {
    const client = this.client(options);
    client.connect();
    await this.clock.advance(0);
    if (client.state !== 'open') throw new Error(`the client is ${client.state}, not open`);
    return { client, t0: this.clock.now() };
  }

  get last(): FakeSocket {
    const s = this.sockets.at(-1);
    if (s === undefined) throw new Error('no socket yet');
    return s;
  }

  /** Times at which the client opened each socket. */
  get openedAt(): number[] {
    return this.sockets.map((s) => s.createdAt);
  }

  ofType(type: ClientFrame['type']): Received[] {
    return this.received.filter((r) => r.frame.type === type);
  }

  /** @internal */
  accept(socket: FakeSocket): void {
    this.sockets.push(socket);
    const upgrade = this.onUpgrade(socket.url, socket.protocols);
    socket.later(() => {
      switch (upgrade.kind) {
        case 'drop':
          socket.serverClose(1006, '');
          return;
        case 'refuse':
          socket.refuse(upgrade.status, upgrade.body, upgrade.retryAfter);
          return;
        default:
          socket.opened();
          if (upgrade.kind === 'welcome') {
            const expiresAt = this.tokenLifeMs === undefined ? undefined : this.clock.wall() + this.tokenLifeMs;
            socket.push(welcomeFrame(welcomePrefix(this.heartbeatMs, this.limits), `fake.0.0.${++this.conns}`, expiresAt));
          }
      }
    });
  }

  /** @internal */
  frame(socket: FakeSocket, text: string): void {
    const r = decodeClientFrame(text);
    if (!r.ok) throw new Error(`the SDK sent a frame the gateway refuses: ${text} (${r.message})`);
    const f = r.frame;
    this.received.push({ at: this.clock.now(), socket, frame: f });
    const answer = this.onFrame(f, socket) ?? this.defaultAnswer(f, socket);
    for (const a of answer) socket.push(a);
  }

  /** The id the next durable publish gets. */
  nextId(): string {
    return `${this.clock.now()}-${this.ids++}`;
  }

  /** A durable event, as `POST /v1/publish` makes one: to every open socket joined to `topic`. Returns its id. */
  publish(topic: string, data: unknown): string {
    const id = this.nextId();
    const frame = JSON.stringify({ type: 'event', topic, id, data });
    for (const s of this.sockets) if (s.readyState === 1 && s.topics.has(topic)) s.push(frame);
    return id;
  }

  /** `presence_state` of `topic` without type and topic, as the gateway lists it: the `data` of a `presence` reply. */
  presenceData(topic: string): { users: Users; count: number; truncated?: true } {
    const all = Object.entries(this.presence.get(topic) ?? {});
    const users = Object.fromEntries(all.slice(0, this.presenceMaxUsers));
    return all.length > this.presenceMaxUsers ? { users, count: all.length, truncated: true } : { users, count: all.length };
  }

  /** Users come and go on a presence topic: the users change, and every open socket joined to it gets the diff. */
  presenceDiff(topic: string, joins: Users, leaves: readonly string[]): void {
    const users = { ...this.presence.get(topic), ...joins };
    for (const u of leaves) delete users[u];
    this.presence.set(topic, users);
    const frame = JSON.stringify({ type: 'presence_diff', topic, joins, leaves: Object.fromEntries(leaves.map((u) => [u, {}])) });
    for (const s of this.sockets) if (s.readyState === 1 && s.topics.has(topic)) s.push(frame);
  }

  private defaultAnswer(f: ClientFrame, socket: FakeSocket): string[] {
    switch (f.type) {
      case 'ping':
        return [encodePong(f.ref)];
      case 'publish':
        return [encodeReplyOk(f.ref, f.cls === 0 ? JSON.stringify({ id: this.nextId() }) : undefined)];
      case 'join':
        socket.topics.add(f.topic);
        if (!this.presence.has(f.topic)) return [encodeReplyOk(f.ref)];
        return [encodeReplyOk(f.ref), JSON.stringify({ type: 'presence_state', topic: f.topic, ...this.presenceData(f.topic) })];
      case 'presence':
        return this.presence.has(f.topic) ? [encodeReplyOk(f.ref, JSON.stringify(this.presenceData(f.topic)))]
          : [encodeReplyError(f.ref, 'bad_request', undefined, `${f.topic} has no presence`)];
      case 'leave':
        socket.topics.delete(f.topic);
        return [encodeReplyOk(f.ref)];
      default:
        return [encodeReplyOk(f.ref)];
    }
  }
}

type Handler = ((ev: never) => unknown) | null;

/** One in-memory socket: the SDK's side is the WebSocket surface; the test's side is push, serverClose and mute. */
export class FakeSocket implements WebSocketLike {
  readyState = 0;
  readonly protocol = 'sluice.v1';
  readonly createdAt: number;
  onopen: Handler = null;
  onmessage: Handler = null;
  onclose: Handler = null;
  onerror: Handler = null;
  /** The close code the client sent, if it closed. */
  closedByClient: number | undefined;
  /** A muted socket delivers nothing either way: a dead network. */
  muted = false;
  /** The topics the server has this socket joined to. */
  readonly topics = new Set<string>();
  private refusalListener: ((req: unknown, res: UpgradeResponseLike) => void) | undefined;

  constructor(private readonly server: FakeServer, readonly url: string, readonly protocols: string[]) {
    this.createdAt = server.clock.now();
    server.accept(this);
  }

  /** Socket events come asynchronously, as from a real socket. */
  later(fn: () => void): void {
    queueMicrotask(fn);
  }

  send(data: string): void {
    if (this.readyState !== 1) throw new Error('send on a socket that is not open');
    if (this.muted) return;
    this.later(() => {
      if (this.readyState === 1) this.server.frame(this, data);
    });
  }

  close(code = 1000): void {
    if (this.readyState >= 2) return;
    this.closedByClient = code;
    this.readyState = 2;
    // The server answers the closing handshake, unless the network is dead.
    if (!this.muted) this.later(() => this.end(code, ''));
  }

  terminate(): void {
    this.later(() => this.end(1006, ''));
  }

  on(event: 'unexpected-response', listener: (req: unknown, res: UpgradeResponseLike) => void): this {
    if (event === 'unexpected-response') this.refusalListener = listener;
    return this;
  }

  // --- the server's side ---

  opened(): void {
    this.readyState = 1;
    this.call(this.onopen, {});
  }

  push(frame: string): void {
    if (this.muted) return;
    this.later(() => {
      if (this.readyState === 1) this.call(this.onmessage, { data: frame });
    });
  }

  serverClose(code: number, reason: string): void {
    this.later(() => this.end(code, reason));
  }

  /** A close as the gateway sends it: `code` with the JSON reason `{"reason":...,"retryAfterMs":...}`. */
  closeWith(code: number, reason: CloseReason, retryAfterMs?: number): void {
    this.serverClose(code, encodeCloseReason(reason, retryAfterMs));
  }

  /** Any server frame, given as an object: sent as its JSON. */
  pushFrame(frame: Readonly<Record<string, unknown>>): void {
    this.push(JSON.stringify(frame));
  }

  /** `POST /v1/subscribe` reaching this socket: joined to `topic`, and told so with `subscribed`. */
  subscribe(topic: string): void {
    this.topics.add(topic);
    this.pushFrame({ type: 'subscribed', topic });
  }

  /** The socket leaves `topic` without asking (`removed`: `POST /v1/unsubscribe`; `forbidden`: a refresh), and is told so. */
  unsubscribe(topic: string, reason: 'removed' | 'forbidden'): void {
    this.topics.delete(topic);
    this.pushFrame({ type: 'unsubscribed', topic, reason });
  }

  refuse(status: number, body: string, retryAfter: string | undefined): void {
    const listeners = new Map<string, (chunk?: unknown) => void>();
    const res: UpgradeResponseLike = {
      statusCode: status,
      headers: retryAfter === undefined ? {} : { 'retry-after': retryAfter },
      on(event: string, listener: (chunk?: unknown) => void) {
        listeners.set(event, listener);
        return res;
      },
    };
    if (this.refusalListener === undefined) {
      this.end(1006, ''); // a browser sees only the close
      return;
    }
    this.refusalListener(undefined, res);
    listeners.get('data')?.(body);
    listeners.get('end')?.();
  }

  private end(code: number, reason: string): void {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.call(this.onclose, { code, reason });
  }

  private call(h: Handler, ev: unknown): void {
    if (h !== null) (h as (e: unknown) => unknown)(ev);
  }
}
