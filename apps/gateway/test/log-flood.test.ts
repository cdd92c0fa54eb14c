/**
 * A flood of rejected frames (and of sockets struck out for them) at
 * LOG_LEVEL=debug, the level that logs every rejection: no line at error
 * level, a bounded number of lines per second, and the lines written say how
 * many of their kind were left out (also counted in
 * sluice_log_lines_suppressed_total).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { eventually, type Gateway, metricValue, startGateway } from './harness.ts';

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
