// The load generator's tokens (S11, S12, S13): a standard HS256 JWS, one
// token per socket and round, and a real gateway with WS_AUTH=jwt takes them
// at the upgrade (as `?token=`) and in a `refresh`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway } from '@sluice/gateway/testing';
import { RawConn, type ConnHandlers } from '../src/lib/conn.ts';
import { encodeClientFrame, Kind } from '../src/lib/codec.ts';
import { authSpec, jwtEnv, signHs256, tokenFor, userOf } from '../src/lib/jwt.ts';

const payloadOf = (t: string): Record<string, unknown> => JSON.parse(Buffer.from(t.split('.')[1]!, 'base64url').toString('utf8')) as Record<string, unknown>;

test('signHs256 gives the well-known jwt.io example token', () => {
  const header = Buffer.from('{"alg":"HS256","typ":"JWT"}').toString('base64url');
  const t = signHs256({ sub: '1234567890', name: 'John Doe', iat: 1516239022 }, 'your-256-bit-secret', header);
  assert.equal(t, 'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.' +
    'SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c');
});

test('tokenFor: a user per socket unless one is named, a jti per socket and round, exp moving with the round', () => {
  const spec = authSpec();
  assert.ok(spec.secret.length >= 32, 'WS_JWT_SECRET needs 32 characters');
  const a = payloadOf(tokenFor(spec, 7, 0, 1000));
  assert.deepEqual(a, { sub: 'u7', tenant: 'default', iat: 1000, exp: 1000 + 3600, jti: 'bench-0-7', topics: ['bench.*'], publish: ['bench.*'] });
  const b = payloadOf(tokenFor(spec, 7, 2, 1000));
  assert.equal(b['jti'], 'bench-2-7');
  assert.equal(b['exp'], 1000 + 3600 + 2);
  assert.notEqual(tokenFor(spec, 7, 1, 1000), tokenFor(spec, 7, 2, 1000));
  const one = authSpec({ sub: 'someone' });
  assert.equal(userOf(one, 3), 'someone');
  assert.equal(payloadOf(tokenFor(one, 3, 0, 1000))['sub'], 'someone');
  assert.deepEqual(jwtEnv(spec), { WS_AUTH: 'jwt', WS_JWT_SECRET: spec.secret });
});

test('the gateway with WS_AUTH=jwt accepts the upgrade token as ?token= and a refresh with a new token', async () => {
  const spec = authSpec();
  const gw = await startGateway({ ...jwtEnv(spec), WS_WORKERS: '1' });
  try {
    const now = Math.floor(Date.now() / 1000);
    const frames: Array<{ kind: number; text: string }> = [];
    let wake: (() => void) | null = null;
    const next = async (): Promise<{ kind: number; text: string }> => {
      const deadline = Date.now() + 5000;
      while (frames.length === 0) {
        if (Date.now() > deadline) throw new Error('no frame in 5 s');
        await new Promise<void>((r) => { wake = r; setTimeout(r, 100); });
      }
      return frames.shift()!;
    };
    const opened = new Promise<RawConn>((resolve, reject) => {
      const handlers: ConnHandlers = {
        ready: (c) => resolve(c),
        frame: (_c, kind, buf, s, e) => { frames.push({ kind, text: buf.toString('utf8', s, e) }); wake?.(); },
        flush: () => {},
        closed: (_c, why) => reject(new Error(`closed: ${why}`)),
      };
      new RawConn(5, { host: '127.0.0.1', port: gw.port, proto: 'sluice' }, handlers, undefined, tokenFor(spec, 5, 0, now));
    });
    const conn = await opened;
    conn.send(encodeClientFrame(`{"type":"refresh","ref":"r1","token":${JSON.stringify(tokenFor(spec, 5, 1, now))}}`).bytes);
    const reply = await next();
    assert.equal(reply.kind, Kind.ReplyOk, reply.text);
    assert.equal((JSON.parse(reply.text) as { data: { expiresAt: number } }).data.expiresAt, (now + 3600 + 1) * 1000);
    // Another user's token is refused: the benchmark's refreshes keep the socket's user.
    conn.send(encodeClientFrame(`{"type":"refresh","ref":"r2","token":${JSON.stringify(tokenFor(spec, 6, 1, now))}}`).bytes);
    const refused = await next();
    assert.equal(refused.kind, Kind.ReplyErr, refused.text);
    assert.match(refused.text, /forbidden/);
    conn.close('done');
  } finally {
    await gw.stop('SIGTERM', 10_000);
  }
});
