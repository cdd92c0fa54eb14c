/**
 * A WebSocket client on `ws` for tests: it queues every frame the gateway
 * sends and waits for the ones a test expects.
 */
import { request as httpRequest } from 'node:http';
import { decodeServerFrameObject, type ServerFrame, type WelcomeFrame } from '@sluice/protocol';
import WebSocket from 'ws';

/**
 * A server frame as the gateway wrote it, after `decodeServerFrameObject`
 * accepted it: typed by `type`, and with every field it had on the wire, so
 * that a test asserting a frame's exact fields still sees one the decoder
 * would drop. What does not decode is queued as `<undecodable>` with its
 * text, a binary message as `<binary>`.
 */
export type Frame = (ServerFrame | { readonly type: '<binary>' } | { readonly type: '<undecodable>'; readonly text: string; readonly message: string })
  & Record<string, unknown>;

/** Reads one server text frame (see Frame). */
export function readServerFrame(text: string): Frame {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { type: '<undecodable>', text, message: 'frame is not valid JSON' };
  }
  const d = decodeServerFrameObject(raw);
  return d.ok ? (raw as Frame) : { type: '<undecodable>', text, message: d.message };
}

/** Waits of a socket for what its events change: `until` re-checks on every `wake()`. */
export class Wakeups {
  private waiters: (() => void)[] = [];

  /** Resolves once `cond()` holds; rejects after `ms` with `timeout` (called then, so it may print the latest state). */
  async until(cond: () => boolean, ms: number, timeout: () => string): Promise<void> {
    const deadline = Date.now() + ms;
    while (!cond()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(timeout());
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}

/** A WebSocket client that queues every frame it gets and waits for the ones a test expects. */
export class Client {
  readonly frames: Frame[] = [];
  private readonly wakeups = new Wakeups();
  closed: { code: number; reason: string } | undefined;
  welcome!: WelcomeFrame & Record<string, unknown>;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data, isBinary) => {
      this.frames.push(isBinary ? { type: '<binary>' } : readServerFrame(data.toString()));
      this.wakeups.wake();
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      this.wakeups.wake();
    });
  }

  static async connect(url: string, opts: { protocols?: string[]; headers?: Record<string, string>; localAddress?: string } = {}): Promise<Client> {
    const ws = new WebSocket(url, opts.protocols ?? ['sluice.v1'], { headers: opts.headers, localAddress: opts.localAddress });
    const c = new Client(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    c.welcome = (await c.next((f) => f.type === 'welcome')) as Client['welcome'];
    return c;
  }

  /** The shard this socket landed on (connection ids are node.shard.generation.seq). */
  get shard(): number {
    return Number(this.welcome.connectionId.split('.')[1]);
  }

  send(frame: unknown): void {
    this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

  /** Sends a frame with a ref and resolves with the reply (or error) that answers it. */
  async request(frame: Record<string, unknown>, ms?: number): Promise<Frame> {
    const ref = (frame.ref as string | undefined) ?? `r${Math.random().toString(36).slice(2)}`;
    this.send({ ...frame, ref });
    return this.next((f) => (f.type === 'reply' || f.type === 'pong') && f.ref === ref, ms);
  }

  /**
   * Removes and returns the first queued frame matching `pred`, waiting up
   * to `ms`. The frame is found and taken in one synchronous step: `until`
   * resumes its caller a microtask after its check, and another waiter of
   * this socket may take a frame in between, which would shift an index
   * found earlier (many requests in flight on one socket do that).
   */
  async next(pred: (f: Frame) => boolean = () => true, ms = 5000): Promise<Frame> {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = this.frames.findIndex(pred);
      if (i >= 0) return this.frames.splice(i, 1)[0]!;
      if (this.closed !== undefined) throw new Error(`socket closed (${this.closed.code} ${this.closed.reason}) while waiting`);
      await this.wakeups.until(() => this.frames.some(pred) || this.closed !== undefined, deadline - Date.now(),
        () => `timed out waiting for a frame; queued: ${JSON.stringify(this.frames).slice(0, 500)}`);
    }
  }

  /** Waits until the server closes the socket. */
  async closedBy(ms = 5000): Promise<{ code: number; reason: string }> {
    await this.wakeups.until(() => this.closed !== undefined, ms, () => 'socket not closed in time');
    return this.closed!;
  }

  /** Events received on a topic, in order, taken off the queue. */
  takeEvents(topic: string): Frame[] {
    const out: Frame[] = [];
    for (let i = 0; i < this.frames.length; ) {
      const f = this.frames[i]!;
      if (f.type === 'event' && f.topic === topic) {
        out.push(f);
        this.frames.splice(i, 1);
      } else i++;
    }
    return out;
  }

  close(): void {
    this.ws.close();
  }
}

/** Waits until `check` is true, polling; for state that settles asynchronously (counters, gauges). */
export async function eventually(check: () => Promise<boolean> | boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface RawResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/**
 * An upgrade request by hand (fetch refuses the upgrade header). Resolves
 * with the plain-HTTP refusal; rejects when the server upgrades instead
 * (`upgraded although refused`), or on a socket error or `timeoutMs`.
 * `headers` are added to (or, set to null, removed from) a valid handshake.
 */
export function rawUpgrade(port: number, opts: { path?: string; headers?: Record<string, string | null>; timeoutMs?: number } = {}): Promise<RawResponse> {
  const headers: Record<string, string> = {
    upgrade: 'websocket', connection: 'Upgrade', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'sec-websocket-version': '13',
  };
  for (const [k, v] of Object.entries(opts.headers ?? {})) {
    if (v === null) delete headers[k];
    else headers[k] = v;
  }
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: opts.path ?? '/ws', headers, timeout: opts.timeoutMs });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      reject(new Error('upgraded although refused'));
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers as Record<string, string>, body }));
    });
    req.on('error', reject);
    req.end();
  });
}
