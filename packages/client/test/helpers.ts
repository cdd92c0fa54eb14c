/**
 * Test helpers: the gateway test kit (`@sluice/gateway/testing`), a `ws` wrapper that lets a test watch
 * and steer what the SDK's socket does, and readers of a topic's history.
 */
import type { Socket } from 'node:net';
import { after } from 'node:test';
import WebSocket from 'ws';
import { Client, eventually, type Frame, type Gateway } from '@sluice/gateway/testing';
import { type ClientEvents, SluiceClient, type SluiceClientOptions, type WebSocketConstructor, type WebSocketLike } from '../src/index.ts';

export { Client, eventually, type Frame, type Gateway };
export { metricValue, startGateway } from '@sluice/gateway/testing';

export interface Wire {
  /** Order of the frame among every frame of the tap, both ways. */
  readonly seq: number;
  readonly at: number;
  readonly frame: Record<string, unknown>;
}

export interface SocketHooks {
  /** Rewrites an incoming text frame before the SDK sees it. */
  incoming?: (frame: Record<string, unknown>) => Record<string, unknown>;
}

/**
 * A WebSocket for the SDK that wraps a real `ws` client and records every
 * frame both ways, by composition: the SDK sees only the standard surface,
 * plus `on` and `terminate`, which are passed through like `ws` offers them.
 */
export class Tap {
  readonly sockets: TappedSocket[] = [];
  readonly sent: Wire[] = [];
  readonly received: Wire[] = [];
  readonly WebSocket: WebSocketConstructor;
  seq = 0;

  constructor(hooks: SocketHooks = {}) {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the class below is created per Tap
    const tap = this;
    this.WebSocket = class extends TappedSocket {
      constructor(url: string, protocols?: string | string[]) {
        super(url, protocols, tap, hooks);
        tap.sockets.push(this);
      }
    };
  }

  get last(): TappedSocket {
    const s = this.sockets.at(-1);
    if (s === undefined) throw new Error('no socket yet');
    return s;
  }

  sentOfType(type: string): Wire[] {
    return this.sent.filter((w) => w.frame.type === type);
  }
}

export class TappedSocket implements WebSocketLike {
  readonly inner: WebSocket;
  readonly url: string;
  readonly protocols: string[];
  readonly createdAt = Date.now();
  onopen: ((ev: never) => unknown) | null = null;
  onmessage: ((ev: never) => unknown) | null = null;
  onclose: ((ev: never) => unknown) | null = null;
  onerror: ((ev: never) => unknown) | null = null;
  closed: { code: number; reason: string } | undefined;

  constructor(url: string, protocols: string | string[] | undefined, private readonly tap: Tap, private readonly hooks: SocketHooks) {
    this.url = url;
    this.protocols = typeof protocols === 'string' ? [protocols] : [...(protocols ?? [])];
    this.inner = new WebSocket(url, protocols);
    const call = (h: ((ev: never) => unknown) | null, ev: unknown): void => {
      if (h !== null) (h as (e: unknown) => unknown)(ev);
    };
    this.inner.onopen = (ev) => call(this.onopen, ev);
    this.inner.onerror = (ev) => call(this.onerror, ev);
    this.inner.onclose = (ev) => {
      this.closed = { code: ev.code, reason: ev.reason };
      call(this.onclose, { code: ev.code, reason: ev.reason });
    };
    this.inner.onmessage = (ev) => {
      let text = String(ev.data);
      let frame = JSON.parse(text) as Record<string, unknown>;
      if (this.hooks.incoming !== undefined) {
        frame = this.hooks.incoming(frame);
        text = JSON.stringify(frame);
      }
      this.tap.received.push({ seq: ++this.tap.seq, at: Date.now(), frame });
      call(this.onmessage, { data: text });
    };
  }

  get readyState(): number {
    return this.inner.readyState;
  }

  get protocol(): string {
    return this.inner.protocol;
  }

  send(data: string): void {
    this.tap.sent.push({ seq: ++this.tap.seq, at: Date.now(), frame: JSON.parse(data) as Record<string, unknown> });
    this.inner.send(data);
  }

  close(code?: number, reason?: string): void {
    this.inner.close(code, reason);
  }

  terminate(): void {
    this.inner.terminate();
  }

  on(event: 'unexpected-response', listener: (...args: never[]) => void): this {
    this.inner.on(event, listener as (...args: unknown[]) => void);
    return this;
  }

  /** Stops reading from the TCP socket: the kernel buffers fill, then the gateway's. */
  pauseReading(): void {
    (this.inner as unknown as { _socket: Socket })._socket.pause();
  }

  resumeReading(): void {
    (this.inner as unknown as { _socket: Socket })._socket.resume();
  }
}

export type Logged = { [K in keyof ClientEvents]: { readonly at: number; readonly type: K; readonly ev: ClientEvents[K] } }[keyof ClientEvents];

/** Every event a client emits, with the time it came. */
export function record(client: SluiceClient): Logged[] {
  const log: Logged[] = [];
  for (const type of ['connected', 'disconnected', 'reconnecting', 'recovered', 'error'] as const) {
    client.on(type, (ev: unknown) => log.push({ at: Date.now(), type, ev } as Logged));
  }
  return log;
}

export function ofType<K extends keyof ClientEvents>(log: Logged[], type: K): { at: number; ev: ClientEvents[K] }[] {
  return log.filter((l) => l.type === type) as unknown as { at: number; ev: ClientEvents[K] }[];
}

const live = new Set<SluiceClient>();

// A test that fails half-way leaves its clients reconnecting; they are closed
// when the file ends, so that its process can exit.
after(async () => {
  await Promise.all([...live].map((c) => c.close()));
});

/** A client on `ws`, with the test's tap unless one is given; closed at the end of the file at the latest. */
export function sdk(options: Partial<SluiceClientOptions> & Pick<SluiceClientOptions, 'url'>, tap = new Tap()): { client: SluiceClient; tap: Tap; log: Logged[] } {
  const client = new SluiceClient({ WebSocket: tap.WebSocket, ...options });
  live.add(client);
  return { client, tap, log: record(client) };
}

/** Every event of `topic` still in the gateway's history, read by a plain socket joining with since 0-0. */
export async function history(gw: Gateway, topic: string): Promise<Frame[]> {
  const c = await Client.connect(gw.url());
  try {
    const reply = await c.request({ type: 'join', topic, since: '0-0' });
    if (reply.status !== 'ok') throw new Error(`history join refused: ${JSON.stringify(reply)}`);
    return c.takeEvents(topic);
  } finally {
    c.close();
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A deterministic random source (mulberry32), so that URL choices and jitter repeat from run to run. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Counts of each value: a test asserts every count is 1. */
export function counts<T>(values: readonly T[]): Map<T, number> {
  const m = new Map<T, number>();
  for (const v of values) m.set(v, (m.get(v) ?? 0) + 1);
  return m;
}

/** The plain `ws` export, typed as the SDK's option: this assignment is the check that `ws` fits. */
export const NodeWebSocket: WebSocketConstructor = WebSocket;
