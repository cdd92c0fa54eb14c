/**
 * The page's script in the browser test: bundled with the SDK by esbuild
 * (platform browser) and loaded by a page in headless Chromium. It uses the
 * browser's own WebSocket (the SDK's default, `globalThis.WebSocket`) and
 * hands what happened back to Node: each SDK event as it comes, through the
 * function the test exposes (`sluiceReport`), and a summary as the value of
 * `run()`, which the test calls with page.evaluate.
 *
 * Nothing here may need Node: the bundle is built for the browser, where a
 * `node:` import fails the build. It is typechecked without the DOM library,
 * so the few browser globals it touches are typed by hand below.
 */
import { SluiceClient, SluiceError, type SluiceEvent, type WebSocketConstructor, type WebSocketLike } from '../../src/index.ts';

export interface RunConfig {
  readonly url: string | readonly string[];
  /** A JWT for the `token` callback (travels as the `bearer.` subprotocol). */
  readonly token?: string;
  readonly topic: string;
  /** A topic the token may not publish to: the publish must be refused with `forbidden`. */
  readonly forbiddenTopic?: string;
  /** Wraps the global WebSocket to record what each socket was opened with and what it negotiated. */
  readonly record?: boolean;
  /** Expect no connection (a refused token): wait for this many `reconnecting` events, then close. */
  readonly expectRefusals?: number;
  readonly timeoutMs: number;
}

export interface SocketSeen {
  readonly url: string;
  readonly protocols: string[];
  /** The subprotocol the server selected, read once the socket opened ('' if it never did). */
  protocol: string;
  opened: boolean;
}

export interface RunResult {
  readonly userAgent: string;
  /** `globalThis.WebSocket` is the browser's own, not a polyfill. */
  readonly nativeWebSocket: boolean;
  readonly connected: { connectionId: string; url: string; heartbeatMs: number }[];
  readonly reconnecting: { attempt: number; code: number | undefined; status: number | undefined; reason: string | undefined }[];
  readonly errors: { code: string; message: string }[];
  readonly joined: { recovered: boolean | undefined } | undefined;
  readonly published: { durable: { id?: string }; keyed: { id?: string }; ephemeral: { id?: string } } | undefined;
  readonly received: { topic: string; id?: string; key?: string; data: unknown }[];
  readonly forbidden: { code: string } | undefined;
  readonly sockets: SocketSeen[];
  readonly stateAfterClose: string;
}

interface PageGlobals {
  WebSocket?: WebSocketConstructor;
  navigator?: { userAgent: string };
  sluiceReport?: (type: string, detail: unknown) => Promise<void>;
  sluiceBrowser?: { run(cfg: RunConfig): Promise<RunResult> };
}

const g = globalThis as unknown as PageGlobals;

function report(type: string, detail: unknown): void {
  // Exposed by the test with page.exposeFunction; the page works without it.
  void g.sluiceReport?.(type, detail)?.catch(() => undefined);
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`in the page: timed out waiting for ${what}`);
    await sleep(10);
  }
}

async function run(cfg: RunConfig): Promise<RunResult> {
  const Native = g.WebSocket;
  if (Native === undefined) throw new Error('in the page: no global WebSocket');
  const sockets: SocketSeen[] = [];
  let Ctor: WebSocketConstructor | undefined;
  if (cfg.record === true) {
    // A subclass of the browser's WebSocket: the real socket, with its arguments noted.
    Ctor = class Recorded extends Native {
      constructor(url: string, protocols?: string | string[]) {
        super(url, protocols);
        const seen: SocketSeen = { url, protocols: typeof protocols === 'string' ? [protocols] : [...(protocols ?? [])], protocol: '', opened: false };
        sockets.push(seen);
        const self = this as unknown as WebSocketLike & { addEventListener(type: string, f: () => void): void };
        self.addEventListener('open', () => {
          seen.opened = true;
          seen.protocol = self.protocol;
        });
      }
    };
  }
  const token = cfg.token;
  const client = new SluiceClient({
    url: typeof cfg.url === 'string' ? cfg.url : [...cfg.url],
    ...(token === undefined ? {} : { token: () => token }),
    ...(Ctor === undefined ? {} : { WebSocket: Ctor }),
    backoff: { initialMs: 50, maxMs: 200 },
  });
  const connected: RunResult['connected'] = [];
  const reconnecting: RunResult['reconnecting'] = [];
  const errors: RunResult['errors'] = [];
  const received: RunResult['received'] = [];
  client.on('connected', (e) => {
    connected.push({ connectionId: e.connectionId, url: e.url, heartbeatMs: e.heartbeatMs });
    report('connected', { connectionId: e.connectionId, url: e.url });
  });
  client.on('reconnecting', (e) => {
    reconnecting.push({ attempt: e.attempt, code: e.code, status: e.status, reason: e.reason });
    report('reconnecting', { attempt: e.attempt, code: e.code, status: e.status ?? null, reason: e.reason ?? null });
  });
  client.on('disconnected', (e) => report('disconnected', { code: e.code, reason: e.reason ?? null, willReconnect: e.willReconnect }));
  client.on('error', (e) => {
    errors.push({ code: e.code, message: e.message });
    report('error', { code: e.code });
  });

  let joined: RunResult['joined'];
  let published: RunResult['published'];
  let forbidden: RunResult['forbidden'];
  try {
    if (cfg.expectRefusals !== undefined) {
      const n = cfg.expectRefusals;
      client.connect();
      await until(() => reconnecting.length >= n, cfg.timeoutMs, `${n} reconnecting events`);
    } else {
      const sub = client.subscribe(cfg.topic, (e: SluiceEvent) => {
        received.push({ topic: e.topic, data: e.data, ...(e.id === undefined ? {} : { id: e.id }), ...(e.key === undefined ? {} : { key: e.key }) });
        report('event', { topic: e.topic, id: e.id ?? null });
      });
      client.connect();
      joined = await sub.ready;
      const durable = await client.publish(cfg.topic, { from: 'browser', n: 1, text: 'grüße ✓' });
      const keyed = await client.publish(cfg.topic, { from: 'browser', n: 2 }, { key: 'k1' });
      const ephemeral = await client.publish(cfg.topic, { from: 'browser', n: 3 }, { ephemeral: true });
      published = { durable, keyed, ephemeral };
      await until(() => received.length >= 3, cfg.timeoutMs, 'the page\'s own three events');
      if (cfg.forbiddenTopic !== undefined) {
        try {
          await client.publish(cfg.forbiddenTopic, { from: 'browser' });
          forbidden = { code: 'published (not refused)' };
        } catch (err) {
          forbidden = { code: err instanceof SluiceError ? err.code : `not a SluiceError: ${String(err)}` };
        }
      }
    }
  } finally {
    await client.close();
  }
  return {
    userAgent: g.navigator?.userAgent ?? '',
    nativeWebSocket: /\[native code\]/.test(Function.prototype.toString.call(Native)),
    connected, reconnecting, errors, joined, published, received, forbidden, sockets,
    stateAfterClose: client.state,
  };
}

g.sluiceBrowser = { run };
