/**
 * A minimal WebSocket client over node:net, for tests that must send what a
 * real client library refuses to: hand-written handshakes and hand-built
 * frames (reserved opcodes, RSV bits, unmasked frames, broken fragmentation,
 * oversize control frames). It parses what the server sends back strictly,
 * so a malformed server frame fails the test too.
 */
import { createHash, randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

export const Op = { Continuation: 0, Text: 1, Binary: 2, Close: 8, Ping: 9, Pong: 10 } as const;

export interface FrameSpec {
  /** 0..15; 3-7 and 11-15 are reserved. */
  readonly opcode: number;
  readonly payload?: Buffer | string;
  /** Default true. */
  readonly fin?: boolean;
  /** The RSV1..RSV3 bits, 0..7. Default 0. */
  readonly rsv?: number;
  /** Clients must mask; default true. */
  readonly mask?: boolean;
  /** Encode the length in a longer form than needed (legal but unusual). */
  readonly lengthForm?: 7 | 16 | 64;
}

/** Builds one frame as a client would put it on the wire. */
export function encodeFrame(spec: FrameSpec): Buffer {
  const payload = typeof spec.payload === 'string' ? Buffer.from(spec.payload) : (spec.payload ?? Buffer.alloc(0));
  const len = payload.length;
  const form = spec.lengthForm ?? (len < 126 ? 7 : len < 0x10000 ? 16 : 64);
  const mask = spec.mask ?? true;
  const head: number[] = [((spec.fin ?? true) ? 0x80 : 0) | ((spec.rsv ?? 0) & 7) << 4 | (spec.opcode & 0x0f)];
  const m = mask ? 0x80 : 0;
  if (form === 7) {
    if (len > 125) throw new Error('length does not fit the 7-bit form');
    head.push(m | len);
  } else if (form === 16) {
    if (len > 0xffff) throw new Error('length does not fit the 16-bit form');
    head.push(m | 126, len >> 8, len & 0xff);
  } else {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(len));
    head.push(m | 127, ...b);
  }
  if (!mask) return Buffer.concat([Buffer.from(head), payload]);
  const key = randomBytes(4);
  const out = Buffer.alloc(len);
  for (let i = 0; i < len; i++) out[i] = payload[i]! ^ key[i & 3]!;
  return Buffer.concat([Buffer.from(head), key, out]);
}

export function closePayload(code: number, reason = ''): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(code);
  return Buffer.concat([b, Buffer.from(reason)]);
}

export interface ServerFrame {
  readonly fin: boolean;
  readonly rsv: number;
  readonly opcode: number;
  readonly payload: Buffer;
}

export interface HandshakeOptions {
  readonly path?: string;
  readonly protocols?: string[];
  readonly headers?: Record<string, string>;
  /** The Connection header's value; default `Upgrade`. */
  readonly connection?: string;
}

/** A well-formed upgrade request for `port`, with a fresh key. */
export function upgradeRequest(port: number, opts: HandshakeOptions = {}): { request: string; key: string } {
  const key = randomBytes(16).toString('base64');
  const lines = [
    `GET ${opts.path ?? '/ws'} HTTP/1.1`,
    `Host: 127.0.0.1:${port}`,
    'Upgrade: websocket',
    `Connection: ${opts.connection ?? 'Upgrade'}`,
    `Sec-WebSocket-Key: ${key}`,
    'Sec-WebSocket-Version: 13',
  ];
  const protocols = opts.protocols ?? ['sluice.v1'];
  if (protocols.length > 0) lines.push(`Sec-WebSocket-Protocol: ${protocols.join(', ')}`);
  for (const [k, v] of Object.entries(opts.headers ?? {})) lines.push(`${k}: ${v}`);
  return { request: lines.join('\r\n') + '\r\n\r\n', key };
}

export function acceptFor(key: string): string {
  return createHash('sha1').update(key + WS_GUID).digest('base64');
}

/**
 * One raw TCP connection. Until the handshake is done it collects bytes; after
 * it, it parses server frames into `frames`. `ended` is set when the TCP
 * connection is gone (FIN, RST or our own destroy).
 */
export class RawWs {
  readonly frames: ServerFrame[] = [];
  /** Set when the server sent bytes that are not a valid server frame. */
  protocolError: string | undefined;
  ended = false;
  /** When the TCP connection was established, `Date.now()`. */
  readonly openedAt = Date.now();
  /** When the TCP connection ended, `Date.now()`. */
  endedAt = 0;
  private buf = Buffer.alloc(0);
  private upgraded = false;
  private waiters: (() => void)[] = [];
  /** Bytes the server sent before (and including) the end of its HTTP response head. */
  httpHead = '';

  constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buf = Buffer.concat([this.buf, chunk]);
      this.parse();
      this.wake();
    });
    // An error (ECONNRESET, EPIPE) is followed by 'close'; both end the connection.
    socket.on('error', () => {});
    socket.on('close', () => {
      this.ended = true;
      this.endedAt = Date.now();
      this.wake();
    });
  }

  /** Opens a TCP connection (no bytes sent). */
  static open(port: number, host = '127.0.0.1'): Promise<RawWs> {
    return new Promise((resolve, reject) => {
      const s = connect({ port, host });
      s.setNoDelay(true);
      s.once('connect', () => {
        s.off('error', reject);
        resolve(new RawWs(s));
      });
      s.once('error', reject);
    });
  }

  /** Opens a connection and does the upgrade by hand; resolves once the 101 is checked. */
  static async connect(port: number, opts: HandshakeOptions = {}, ms = 5000): Promise<RawWs> {
    const c = await RawWs.open(port);
    const { request, key } = upgradeRequest(port, opts);
    c.write(request);
    await c.until(() => c.upgraded || c.ended, ms);
    if (!c.upgraded) {
      c.destroy();
      throw new Error(`no upgrade: ${JSON.stringify(c.httpHead || c.buf.toString('latin1').slice(0, 300))}`);
    }
    const status = c.httpHead.split('\r\n')[0]!;
    const accept = /^sec-websocket-accept:\s*(\S+)\s*$/im.exec(c.httpHead)?.[1];
    if (!status.startsWith('HTTP/1.1 101') || accept !== acceptFor(key)) {
      c.destroy();
      throw new Error(`bad upgrade response: ${JSON.stringify(c.httpHead)}`);
    }
    return c;
  }

  write(bytes: Buffer | string): void {
    if (!this.ended && !this.socket.destroyed) this.socket.write(bytes);
  }

  send(spec: FrameSpec): void {
    this.write(encodeFrame(spec));
  }

  sendText(text: string): void {
    this.send({ opcode: Op.Text, payload: text });
  }

  /** Everything the server sent that is not a parsed frame (the HTTP answer of a refused handshake). */
  get rawBytes(): Buffer {
    return this.buf;
  }

  /** The server's text frames parsed as JSON (the gateway only sends JSON text). */
  json(): Record<string, unknown>[] {
    return this.frames.filter((f) => f.opcode === Op.Text).map((f) => JSON.parse(f.payload.toString()) as Record<string, unknown>);
  }

  /** The close frame the server sent, if any: its code (undefined for an empty body) and reason. */
  get closeFrame(): { code: number | undefined; reason: string } | undefined {
    const f = this.frames.find((x) => x.opcode === Op.Close);
    if (f === undefined) return undefined;
    return { code: f.payload.length >= 2 ? f.payload.readUInt16BE(0) : undefined, reason: f.payload.subarray(2).toString() };
  }

  /** Resolves once `cond()` holds; rejects after `ms`. Re-checked on every byte received and on close. */
  async until(cond: () => boolean, ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    while (!cond()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('raw socket: condition not met in time');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Waits for a server JSON text frame matching `pred`; rejects if the connection ends first. */
  async nextJson(pred: (f: Record<string, unknown>) => boolean, ms = 5000): Promise<Record<string, unknown>> {
    let found: Record<string, unknown> | undefined;
    await this.until(() => {
      found = this.json().find(pred);
      return found !== undefined || this.ended;
    }, ms);
    if (found === undefined) throw new Error(`raw socket ended while waiting (close frame ${JSON.stringify(this.closeFrame)})`);
    return found;
  }

  destroy(): void {
    this.socket.destroy();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private parse(): void {
    if (!this.upgraded) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      this.httpHead = this.buf.subarray(0, end + 4).toString('latin1');
      if (!this.httpHead.startsWith('HTTP/1.1 101')) return; // a refusal: the body stays in buf
      this.upgraded = true;
      this.buf = this.buf.subarray(end + 4);
    }
    for (;;) {
      if (this.protocolError !== undefined || this.buf.length < 2) return;
      const b0 = this.buf[0]!;
      const b1 = this.buf[1]!;
      if (b1 & 0x80) {
        this.protocolError = 'server frame is masked';
        return;
      }
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        const big = this.buf.readBigUInt64BE(2);
        if (big > BigInt(64 * 1024 * 1024)) {
          this.protocolError = `server frame of ${big} bytes`;
          return;
        }
        len = Number(big);
        off = 10;
      }
      if (this.buf.length < off + len) return;
      const frame: ServerFrame = { fin: (b0 & 0x80) !== 0, rsv: (b0 >> 4) & 7, opcode: b0 & 0x0f, payload: this.buf.subarray(off, off + len) };
      this.buf = this.buf.subarray(off + len);
      if (frame.rsv !== 0 || ![Op.Text, Op.Binary, Op.Close, Op.Ping, Op.Pong].includes(frame.opcode as 1) || !frame.fin) {
        this.protocolError = `unexpected server frame: fin ${frame.fin} rsv ${frame.rsv} opcode ${frame.opcode}`;
        return;
      }
      this.frames.push(frame);
    }
  }
}
