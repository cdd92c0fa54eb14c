// The two client protocols the load generator speaks, as pre-built frames and
// byte-level classifiers. "sluice" is the Sluice wire protocol (PROTOCOL.md),
// which the uWS and ws peers speak too; "sio" is Socket.IO v4 (Engine.IO v4
// packets over a WebSocket transport).
//
// Payload layout (`data` of a publish, exactly `size` bytes of JSON):
//   {"t":T,"p":"xxx"}          T: 15-digit send time (see clock.ts)
//   {"t":T,"s":S,"p":"xxx"}    S: 10-digit sequence (fan-out flow control)
// The publish `ref` (Socket.IO: the ack id) carries T as well, so a reply
// gives its round-trip time without any client-side bookkeeping.

import { encodeFrame, Op } from '@sluice/gateway/testing';
import { decodeServerFrame } from '@sluice/protocol';

export type Proto = 'sluice' | 'sio';

/** A masked client frame (built by the kit's codec) plus where its payload starts, for patching. */
export interface ClientFrame {
  readonly bytes: Buffer;
  readonly payloadOffset: number;
  readonly mask: Buffer;
}

/**
 * Frames are built once with a fixed non-zero mask key (so that servers do the
 * real unmasking work), and only fixed-width digit fields are patched before
 * each send.
 */
export const DEFAULT_MASK = Buffer.from([0x37, 0xfa, 0x21, 0x3d]);

export function encodeClientFrame(payload: Buffer | string, opcode: number = Op.Text): ClientFrame {
  const bytes = encodeFrame({ opcode, payload, maskKey: DEFAULT_MASK });
  return { bytes, payloadOffset: bytes.length - Buffer.byteLength(payload), mask: DEFAULT_MASK };
}

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



export const T_WIDTH = 15;
export const T_BASE = 1e14; // T = T_BASE + microseconds: always 15 digits, never a leading zero
export const S_WIDTH = 10;
export const S_BASE = 1e9;

export const Kind = {
  Other: 0,
  ReplyOk: 1,
  ReplyErr: 2,
  Event: 3,
  Welcome: 4,
  Ping: 5, // Engine.IO ping, must be answered with "3"
  Open: 6, // Engine.IO open packet
  Error: 7,
  Presence: 8, // presence_state, presence_diff (S14)
} as const;
export type Kind = (typeof Kind)[keyof typeof Kind];

export interface PublishTemplate {
  readonly frame: ClientFrame;
  /** Payload positions of the digit fields; -1 when absent. */
  readonly refPos: number;
  readonly tPos: number;
  readonly sPos: number;
}

export function paths(proto: Proto): string {
  return proto === 'sluice' ? '/ws' : '/socket.io/?EIO=4&transport=websocket';
}

/** JSON text of the `data` object, exactly `size` bytes. */
export function dataJson(size: number, withSeq: boolean): { json: string; tPos: number; sPos: number } {
  const head = `{"t":${'1'.repeat(T_WIDTH)}` + (withSeq ? `,"s":${'1'.repeat(S_WIDTH)}` : '') + ',"p":"';
  const tail = '"}';
  const pad = size - head.length - tail.length;
  if (pad < 0) throw new Error(`payload of ${size} B is below the minimum of ${head.length + tail.length} B`);
  return { json: head + 'x'.repeat(pad) + tail, tPos: 5, sPos: withSeq ? 5 + T_WIDTH + 5 : -1 };
}

export function publishTemplate(proto: Proto, topic: string, size: number, withSeq: boolean, ephemeral: boolean): PublishTemplate {
  const d = dataJson(size, withSeq);
  const ref = '1'.repeat(T_WIDTH);
  let text: string;
  let refPos: number;
  let dataPos: number;
  if (proto === 'sluice') {
    const a = `{"type":"publish","ref":"`;
    const b = `${ref}","topic":${JSON.stringify(topic)},"data":`;
    text = a + b + d.json + (ephemeral ? ',"ephemeral":true}' : '}');
    refPos = a.length;
    dataPos = a.length + b.length;
  } else {
    const a = '42';
    const b = `${ref}["publish",{"topic":${JSON.stringify(topic)}${ephemeral ? ',"ephemeral":true' : ''},"data":`;
    text = a + b + d.json + '}]';
    refPos = a.length;
    dataPos = a.length + b.length;
  }
  return {
    frame: encodeClientFrame(text),
    refPos,
    tPos: dataPos + d.tPos,
    sPos: d.sPos < 0 ? -1 : dataPos + d.sPos,
  };
}

export function joinFrame(proto: Proto, topic: string): Buffer {
  const text = proto === 'sluice'
    ? `{"type":"join","ref":"j","topic":${JSON.stringify(topic)}}`
    : `421["join",{"topic":${JSON.stringify(topic)}}]`;
  return encodeClientFrame(text).bytes;
}

export const SIO_CONNECT = encodeClientFrame('40').bytes;
export const SIO_PONG = encodeClientFrame('3').bytes;

const TYPE_PREFIX = Buffer.from('{"type":"');
const STATUS_OK = Buffer.from('"status":"ok"');
const REF_KEY = Buffer.from('"ref":"');
const T_KEY = Buffer.from('{"t":');
const SIO_EVENT = Buffer.from('["event"');

const C_0 = 48, C_2 = 50, C_3 = 51, C_4 = 52, C_r = 114, C_e = 101, C_v = 118, C_w = 119, C_p = 112;

/** Classifies a server text frame by its first bytes (and, for replies, the status field). */
export function classify(proto: Proto, buf: Buffer, s: number, e: number): Kind {
  if (proto === 'sluice') {
    if (e - s > 10 && bytesAt(buf, s, TYPE_PREFIX)) {
      const c = buf[s + 9];
      if (c === C_r) return indexWithin(buf, STATUS_OK, s, e) === -1 ? Kind.ReplyErr : Kind.ReplyOk;
      if (c === C_e) return buf[s + 10] === C_v ? Kind.Event : Kind.Error;
      if (c === C_w) return Kind.Welcome;
      if (c === C_p && buf[s + 10] === C_r) return Kind.Presence;
      return Kind.Other;
    }
    return classifySlow(buf.toString('utf8', s, e));
  }
  const len = e - s;
  if (len === 0) return Kind.Other;
  const c0 = buf[s];
  if (c0 === C_2 && len === 1) return Kind.Ping;
  if (c0 === C_0) return Kind.Open;
  if (c0 !== C_4 || len < 2) return Kind.Other;
  const c1 = buf[s + 1];
  if (c1 === C_3) return Kind.ReplyOk; // Socket.IO acks carry no status: the peer acks only on success
  if (c1 === C_2) return bytesAt(buf, s + 2, SIO_EVENT) ? Kind.Event : Kind.Other;
  if (c1 === C_0) return Kind.Welcome; // namespace connect ack
  if (c1 === C_4) return Kind.Error; // namespace connect error
  return Kind.Other;
}

/** For frames whose key order is not the expected one (off the hot path): decode properly; what does not decode is Other. */
function classifySlow(text: string): Kind {
  const d = decodeServerFrame(text);
  if (!d.ok) return Kind.Other;
  switch (d.frame.type) {
    case 'reply': return d.frame.status === 'ok' ? Kind.ReplyOk : Kind.ReplyErr;
    case 'event': return Kind.Event;
    case 'welcome': return Kind.Welcome;
    case 'error': return Kind.Error;
    case 'presence_state': case 'presence_diff': return Kind.Presence;
    default: return Kind.Other;
  }
}

/** The digits of a reply's ref (Socket.IO: ack id); -1 when it has none. */
export function replyRef(proto: Proto, buf: Buffer, s: number, e: number): number {
  if (proto === 'sio') return readDigits(buf, s + 2, e);
  const i = indexWithin(buf, REF_KEY, s, e);
  return i === -1 ? -1 : readDigits(buf, i + REF_KEY.length, e);
}

/** Position of the `data` object's T digits in an event frame; -1 when absent. */
export function eventDataPos(buf: Buffer, s: number, e: number): number {
  const i = indexWithin(buf, T_KEY, s, e);
  return i === -1 ? -1 : i + T_KEY.length;
}

/** Reads T and S of an event's data at `pos` (from eventDataPos). */
export function eventT(buf: Buffer, pos: number, e: number): number {
  return readDigits(buf, pos, Math.min(e, pos + T_WIDTH));
}
export function eventS(buf: Buffer, pos: number, e: number): number {
  const sp = pos + T_WIDTH + 5;
  return readDigits(buf, sp, Math.min(e, sp + S_WIDTH));
}

/** The first character of a Sluice reply's ref (S14 tells joins `j`, leaves `l` and presence asks `q` apart); '' when it has none. */
export function replyRefChar(buf: Buffer, s: number, e: number): string {
  const i = indexWithin(buf, REF_KEY, s, e);
  return i === -1 || i + REF_KEY.length >= e ? '' : String.fromCharCode(buf[i + REF_KEY.length]!);
}

/** A Sluice `leave` frame (ref `l`). */
export function leaveFrame(topic: string): Buffer {
  return encodeClientFrame(`{"type":"leave","ref":"l","topic":${JSON.stringify(topic)}}`).bytes;
}
