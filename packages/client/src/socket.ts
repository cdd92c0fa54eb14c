/**
 * The part of the WebSocket API the SDK uses: the standard surface that the
 * browser's global `WebSocket` and Node's `ws` both offer. Nothing else is
 * assumed, except one optional extra: an `on('unexpected-response')` event
 * (`ws` has it) that lets the SDK read the status and `Retry-After` of a
 * refused upgrade, which a browser never shows.
 */

export interface WebSocketLike {
  readonly readyState: number;
  readonly protocol: string;
  // Handlers are typed loosely (`never`) so that both the DOM's and `ws`'s
  // own event types fit; the SDK reads only the fields of the *Like types below.
  onopen: ((ev: never) => unknown) | null;
  onmessage: ((ev: never) => unknown) | null;
  onclose: ((ev: never) => unknown) | null;
  onerror: ((ev: never) => unknown) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** `new WebSocket(url, protocols)`: the browser's global, `ws`, or a wrapper of either. */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

export interface MessageEventLike {
  readonly data: unknown;
}

export interface CloseEventLike {
  readonly code: number;
  readonly reason: string;
}

/** The HTTP response of a refused upgrade, as `ws` hands it out (a Node IncomingMessage). */
export interface UpgradeResponseLike {
  readonly statusCode?: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  setEncoding?(encoding: string): unknown;
  on(event: 'data', listener: (chunk: unknown) => void): unknown;
  on(event: 'end' | 'error' | 'close', listener: () => void): unknown;
}

/** What `ws` adds: an EventEmitter with `unexpected-response`, and `terminate()`. */
export interface NodeStyleSocket {
  on(event: 'unexpected-response', listener: (req: unknown, res: UpgradeResponseLike) => void): unknown;
  terminate?(): void;
}

export const OPEN = 1;

export function hasNodeEvents(ws: WebSocketLike): ws is WebSocketLike & NodeStyleSocket {
  return typeof (ws as { on?: unknown }).on === 'function';
}
