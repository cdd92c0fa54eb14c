/**
 * A flood of rejected frames (and of sockets struck out for them) at
 * LOG_LEVEL=debug, the level that logs every rejection: no line at error
 * level, a bounded number of lines per second, and the lines written say how
 * many of their kind were left out (also counted in
 * sluice_log_lines_suppressed_total).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import WebSocket from 'ws';
import { Client, eventually, type Gateway, metricValue, rawUpgrade, startGateway } from './harness.ts';

const SOCKETS = 40;
const FRAMES_PER_SOCKET = 400;
const SHARDS = 2;
/** The throttle: 20 lines of a kind per shard per second (LOG_LINES_PER_SECOND), four kinds. */
const KINDS = 4;
const PER_KIND = 20;
/** Lines that are not throttled but may fall in the same second: start, ready, a restart... there should be none here. */
const SLACK = 10;

let gw: Gateway;
before(async () => {
  gw = await startGateway({ LOG_LEVEL: 'debug', WS_WORKERS: String(SHARDS), WS_MAX_STRIKES: '100' });
});
after(async () => {
  assert.equal(await gw.stop(), 0);
});

async function flood(): Promise<number> {
  let closedAbusive = 0;
  await Promise.all(Array.from({ length: SOCKETS }, (_, i) => new Promise<void>((resolve, reject) => {
    const ws = new WebSocket(gw.url(), ['sluice.v1']);
    ws.on('error', reject);
    ws.on('open', () => {
      // Malformed JSON, unknown types, bad topics, binary frames: every one a rejection, and a strike.
      for (let n = 0; n < FRAMES_PER_SOCKET; n++) {
        const kind = (n + i) % 4;
        if (kind === 0) ws.send('{not json');
        else if (kind === 1) ws.send(JSON.stringify({ type: 'nope', ref: String(n) }));
        else if (kind === 2) ws.send(JSON.stringify({ type: 'join', ref: String(n), topic: 'bad topic!' }));
        else ws.send(Buffer.from([1, 2, 3]));
      }
    });
    ws.on('close', (code) => {
      if (code === 1008) closedAbusive++;
      resolve();
    });
  })));
  return closedAbusive;
}

test('a flood of rejected frames writes no error line and a bounded number of lines per second', async () => {
  const firstLine = gw.logs.length;
  const rejectedBefore = await metricValue(gw, 'sluice_limit_rejections_total', '{reason="bad_request"}').catch(() => 0);
  const closed = await flood();
  // Every socket sent far more than WS_MAX_STRIKES bad frames in a row: all were struck out.
  assert.equal(closed, SOCKETS);
  await eventually(async () => (await metricValue(gw, 'sluice_clients_closed_total', '{reason="abusive"}')) === SOCKETS);
  const rejected = (await metricValue(gw, 'sluice_limit_rejections_total', '{reason="bad_request"}')) +
    (await metricValue(gw, 'sluice_limit_rejections_total', '{reason="rate_limited"}')) - rejectedBefore;
  // At least the strikes that closed each socket were rejected and answered.
  assert.ok(rejected >= SOCKETS * 100, `rejections counted: ${rejected}`);

  const lines = gw.logs.slice(firstLine);
  const errors = lines.filter((l) => l.level === 'error' || l.level === 'fatal');
  assert.deepEqual(errors, [], 'no error-level line for rejected input');
  const perSecond = new Map<number, number>();
  for (const l of lines) {
    const s = Math.floor(Date.parse(String(l.time)) / 1000);
    perSecond.set(s, (perSecond.get(s) ?? 0) + 1);
  }
  const peak = Math.max(...perSecond.values());
  assert.ok(peak <= SHARDS * KINDS * PER_KIND + SLACK, `peak ${peak} lines in one second: ${JSON.stringify([...perSecond])}`);

  // Rejections at debug, closes at info; the throttle left most out, and said so.
  const rejectedLines = lines.filter((l) => l.msg === 'frame rejected');
  assert.ok(rejectedLines.length > 0 && rejectedLines.length < rejected, `${rejectedLines.length} 'frame rejected' lines for ${rejected} rejections`);
  assert.ok(rejectedLines.every((l) => l.level === 'debug'));
  const closeLines = lines.filter((l) => l.msg === 'closing socket: too many rejected frames in a row');
  assert.ok(closeLines.length > 0 && closeLines.every((l) => l.level === 'info'));
  const suppressed = await metricValue(gw, 'sluice_log_lines_suppressed_total', '{level="debug"}');
  assert.ok(suppressed > 0, 'suppressed debug lines are counted');
  // No frame's content reaches the log: only reasons and refs.
  assert.ok(!lines.some((l) => JSON.stringify(l).includes('not json')), 'no frame body in the log');
  // A line after a suppressed stretch says how many were left out: the
  // next flood comes after the throttle's one-second window has passed.
  await new Promise((r) => setTimeout(r, 1100));
  await flood();
  await eventually(() => gw.logs.slice(firstLine).some((l) => l.msg === 'frame rejected' && typeof l.suppressed === 'number' &&
    l.suppressed > 0), 5000);
});

test('no secret, token or message body in any line: the start shows the effective config redacted; drains log at info', async () => {
  const secret = 'log-test-secret-of-thirty-two-characters';
  const adminToken = 'admin-token-that-must-not-appear';
  const g = await startGateway({ LOG_LEVEL: 'debug', WS_AUTH: 'jwt', WS_JWT_SECRET: secret, ADMIN_TOKEN: adminToken });
  const jwt = await new SignJWT({ sub: 'u1', topics: ['*'], publish: ['*'] }).setProtectedHeader({ alg: 'HS256' })
    .setExpirationTime('10m').sign(new TextEncoder().encode(secret));
  const c = await Client.connect(g.url(`/ws?token=${jwt}`));
  const body = 'a-message-body-that-must-not-appear';
  assert.equal((await c.request({ type: 'publish', topic: 'l:1', data: { body } })).status, 'ok');
  assert.equal((await c.request({ type: 'publish', topic: 'bad topic', data: { body } })).status, 'error');
  const forged = `${jwt.slice(0, -4)}AAAA`;
  assert.equal((await rawUpgrade(g.port, { path: `/ws?token=${forged}` })).status, 401);
  assert.equal((await rawUpgrade(g.port, { headers: { authorization: `Bearer ${forged}` } })).status, 401);
  await eventually(() => g.logs.some((l) => l.msg === 'upgrade refused'));
  c.close();
  assert.equal(await g.stop('SIGTERM'), 0);
  const start = g.logs.find((l) => l.msg === 'starting sluice') as { config: Record<string, unknown> } | undefined;
  assert.ok(start !== undefined);
  assert.equal(start.config.adminToken, '[redacted]');
  assert.equal(start.config.jwtSecret, '[redacted]');
  assert.equal(start.config.auth, 'jwt');
  const all = JSON.stringify(g.logs);
  for (const [what, value] of [['secret', secret], ['admin token', adminToken], ['token', jwt], ['forged token', forged],
    ['token signature', jwt.split('.')[2]!], ['body', body]] as const) {
    assert.ok(!all.includes(value), `the ${what} appears in the log`);
  }
  for (const msg of ['drain started', 'drain finished']) {
    assert.equal(g.logs.find((l) => l.msg === msg)?.level, 'info', msg);
  }
  assert.deepEqual(g.logs.filter((l) => l.level === 'error' || l.level === 'fatal'), []);
});
