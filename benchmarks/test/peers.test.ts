// The load generator's raw client against every peer: the handshake reaches
// ready, a join is acknowledged, a publish gets its reply (ref echoed) and
// the event comes back to the sender, which is the topic's only subscriber.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RawConn, type ConnHandlers } from '../src/lib/conn.ts';
import { Kind, S_BASE, T_BASE, eventDataPos, eventS, eventT, joinFrame, patchDigits, publishTemplate, replyRef, type Proto } from '../src/lib/codec.ts';
import type { PeerHandle } from '../src/peers/common.ts';
import { startUwsPeer } from '../src/peers/uws.ts';
import { startWsPeer } from '../src/peers/ws.ts';
import { startSioPeer } from '../src/peers/sio.ts';

interface Seen { kind: number; ref: number; t: number; s: number }

function open(port: number, proto: Proto): Promise<{ conn: RawConn; next: () => Promise<Seen> }> {
  const queue: Seen[] = [];
  let wake: (() => void) | null = null;
  return new Promise((resolve, reject) => {
    const handlers: ConnHandlers = {
      ready: (c) => resolve({
        conn: c,
        next: async () => {
          while (queue.length === 0) await new Promise<void>((r) => { wake = r; });
          return queue.shift()!;
        },
      }),
      frame: (_c, kind, buf, s, e) => {
        const pos = kind === Kind.Event ? eventDataPos(buf, s, e) : -1;
        queue.push({
          kind,
          ref: kind === Kind.ReplyOk ? replyRef(proto, buf, s, e) : -1,
          t: pos === -1 ? -1 : eventT(buf, pos, e),
          s: pos === -1 ? -1 : eventS(buf, pos, e),
        });
        wake?.();
      },
      flush: () => {},
      closed: (_c, why) => reject(new Error(why)),
    };
    new RawConn(1, { host: '127.0.0.1', port, proto }, handlers);
  });
}

const peers: Array<[string, Proto, (port: number) => Promise<PeerHandle>]> = [
  ['uws', 'sluice', startUwsPeer],
  ['ws', 'sluice', startWsPeer],
  ['sio', 'sio', startSioPeer],
];

for (const [name, proto, start] of peers) {
  test(`${name} peer: join, publish, reply with the ref, event back to the sender`, async (t) => {
    const peer = await start(0);
    t.after(() => peer.close());
    const { conn, next } = await open(peer.port, proto);
    t.after(() => conn.close('test over'));
    conn.send(joinFrame(proto, 'bench.1'));
    assert.equal((await next()).kind, Kind.ReplyOk);

    const tpl = publishTemplate(proto, 'bench.1', 64, true, false);
    const frame = Buffer.from(tpl.frame.bytes);
    patchDigits(frame, 0, tpl.frame, tpl.refPos, T_BASE + 77, 15);
    patchDigits(frame, 0, tpl.frame, tpl.tPos, T_BASE + 77, 15);
    patchDigits(frame, 0, tpl.frame, tpl.sPos, S_BASE + 3, 10);
    conn.send(frame);
    const got = [await next(), await next()].sort((a, b) => a.kind - b.kind);
    assert.deepEqual(got.map((g) => g.kind), [Kind.ReplyOk, Kind.Event]);
    assert.equal(got[0]!.ref, T_BASE + 77);
    assert.equal(got[1]!.t, T_BASE + 77);
    assert.equal(got[1]!.s, S_BASE + 3);
  });
}
