/**
 * A minimal WebSocket client over node:net, for tests that must send what a
 * real client library refuses to: hand-written handshakes and hand-built
 * frames (reserved opcodes, RSV bits, unmasked frames, broken fragmentation,
 * oversize control frames). It parses what the server sends back strictly,
 * so a malformed server frame fails the test too.
 */
import { connect, type Socket } from 'node:net';
import {
  FrameSplitter, Op, Wakeups, acceptFor, encodeFrame, readServerFrame, upgradeRequest, type Frame, type FrameSpec, type HandshakeOptions,
} from '../src/testing/index.ts';

export { Op, acceptFor, closePayload, encodeFrame, upgradeRequest, type FrameSpec, type HandshakeOptions } from '../src/testing/index.ts';

export interface ServerFrame {
  readonly fin: boolean;
  readonly rsv: number;
  readonly opcode: number;
  readonly payload: Buffer;
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
  private readonly splitter = new FrameSplitter((opcode, fin, buf, start, end, rsv) => this.onFrame({ fin, rsv, opcode, payload: buf.subarray(start, end) }), 64 * 1024 * 1024);
  private readonly wakeups = new Wakeups();
  /** Bytes the server sent before (and including) the end of its HTTP response head. */
  httpHead = '';

  constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      if (this.upgraded) this.push(chunk);
      else {
        this.buf = Buffer.concat([this.buf, chunk]);
        this.parse();
      }
      this.wakeups.wake();
    });
    // An error (ECONNRESET, EPIPE) is followed by 'close'; both end the connection.
    socket.on('error', () => {});
    socket.on('close', () => {
      this.ended = true;
      this.endedAt = Date.now();
      this.wakeups.wake();
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
    return this.upgraded ? this.splitter.remainder() : this.buf;
  }

  /**
   * The server's text frames, read as the kit's Client reads them (checked by
   * the protocol's decoder, with their wire fields); throws on one that does
   * not decode. `frames` keeps the raw payloads.
   */
  json(): Frame[] {
    return this.frames.filter((f) => f.opcode === Op.Text).map((f) => {
      const frame = readServerFrame(f.payload.toString());
      if (frame.type === '<undecodable>') throw new Error(`server text frame does not decode (${String(frame.message)}): ${String(frame.text).slice(0, 300)}`);
      return frame;
    });
  }

  /** The close frame the server sent, if any: its code (undefined for an empty body) and reason. */
  get closeFrame(): { code: number | undefined; reason: string } | undefined {
    const f = this.frames.find((x) => x.opcode === Op.Close);
    if (f === undefined) return undefined;
    return { code: f.payload.length >= 2 ? f.payload.readUInt16BE(0) : undefined, reason: f.payload.subarray(2).toString() };
  }

  /** Resolves once `cond()` holds; rejects after `ms`. Re-checked on every byte received and on close. */
  until(cond: () => boolean, ms: number): Promise<void> {
    return this.wakeups.until(cond, ms, () => 'raw socket: condition not met in time');
  }

  /** Waits for a server JSON text frame matching `pred`; rejects if the connection ends first. */
  async nextJson(pred: (f: Frame) => boolean, ms = 5000): Promise<Frame> {
    let found: Frame | undefined;
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

  private parse(): void {
    if (!this.upgraded) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      this.httpHead = this.buf.subarray(0, end + 4).toString('latin1');
      if (!this.httpHead.startsWith('HTTP/1.1 101')) return; // a refusal: the body stays in buf
      this.upgraded = true;
      const rest = this.buf.subarray(end + 4);
      this.buf = Buffer.alloc(0);
      this.push(rest);
    }
  }

  private push(bytes: Buffer): void {
    if (this.protocolError !== undefined) return;
    try {
      this.splitter.push(bytes);
    } catch (err) {
      this.protocolError = (err as Error).message;
    }
  }

  private onFrame(frame: ServerFrame): void {
    if (this.protocolError !== undefined) return;
    if (frame.rsv !== 0 || ![Op.Text, Op.Binary, Op.Close, Op.Ping, Op.Pong].includes(frame.opcode as 1) || !frame.fin) {
      this.protocolError = `unexpected server frame: fin ${frame.fin} rsv ${frame.rsv} opcode ${frame.opcode}`;
      return;
    }
    this.frames.push(frame);
  }
}
