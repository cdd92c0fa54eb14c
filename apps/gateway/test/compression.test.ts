// WS_COMPRESSION (issue 20): permessage-deflate offered only when it is on;
// events and presence_state go out deflated (RSV1 set), replies never; a
// compressed frame from the client is inflated and read like any other; one
// that inflates past the cap closes that socket and nothing else.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { constants, deflateRawSync, inflateRawSync } from 'node:zlib';
import WebSocket from 'ws';
import { type Gateway, runUntilExit, startGateway } from './harness.ts';

interface RawFrame {
  readonly fin: boolean;
  readonly rsv1: boolean;
  readonly opcode: number;
  readonly payload: Buffer;
}

/** A WebSocket client on a bare TCP socket, so that the test sees each frame's RSV1 bit and its bytes on the wire. */
class RawWs {
  private buf = Buffer.alloc(0);
  private readonly frames: RawFrame[] = [];
  private wake: (() => void) | null = null;
  closed = false;
  /** Bytes of frames received (headers included). */
  wireBytes = 0;

  private constructor(readonly socket: Socket, readonly res: IncomingMessage, head: Buffer) {
    socket.on('data', (c: Buffer) => this.feed(c));
    socket.on('close', () => { this.closed = true; this.wake?.(); });
    socket.on('error', () => undefined);
    if (head.length > 0) this.feed(head);
  }

  static open(port: number, offer: boolean): Promise<RawWs> {
    const headers: Record<string, string> = {
      upgrade: 'websocket', connection: 'Upgrade', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'sec-websocket-version': '13',
    };
    if (offer) headers['sec-websocket-extensions'] = 'permessage-deflate; client_max_window_bits';
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: '/ws', headers });
      req.on('upgrade', (res, socket, head) => resolve(new RawWs(socket, res, head)));
      req.on('response', (res) => reject(new Error(`refused: ${res.statusCode}`)));
      req.on('error', reject);
      req.end();
    });
  }

  private feed(c: Buffer): void {
    this.buf = Buffer.concat([this.buf, c]);
    for (;;) {
      if (this.buf.length < 2) break;
      const b0 = this.buf[0]!;
      let len = this.buf[1]! & 0x7f;
      let off = 2;
      if (len === 126) { if (this.buf.length < 4) break; len = this.buf.readUInt16BE(2); off = 4; }
      else if (len === 127) { if (this.buf.length < 10) break; len = Number(this.buf.readBigUInt64BE(2)); off = 10; }
      if (this.buf.length < off + len) break;
      this.frames.push({ fin: (b0 & 0x80) !== 0, rsv1: (b0 & 0x40) !== 0, opcode: b0 & 0x0f, payload: this.buf.subarray(off, off + len) });
      this.wireBytes += off + len;
      this.buf = this.buf.subarray(off + len);
    }
    this.wake?.();
  }

  /** The next frame; rejects when the socket closed before one came. */
  async next(timeoutMs = 5000): Promise<RawFrame> {
    const deadline = Date.now() + timeoutMs;
    while (this.frames.length === 0) {
      if (this.closed) throw new Error('closed');
      if (Date.now() > deadline) throw new Error('no frame in time');
      await new Promise<void>((r) => { this.wake = r; setTimeout(r, 50); });
      this.wake = null;
    }
    return this.frames.shift()!;
  }

  /** The next data frame's text, inflated when RSV1 says it is deflated (the first deflated message: no window to carry). */
  async nextText(): Promise<{ text: string; deflated: boolean; wire: number }> {
    const f = await this.next();
    const text = f.rsv1 ? inflateRawSync(Buffer.concat([f.payload, Buffer.from([0, 0, 0xff, 0xff])]), { finishFlush: constants.Z_SYNC_FLUSH }).toString() : f.payload.toString();
    return { text, deflated: f.rsv1, wire: f.payload.length };
  }

  /** A masked text frame (mask 0: XOR leaves the bytes as they are), deflated with RSV1 when asked. */
  send(text: string, deflate = false): void {
    let payload = Buffer.from(text);
    if (deflate) {
      // A sync-flushed raw stream ends in an empty block, 00 00 ff ff, which permessage-deflate leaves off.
      const d = deflateRawSync(payload, { finishFlush: constants.Z_SYNC_FLUSH });
      assert.equal(d.readUInt32BE(d.length - 4), 0xffff);
      payload = d.subarray(0, d.length - 4);
    }
    const len = payload.length;
    const head = len < 126 ? Buffer.from([0x81 | (deflate ? 0x40 : 0), 0x80 | len])
      : len < 65536 ? Buffer.from([0x81 | (deflate ? 0x40 : 0), 0x80 | 126, len >> 8, len & 0xff])
        : Buffer.concat([Buffer.from([0x81 | (deflate ? 0x40 : 0), 0x80 | 127]), (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(len)); return b; })()]);
    this.socket.write(Buffer.concat([head, Buffer.alloc(4), payload]));
  }

  close(): void {
    this.socket.destroy();
  }
}

/** Joins `topic` and reads frames up to the join's reply; returns that reply's frame. */
async function join(ws: RawWs, topic: string, ref: string, deflate = false): Promise<{ text: string; deflated: boolean }> {
  ws.send(JSON.stringify({ type: 'join', topic, ref }), deflate);
  for (;;) {
    const f = await ws.nextText();
    if (f.text.includes(`"ref":"${ref}"`)) return f;
  }
}

const BIG = 'the quick brown fox jumps over the lazy dog; '.repeat(200);

describe('WS_COMPRESSION off (the default)', () => {
  let gw: Gateway;
  before(async () => { gw = await startGateway({ WS_WORKERS: '1' }); });
  after(async () => { assert.equal(await gw.stop(), 0); });

  test('a client that offers permessage-deflate gets no extension, and events are sent as they are', async () => {
    const ws = await RawWs.open(gw.port, true);
    assert.equal(ws.res.headers['sec-websocket-extensions'], undefined);
    const welcome = await ws.nextText();
    assert.match(welcome.text, /"type":"welcome"/);
    assert.equal((await join(ws, 'zip:off', 'j1')).deflated, false);
    assert.equal((await gw.adminPost('/v1/publish', { topic: 'zip:off', data: BIG })).status, 200);
    const ev = await ws.nextText();
    assert.equal(ev.deflated, false);
    assert.equal((JSON.parse(ev.text) as { data: string }).data, BIG);
    ws.close();
  });
});

for (const mode of ['shared', 'dedicated'] as const) {
  describe(`WS_COMPRESSION=${mode}`, () => {
    let gw: Gateway;
    before(async () => { gw = await startGateway({ WS_WORKERS: '1', WS_COMPRESSION: mode, WS_MAX_FRAME_BYTES: '32768', WS_HARD_MAX_FRAME_BYTES: '65536' }); });
    after(async () => { assert.equal(await gw.stop(), 0); });

    test('the extension is negotiated; events go out deflated, replies do not', async () => {
      const ws = await RawWs.open(gw.port, true);
      assert.match(String(ws.res.headers['sec-websocket-extensions']), /^permessage-deflate/);
      assert.match((await ws.nextText()).text, /"type":"welcome"/);
      const reply = await join(ws, 'zip:on', 'j1');
      assert.equal(reply.deflated, false, 'a reply is a few dozen bytes: never deflated');
      assert.equal((await gw.adminPost('/v1/publish', { topic: 'zip:on', data: BIG })).status, 200);
      const ev = await ws.nextText();
      assert.equal(ev.deflated, true, 'the event has RSV1 set');
      const parsed = JSON.parse(ev.text) as { type: string; topic: string; data: string };
      assert.equal(parsed.type, 'event');
      assert.equal(parsed.data, BIG);
      assert.ok(ev.wire * 10 < ev.text.length, `deflated to ${ev.wire} bytes from ${ev.text.length}`);
      ws.close();
    });

    test('a client that does not offer it gets plain frames from the same gateway', async () => {
      const ws = await RawWs.open(gw.port, false);
      assert.equal(ws.res.headers['sec-websocket-extensions'], undefined);
      await ws.nextText();
      await join(ws, 'zip:plain', 'j1');
      assert.equal((await gw.adminPost('/v1/publish', { topic: 'zip:plain', data: BIG })).status, 200);
      const ev = await ws.nextText();
      assert.equal(ev.deflated, false);
      assert.equal((JSON.parse(ev.text) as { data: string }).data, BIG);
      ws.close();
    });

    test('many events in a row arrive intact through a real permessage-deflate client (ws)', async () => {
      const c = new WebSocket(gw.url('/ws'), { perMessageDeflate: true });
      const got: { type: string; ref?: string; data?: { n: number; s: string } }[] = [];
      c.on('message', (m) => got.push(JSON.parse(String(m)) as (typeof got)[number]));
      await new Promise((r) => c.once('open', r));
      assert.match(c.extensions, /permessage-deflate/);
      c.send(JSON.stringify({ type: 'join', topic: 'zip:many', ref: 'j' }));
      while (!got.some((f) => f.ref === 'j')) await new Promise((r) => setTimeout(r, 10));
      for (let n = 0; n < 50; n++) assert.equal((await gw.adminPost('/v1/publish', { topic: 'zip:many', data: { n, s: BIG.slice(0, 100 + n * 7) } })).status, 200);
      while (got.filter((f) => f.type === 'event').length < 50) await new Promise((r) => setTimeout(r, 10));
      const evs = got.filter((f) => f.type === 'event');
      assert.deepEqual(evs.map((f) => f.data!.n), Array.from({ length: 50 }, (_, i) => i));
      for (const f of evs) assert.equal(f.data!.s, BIG.slice(0, 100 + f.data!.n * 7));
      c.close();
    });

    test('a deflated frame from the client is read; one that inflates past the cap closes that socket only', async () => {
      const ok = await RawWs.open(gw.port, true);
      await ok.nextText();
      assert.match((await join(ok, 'zip:in', 'j-deflated', true)).text, /"status":"ok"/);

      // Above WS_HARD_MAX_FRAME_BYTES once inflated, below uWS's limit (twice it): the guard's 1009.
      const over = await RawWs.open(gw.port, true);
      await over.nextText();
      over.send(JSON.stringify({ type: 'publish', topic: 'zip:in', data: 'x'.repeat(100_000), ref: 'p' }), true);
      const close = await over.next();
      assert.equal(close.opcode, 8);
      assert.equal(close.payload.readUInt16BE(0), 1009);

      // A bomb: about 16 KB on the wire, 16 MB inflated. uWS stops inflating at its limit and drops the connection.
      const bomb = await RawWs.open(gw.port, true);
      await bomb.nextText();
      bomb.send(`{"type":"publish","topic":"zip:in","ref":"b","data":"${'a'.repeat(16 * 1024 * 1024)}"}`, true);
      await assert.rejects(bomb.next(), /closed/);

      // The shard serves on: the first socket still gets events, a new one is admitted.
      assert.equal((await gw.adminPost('/v1/publish', { topic: 'zip:in', data: 'after' })).status, 200);
      assert.equal((JSON.parse((await ok.nextText()).text) as { data: string }).data, 'after');
      const fresh = await RawWs.open(gw.port, true);
      assert.match((await fresh.nextText()).text, /"type":"welcome"/);
      for (const w of [ok, over, bomb, fresh]) w.close();
    });
  });
}

test('a WS_COMPRESSION that is not off, shared or dedicated stops the start, naming it', async () => {
  const r = await runUntilExit({ WS_COMPRESSION: 'gzip', WS_MAX_FRAME_BYTES: 'lots' });
  assert.notEqual(r.code, 0);
  const out = r.stdout + r.stderr;
  assert.match(out, /WS_COMPRESSION/);
  assert.match(out, /WS_MAX_FRAME_BYTES/);
});
