/**
 * The client side of RFC 6455 framing, one codec for the raw-socket tests
 * (hand-built frames: reserved opcodes, RSV bits, unmasked frames, broken
 * fragmentation, oversize control frames, close frames) and the benchmark's
 * load generator (frames built once, split by their headers alone).
 */
import { createHash, randomBytes } from 'node:crypto';

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
  /** The 4-byte masking key; a fresh random one unless given. */
  readonly maskKey?: Buffer;
  /** Encode the length in a longer form than needed (legal but unusual). */
  readonly lengthForm?: 7 | 16 | 64;
}

/** Builds one frame as a client would put it on the wire; the payload is its last `payload.length` bytes. */
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
  const key = spec.maskKey ?? randomBytes(4);
  if (key.length !== 4) throw new Error('mask key must be 4 bytes');
  const out = Buffer.alloc(len);
  for (let i = 0; i < len; i++) out[i] = payload[i]! ^ key[i & 3]!;
  return Buffer.concat([Buffer.from(head), key, out]);
}

/** The body of a close frame: the code, then the reason. */
export function closePayload(code: number, reason = ''): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(code);
  return Buffer.concat([b, Buffer.from(reason)]);
}

/** Called once per complete frame; the payload is buf[start, end). */
export type FrameHandler = (opcode: number, fin: boolean, buf: Buffer, start: number, end: number, rsv: number) => void;

/**
 * Splits a byte stream of server frames. Only headers are decoded; a frame
 * cut by a chunk boundary is kept (with what follows) until it is whole.
 * Throws on a masked server frame or a frame above `maxFrame`.
 */
export class FrameSplitter {
  private rest: Buffer | null = null;

  constructor(private readonly onFrame: FrameHandler, private readonly maxFrame = 16 * 1024 * 1024) {}

  /** Bytes of a frame not yet whole. */
  get buffered(): number {
    return this.rest === null ? 0 : this.rest.length;
  }

  /** Those bytes. */
  remainder(): Buffer {
    return this.rest ?? Buffer.alloc(0);
  }

  push(chunk: Buffer): void {
    let buf = chunk;
    if (this.rest !== null) {
      buf = Buffer.concat([this.rest, chunk]);
      this.rest = null;
    }
    const n = buf.length;
    let off = 0;
    while (n - off >= 2) {
      const b0 = buf[off]!;
      const b1 = buf[off + 1]!;
      if (b1 & 0x80) throw new Error('server frame is masked');
      let len = b1 & 0x7f;
      let hdr = 2;
      if (len === 126) {
        if (n - off < 4) break;
        len = (buf[off + 2]! << 8) | buf[off + 3]!;
        hdr = 4;
      } else if (len === 127) {
        if (n - off < 10) break;
        len = buf.readUInt32BE(off + 2) * 2 ** 32 + buf.readUInt32BE(off + 6);
        hdr = 10;
      }
      if (len > this.maxFrame) throw new Error(`server frame of ${len} bytes`);
      if (n - off < hdr + len) break;
      this.onFrame(b0 & 0x0f, (b0 & 0x80) !== 0, buf, off + hdr, off + hdr + len, (b0 >> 4) & 7);
      off += hdr + len;
    }
    // Copy: the caller's chunk may be a slice of a pooled buffer.
    if (off < n) this.rest = Buffer.from(buf.subarray(off));
  }
}

/** Decodes the one frame at the start of `buf` (a whole frame), unmasking a masked one; for tests and checks. */
export function decodeFrame(buf: Buffer): { fin: boolean; rsv: number; opcode: number; masked: boolean; payload: Buffer } {
  const masked = (buf[1]! & 0x80) !== 0;
  let len = buf[1]! & 0x7f;
  let off = 2;
  if (len === 126) { len = buf.readUInt16BE(2); off = 4; } else if (len === 127) { len = Number(buf.readBigUInt64BE(2)); off = 10; }
  const key = masked ? buf.subarray(off, (off += 4)) : undefined;
  const payload = Buffer.from(buf.subarray(off, off + len));
  if (key !== undefined) for (let i = 0; i < len; i++) payload[i] = payload[i]! ^ key[i & 3]!;
  return { fin: (buf[0]! & 0x80) !== 0, rsv: (buf[0]! >> 4) & 7, opcode: buf[0]! & 0x0f, masked, payload };
}

export interface HandshakeOptions {
  readonly path?: string;
  /** Default `127.0.0.1`. */
  readonly host?: string;
  /** Default `['sluice.v1']`; none sends no Sec-WebSocket-Protocol. */
  readonly protocols?: readonly string[];
  readonly headers?: Readonly<Record<string, string>>;
  /** The Connection header's value; default `Upgrade`. */
  readonly connection?: string;
  /** Sec-WebSocket-Key; a fresh one unless given. */
  readonly key?: string;
}

/** A well-formed upgrade request for `port`. */
export function upgradeRequest(port: number, opts: HandshakeOptions = {}): { request: string; key: string } {
  const key = opts.key ?? randomBytes(16).toString('base64');
  const lines = [
    `GET ${opts.path ?? '/ws'} HTTP/1.1`,
    `Host: ${opts.host ?? '127.0.0.1'}:${port}`,
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

/** The Sec-WebSocket-Accept a server must answer `key` with. */
export function acceptFor(key: string): string {
  return createHash('sha1').update(key + WS_GUID).digest('base64');
}
