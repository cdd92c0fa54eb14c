/**
 * Slow loris: raw TCP connections that open and trickle an upgrade request
 * (one header line a second, or one byte a second) and never finish it, and
 * connections that send nothing at all.
 *
 * uWS has a fixed HTTP idle timeout (HTTP_IDLE_TIMEOUT_S: 10 s in 20.30,
 * the Node 20 build; 30 s in 20.57, the Node 22/24 build) checked on a 4 s
 * timer, and bytes trickled in do not extend it: every such connection must
 * be closed by the server within that bound of its opening (16 s, 36 s:
 * `httpIdleBoundMs`). Meanwhile the gateway must keep serving: a normal
 * client connects, joins, publishes, gets its ack and its event, and
 * readiness answers 200.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, eventually, type Gateway, httpIdleBoundMs, metricValue, running, startGateway } from './harness.ts';
import { RawWs, upgradeRequest } from './raw-ws.ts';

const LINE_TRICKLERS = 120;
const BYTE_TRICKLERS = 40;
const SILENT = 40;
/** The build's idle timeout, up to one 4 s tick late, and 2 s for a loaded box: set once the gateway runs. */
let CLOSE_BOUND_MS = 0;
const TRICKLE_INTERVAL_MS = 1000;
/** Pause between two rounds of the normal client. */
const ROUND_GAP_MS = 250;

interface Slow {
  readonly s: RawWs;
  readonly kind: 'line' | 'byte' | 'silent';
  /** What is left to trickle: the request without its final blank line, then headers forever. */
  pending: string;
  lines: number;
  /** Pieces written so far. */
  sent: number;
}

let gw: Gateway;
const slow: Slow[] = [];
const clients: Client[] = [];
let trickle: NodeJS.Timeout | undefined;

before(async () => {
  gw = await startGateway({
    WS_WORKERS: '2',
    // The normal client reconnects every round: a per-IP connection window
    // (PROTOCOL.md, default 60 a minute) must not refuse it.
    WS_IP_CONNECT_LIMIT: '100000',
  });
  CLOSE_BOUND_MS = httpIdleBoundMs(gw);
});

after(async () => {
  if (trickle !== undefined) clearInterval(trickle);
  for (const x of slow) x.s.destroy();
  for (const c of clients) c.ws.terminate();
  await Promise.all([...running].map((g) => g.stop()));
});

/** The next piece a trickler sends: one header line (never the blank line that ends the request), or one byte. */
function nextPiece(x: Slow): string {
  if (x.pending.length === 0) x.pending = `X-Slow-${x.lines++}: ${'y'.repeat(16)}\r\n`;
  const n = x.kind === 'byte' ? 1 : x.pending.indexOf('\r\n') + 2;
  const piece = x.pending.slice(0, n);
  x.pending = x.pending.slice(n);
  x.sent++;
  return piece;
}

/** One round of a well-behaved client: connect, join, publish, ack, event, readiness on both ports. */
async function serveOnce(round: number): Promise<void> {
  const c = await Client.connect(gw.url());
  clients.push(c);
  const topic = `loris:${round}`;
  assert.equal((await c.request({ type: 'join', topic })).status, 'ok');
  const ack = await c.request({ type: 'publish', topic, data: { round } });
  assert.equal(ack.status, 'ok', JSON.stringify(ack));
  const event = await c.next((f) => f.type === 'event' && f.topic === topic);
  assert.deepEqual(event.data, { round });
  assert.equal(event.id, (ack.data as { id: string }).id);
  c.close();
  const ready = await fetch(`http://127.0.0.1:${gw.port}/health/ready`);
  assert.equal(ready.status, 200, await ready.text());
  assert.equal((await fetch(gw.admin('/health/ready'))).status, 200);
}

test('slow and silent handshakes are each closed by the server within the build\'s HTTP idle bound, and the gateway serves meanwhile', async (t) => {
  const kinds: Slow['kind'][] = [
    ...Array<Slow['kind']>(LINE_TRICKLERS).fill('line'),
    ...Array<Slow['kind']>(BYTE_TRICKLERS).fill('byte'),
    ...Array<Slow['kind']>(SILENT).fill('silent'),
  ];
  const opened = await Promise.all(kinds.map(async (kind) => {
    const s = await RawWs.open(gw.port);
    const { request } = upgradeRequest(gw.port);
    const x: Slow = { s, kind, pending: request.slice(0, -2), lines: 0, sent: 0 };
    slow.push(x);
    if (kind !== 'silent') s.write(nextPiece(x));
    return x;
  }));
  assert.equal(opened.length, kinds.length);
  trickle = setInterval(() => {
    for (const x of slow) if (x.kind !== 'silent' && !x.s.ended) x.s.write(nextPiece(x));
  }, TRICKLE_INTERVAL_MS);

  // The normal client works round after round for as long as any slow socket is open.
  const allPending = (): boolean => slow.every((x) => !x.s.ended);
  let rounds = 0;
  let roundsWhileAllPending = 0;
  let slowestRoundMs = 0;
  while (slow.some((x) => !x.s.ended)) {
    const startedAllPending = allPending();
    const started = Date.now();
    await serveOnce(rounds++);
    slowestRoundMs = Math.max(slowestRoundMs, Date.now() - started);
    if (startedAllPending && allPending()) roundsWhileAllPending++;
    assert.ok(Date.now() - Math.min(...slow.map((x) => x.s.openedAt)) < CLOSE_BOUND_MS + 2000, 'slow sockets still open past the bound');
    await new Promise((r) => setTimeout(r, ROUND_GAP_MS));
  }
  clearInterval(trickle);
  trickle = undefined;

  const lifetimes = slow.map((x) => x.s.endedAt - x.s.openedAt);
  t.diagnostic(`${rounds} client rounds (${roundsWhileAllPending} with every slow socket pending, slowest ${slowestRoundMs} ms); ` +
    `slow sockets closed after ${Math.min(...lifetimes)}..${Math.max(...lifetimes)} ms`);
  // The checks above ran while the slow sockets were all there, not after uWS dropped them.
  assert.ok(roundsWhileAllPending >= 3, `only ${roundsWhileAllPending} rounds while every slow socket was pending`);
  for (const x of slow) {
    const lived = x.s.endedAt - x.s.openedAt;
    assert.ok(lived <= CLOSE_BOUND_MS, `a ${x.kind} socket was closed after ${lived} ms`);
    // Closed by the server, never upgraded: no request was ever complete.
    assert.ok(!x.s.httpHead.startsWith('HTTP/1.1 101'), `a ${x.kind} socket was upgraded`);
  }
  // They were closed while still trickling: bytes kept arriving, and did not extend the timeout.
  for (const x of slow.filter((y) => y.kind !== 'silent')) assert.ok(x.sent >= 5, `a ${x.kind} trickler sent only ${x.sent} pieces`);

  // Nothing crashed, nothing is left over.
  assert.equal(gw.proc.exitCode, null);
  assert.deepEqual(gw.logs.filter((l) => l.level === 'error' || l.level === 'fatal'), []);
  assert.equal(await metricValue(gw, 'sluice_shard_restarts_total'), 0);
  await eventually(async () => (await metricValue(gw, 'sluice_connected_sockets')) === 0);
});
