/**
 * Upgrades that wait: every upgrade here waits for the IP window (and, with
 * WS_AUTH=jwt, for the token) before it completes, outside uWS's own
 * handler. In both uWS builds (20.30 and 20.57) the corked form of such an
 * upgrade can shut the new socket down right after its open: the client gets
 * the 101 and the welcome, then a FIN (see `upgradeCorked` in
 * packages/uws/src/cork.ts). With a normal handshake that happened to about
 * one upgrade in 800 on 20.30; a request saying `Connection: close` hits it
 * every time, so that is what these tests send. The socket must stay open
 * and answer.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { findSystemDep, missingSystemDep } from '../../../tools/system-deps.mjs';
import { type Gateway, metricValue, running, startGateway } from './harness.ts';
import { Op, RawWs } from './raw-ws.ts';

const SECRET = 'async-upgrade-test-secret-0123456789abcdef';
/** Debian's libjemalloc2 (`npm test` installs it; tools/system-deps.mjs). */
const JEMALLOC = findSystemDep('libjemalloc.so.2');
let gw: Gateway;
let jwtGw: Gateway;
let jemallocGw: Gateway;

before(async () => {
  if (JEMALLOC === undefined) throw missingSystemDep('libjemalloc.so.2');
  [gw, jwtGw, jemallocGw] = await Promise.all([
    startGateway({ LOG_LEVEL: 'debug' }),
    startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET }),
    startGateway({ LD_PRELOAD: JEMALLOC, LOG_LEVEL: 'debug' }),
  ]);
});

after(async () => {
  await Promise.all([...running].map((g) => g.stop()));
});

/** Upgrades by hand, then checks the socket is still open a while after its welcome and answers a ping. */
async function upgradeAndUse(port: number, opts: Parameters<typeof RawWs.connect>[1]): Promise<void> {
  const c = await RawWs.connect(port, opts);
  try {
    await c.until(() => c.json().length > 0 || c.ended, 5000);
    assert.equal(c.json()[0]?.['type'], 'welcome', `no welcome: ${c.httpHead}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(c.ended, false, `the server ended the connection ${c.endedAt - c.openedAt} ms after it opened`);
    c.sendText('{"type":"ping","ref":"p"}');
    await c.until(() => c.json().some((f) => f['type'] === 'pong') || c.ended, 5000);
    assert.deepEqual(c.json().find((f) => f['type'] === 'pong'), { type: 'pong', ref: 'p' });
    assert.equal(c.ended, false);
    assert.equal(c.protocolError, undefined);
    c.send({ opcode: Op.Close, payload: Buffer.from([0x03, 0xe8]) });
    await c.until(() => c.ended, 5000);
  } finally {
    c.destroy();
  }
}

test('the process probed once how to cork an upgrade: the WebSocket\'s method under glibc (realloc in place), res.cork under jemalloc', () => {
  const ways = (g: Gateway): unknown[] => g.logs.filter((l) => typeof l['cork'] === 'string').map((l) => l['cork']);
  assert.deepEqual(ways(gw), ['websocket']);
  assert.deepEqual(ways(jemallocGw), ['res']);
});

for (const [name, opts] of [
  ['Connection: close', { connection: 'close' }],
  ['Connection: Upgrade (the normal handshake)', {}],
] as const) {
  test(`an upgrade that waited for the IP window stays open and answers: ${name}`, async () => {
    const open = await metricValue(gw, 'sluice_connected_sockets');
    for (let i = 0; i < 4; i++) await upgradeAndUse(gw.port, opts);
    assert.equal(await metricValue(gw, 'sluice_connected_sockets'), open);
  });

  test(`with jemalloc preloaded too: ${name}`, async () => {
    for (let i = 0; i < 4; i++) await upgradeAndUse(jemallocGw.port, opts);
    assert.equal(jemallocGw.proc.exitCode, null, jemallocGw.stderr());
    assert.equal(await metricValue(jemallocGw, 'sluice_connected_sockets'), 0);
  });
}

test('an upgrade that waited for a JWT check stays open and answers (Connection: close)', async () => {
  const token = await new SignJWT({ sub: 'u1' }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + 600).sign(new TextEncoder().encode(SECRET));
  for (let i = 0; i < 4; i++) {
    await upgradeAndUse(jwtGw.port, { connection: 'close', headers: { Authorization: `Bearer ${token}` } });
  }
});
