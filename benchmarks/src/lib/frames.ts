// WebSocket framing for the load generator: client frames are built once
// (masked, RFC 6455 section 5.3) and only fixed-width digit fields are patched
// before each send; server frames are split by their headers alone, and the
// caller looks at a few payload bytes at most.

export const OP_CONT = 0x0;
export const OP_TEXT = 0x1;
export const OP_BINARY = 0x2;
export const OP_CLOSE = 0x8;
export const OP_PING = 0x9;
export const OP_PONG = 0xa;

/** A masked client frame plus where its payload starts (for patching). */
export interface ClientFrame {
  readonly bytes: Buffer;
  readonly payloadOffset: number;
  readonly mask: Buffer;
}

/**
 * Builds one masked client frame. The mask key is any 4 bytes; the benchmark
 * uses a fixed non-zero key so that servers do the real unmasking work.
 */
export function encodeClientFrame(payload: Buffer | string, opcode = OP_TEXT, mask: Buffer = DEFAULT_MASK): ClientFrame {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  if (mask.length !== 4) throw new Error('mask key must be 4 bytes');
  const len = body.length;
  const ext = len < 126 ? 0 : len < 65536 ? 2 : 8;
  const hdr = 2 + ext + 4;
  const out = Buffer.allocUnsafe(hdr + len);
  out[0] = 0x80 | opcode;
  if (ext === 0) {
    out[1] = 0x80 | len;
  } else if (ext === 2) {
    out[1] = 0x80 | 126;
    out.writeUInt16BE(len, 2);
  } else {
    out[1] = 0x80 | 127;
    out.writeUInt32BE(Math.floor(len / 2 ** 32), 2);
    out.writeUInt32BE(len >>> 0, 6);
  }
  mask.copy(out, 2 + ext);
  for (let i = 0; i < len; i++) out[hdr + i] = body[i]! ^ mask[i & 3]!;
  return { bytes: out, payloadOffset: hdr, mask: Buffer.from(mask) };
}

export const DEFAULT_MASK = Buffer.from([0x37, 0xfa, 0x21, 0x3d]);

/**
 * Writes `value` as exactly `width` decimal digits at payload position `pos`
 * of a masked frame that starts at `frameStart` inside `buf`. The value must
 * have exactly `width` digits (templates add 10^(width-1) so JSON numbers
 * never get a leading zero).
 */
export function patchDigits(
  buf: Buffer, frameStart: number, frame: ClientFrame, pos: number, value: number, width: number,
): void {
  const mask = frame.mask;
  const base = frameStart + frame.payloadOffset;
  let v = value;
  for (let i = width - 1; i >= 0; i--) {
    const d = v % 10;
    v = (v - d) / 10;
    buf[base + pos + i] = (48 + d) ^ mask[(pos + i) & 3]!;
  }
}

/** Reads the plain (unmasked) payload of a client frame; for tests and checks. */
export function unmaskClientFrame(buf: Buffer): { opcode: number; payload: Buffer } {
  const opcode = buf[0]! & 0x0f;
  let len = buf[1]! & 0x7f;
  let off = 2;
  if (len === 126) { len = buf.readUInt16BE(2); off = 4; } else if (len === 127) { len = buf.readUInt32BE(2) * 2 ** 32 + buf.readUInt32BE(6); off = 10; }
  const mask = buf.subarray(off, off + 4);
  off += 4;
  const payload = Buffer.allocUnsafe(len);
  for (let i = 0; i < len; i++) payload[i] = buf[off + i]! ^ mask[i & 3]!;
  return { opcode, payload };
}

/** Builds an unmasked server frame; for tests and for peers that need none. */
export function encodeServerFrame(payload: Buffer | string, opcode = OP_TEXT): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const len = body.length;
  const ext = len < 126 ? 0 : len < 65536 ? 2 : 8;
  const out = Buffer.allocUnsafe(2 + ext + len);
  out[0] = 0x80 | opcode;
  if (ext === 0) out[1] = len;
  else if (ext === 2) { out[1] = 126; out.writeUInt16BE(len, 2); } else {
    out[1] = 127;
    out.writeUInt32BE(Math.floor(len / 2 ** 32), 2);
    out.writeUInt32BE(len >>> 0, 6);
  }
  body.copy(out, 2 + ext);
  return out;
}

/** Called once per complete frame; the payload is buf[start, end). */
export type FrameHandler = (opcode: number, fin: boolean, buf: Buffer, start: number, end: number) => void;

/**
 * Splits a byte stream of server frames. Only headers are decoded; a frame
 * cut by a chunk boundary is kept (with what follows) until it is whole.
 * Throws on a masked server frame or a frame above `maxFrame`.
 */
export class FrameSplitter {
  private rest: Buffer | null = null;

  constructor(private readonly onFrame: FrameHandler, private readonly maxFrame = 16 * 1024 * 1024) {}

  get buffered(): number {
    return this.rest === null ? 0 : this.rest.length;
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
      this.onFrame(b0 & 0x0f, (b0 & 0x80) !== 0, buf, off + hdr, off + hdr + len);
      off += hdr + len;
    }
    // Copy: the caller's chunk may be a slice of a pooled buffer.
    if (off < n) this.rest = Buffer.from(buf.subarray(off));
  }
}

/** Parses ASCII decimal digits at buf[pos...] up to the first non-digit; -1 when none. */
export function readDigits(buf: Buffer, pos: number, end: number): number {
  let v = 0;
  let i = pos;
  for (; i < end; i++) {
    const c = buf[i]! - 48;
    if (c < 0 || c > 9) break;
    v = v * 10 + c;
  }
  return i === pos ? -1 : v;
}

/** True when buf[pos, pos + needle.length) equals needle. */
export function bytesAt(buf: Buffer, pos: number, needle: Buffer): boolean {
  if (pos + needle.length > buf.length) return false;
  for (let i = 0; i < needle.length; i++) if (buf[pos + i] !== needle[i]) return false;
  return true;
}

/** Finds needle inside buf[start, end); -1 when absent. */
export function indexWithin(buf: Buffer, needle: Buffer, start: number, end: number): number {
  const i = buf.indexOf(needle, start);
  return i === -1 || i + needle.length > end ? -1 : i;
}

export function upgradeRequest(host: string, port: number, path: string): Buffer {
  return Buffer.from(
    `GET ${path} HTTP/1.1\r\nHost: ${host}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
  );
}
