// Experiment: how should a uWS 20.30 server complete an upgrade that had to
// wait (as the gateway's does, for the IP window and the token)? The upgrade
// handler attaches onAborted and completes the upgrade in a setImmediate, one
// of three ways:
//
// 1. `res.cork(() => res.upgrade(...))`: the corked form, with the uWS 20.30
//    bug (uNetworking/uWebSockets#1928): after its callback cork() misses the
//    upgrade (the socket was realloc'ed in place) and reads the HTTP state
//    from memory that now holds the WebSocket; when the bits read
//    "connection: close, response done" it shuts the new socket down.
// 2. `res.upgrade(...)` bare: uncorked, the 101 and the welcome leave in many
//    writes, and uWS prints a warning line to stderr for every call (and, as
//    measured here, a `Connection: close` upgrade gets its 101, then a FIN
//    before the welcome; the server runs open but never close).
// 3. `upgradeCorked(res, ...)` of packages/uws/src/cork.ts (the gateway's
//    way): the WebSocket's native cork method called on the response, then
//    `res.cork()` inside it (after `probeCorkInPlace` and `useUpgradeCork`).
//
// For each way, a one-file uWS server in a child process (this file, started
// again with `serve <way>`), whose open handler sends a small welcome frame
// as the gateway does, and whose `GET /stats` answers its process.cpuUsage().
// This process is the client: N upgrades with `ws` (100 in flight, from
// 127.0.0.1..8, each client closing itself 5 ms after its welcome; after
// 1000 unmeasured ones), measuring the server's CPU per upgrade and counting
// the sockets the server closed before the client did; then 200 upgrades by
// hand over node:net saying `Connection: close`, counting those the server
// shut down within 300 ms of the 101. The warning lines of way 2 are counted
// and dropped from the server's stderr. Each way 3 times, the order
// alternating (1,2,3,3,2,1,1,2,3); median and range.
//
//   node --import tsx benchmarks/src/experiments/async-upgrade.ts [upgrades]

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { loadUws, probeCorkInPlace, type HttpResponse, type us_listen_socket, upgradeCorked, useUpgradeCork } from '@sluice/uws';
import WebSocket from 'ws';
import { machineBusySeconds } from '../lib/proc.ts';
import { median } from '../report/summary.ts';
import { REPO_ROOT } from '../lib/spawn.ts';
import { SOURCES } from '../scenarios/connect.ts';

const { uws: uWS, build } = loadUws();

const WAYS = {
  '1': '`res.cork(() => res.upgrade(...))`',
  '2': '`res.upgrade(...)` (uncorked)',
  '3': '`upgradeCorked(res, () => res.upgrade(...))` (the gateway)',
} as const;
type Way = keyof typeof WAYS;

const UPGRADES = Number(process.argv[2] ?? 20_000);
const WARMUP = 1000;
const IN_FLIGHT = 100;
const CLOSE_AFTER_MS = 5;
const CONNECTION_CLOSE_UPGRADES = 200;
const CONNECTION_CLOSE_IN_FLIGHT = 20;
const SHUT_WINDOW_MS = 300;
const REPEATS = 3;
/** The server exits by itself after this long, should this process hang. */
const SERVER_LIFETIME_MS = 10 * 60_000;
const CORK_WARNING = 'writes must be made from within a corked callback';
const WELCOME_SUFFIX = '","heartbeatMs":25000,"limits":{"maxFrameBytes":65536,"hardMaxFrameBytes":1048576,' +
  '"maxMessages":100,"rateWindowMs":1000,"maxJoins":100}}';

interface ServerStats {
  cpuMicros: number;
  opens: number;
  closes: number;
  /** Closes the server saw without a close frame from the client (1006). */
  closes1006: number;
  aborted: number;
}

function serve(way: Way): void {
  const lifetime = setTimeout(() => process.exit(3), SERVER_LIFETIME_MS);
  lifetime.unref();
  process.on('disconnect', () => process.exit(0));
  const stats = { opens: 0, closes: 0, closes1006: 0, aborted: 0 };
  let seq = 0;
  const complete: (res: HttpResponse, upgrade: () => void) => void =
    way === '1' ? (res, upgrade) => { res.cork(upgrade); }
      : way === '2' ? (_res, upgrade) => { upgrade(); }
        : upgradeCorked;
  let listenSocket: us_listen_socket | undefined;
  const app = uWS.App()
    .ws('/*', {
      compression: uWS.DISABLED,
      idleTimeout: 0,
      upgrade: (res, req, context) => {
        const key = req.getHeader('sec-websocket-key');
        const protocol = req.getHeader('sec-websocket-protocol');
        const extensions = req.getHeader('sec-websocket-extensions');
        let aborted = false;
        res.onAborted(() => { aborted = true; stats.aborted++; });
        setImmediate(() => {
          if (aborted) return;
          complete(res, () => res.upgrade({}, key, protocol, extensions, context));
        });
      },
      open: (ws) => {
        stats.opens++;
        ws.send(`{"type":"welcome","connectionId":"n.0.1.${(++seq).toString(36)}${WELCOME_SUFFIX}`, false);
      },
      close: (_ws, code) => {
        stats.closes++;
        if (code === 1006) stats.closes1006++;
      },
    })
    .get('/stats', (res) => {
      const cpu = process.cpuUsage();
      res.writeHeader('content-type', 'application/json')
        .end(JSON.stringify({ cpuMicros: cpu.user + cpu.system, ...stats } satisfies ServerStats));
    })
    .get('/exit', (res) => {
      res.end('bye');
      if (listenSocket !== undefined) uWS.us_listen_socket_close(listenSocket);
      setTimeout(() => process.exit(0), 10);
    });
  void probeCorkInPlace(build.path).then(({ inPlace }) => useUpgradeCork(uWS, inPlace)).then(() => {
    app.listen('127.0.0.1', 0, (ls) => {
      if (ls === false) throw new Error('cannot listen on 127.0.0.1');
      listenSocket = ls;
      process.stdout.write(`${JSON.stringify({ port: uWS.us_socket_local_port(ls) })}\n`);
    });
  }, (err: unknown) => {
    process.stderr.write(`${String(err)}\n`);
    process.exit(2);
  });
}

interface Server {
  proc: ChildProcess;
  port: number;
  warnings: () => number;
}

async function startServer(way: Way): Promise<Server> {
  const self = fileURLToPath(import.meta.url);
  const proc = spawn(process.execPath, ['--import', 'tsx', self, 'serve', way], {
    cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let warnings = 0;
  createInterface({ input: proc.stderr! }).on('line', (line) => {
    if (line.includes(CORK_WARNING)) warnings++;
    else process.stderr.write(`server ${way}: ${line}\n`);
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start in 30 s')), 30_000);
    proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited at start (${code})`)); });
    createInterface({ input: proc.stdout! }).once('line', (line) => {
      clearTimeout(timer);
      resolve((JSON.parse(line) as { port: number }).port);
    });
  });
  return { proc, port, warnings: () => warnings };
}

async function stopServer(srv: Server): Promise<void> {
  if (srv.proc.exitCode !== null || srv.proc.signalCode !== null) return;
  const gone = new Promise<void>((r) => srv.proc.once('exit', () => r()));
  const kill = setTimeout(() => srv.proc.kill('SIGKILL'), 5000);
  try { await fetch(`http://127.0.0.1:${srv.port}/exit`); } catch { /* exiting already; the kill makes sure */ }
  await gone;
  clearTimeout(kill);
}

async function serverStats(port: number): Promise<ServerStats> {
  const r = await fetch(`http://127.0.0.1:${port}/stats`);
  return (await r.json()) as ServerStats;
}

interface WsRun {
  welcomed: number;
  /** Closed by the server before the client closed (or without the server's close frame: 1006). */
  serverClosedFirst: number;
  failed: number;
  ms: number;
}

/** `n` upgrades with `ws`, `IN_FLIGHT` at a time, each closing itself `CLOSE_AFTER_MS` after its welcome. */
function runWs(port: number, n: number): Promise<WsRun> {
  const url = `ws://127.0.0.1:${port}/ws`;
  const t0 = performance.now();
  let started = 0;
  let finished = 0;
  const out: WsRun = { welcomed: 0, serverClosedFirst: 0, failed: 0, ms: 0 };
  return new Promise((resolve) => {
    const next = (): void => {
      if (started >= n) {
        if (finished === n) { out.ms = performance.now() - t0; resolve(out); }
        return;
      }
      const i = started++;
      const ws = new WebSocket(url, { localAddress: SOURCES[i % SOURCES.length], perMessageDeflate: false });
      let welcomed = false;
      let closing = false;
      let settled = false;
      const timer = setTimeout(() => ws.terminate(), 20_000);
      ws.once('message', () => {
        welcomed = true;
        out.welcomed++;
        setTimeout(() => { closing = true; ws.close(); }, CLOSE_AFTER_MS);
      });
      ws.on('error', () => { /* counted at close */ });
      ws.once('close', (code) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (!welcomed) out.failed++;
        else if (!closing || code === 1006) out.serverClosedFirst++;
        finished++;
        next();
      });
    };
    for (let k = 0; k < Math.min(IN_FLIGHT, n); k++) next();
  });
}

interface CloseRun {
  upgraded: number;
  /** Got a frame (the welcome) after the 101. */
  welcomed: number;
  shut: number;
  failed: number;
}

/** `n` upgrades by hand saying `Connection: close`; counts those the server shut down within `SHUT_WINDOW_MS` of the 101. */
function runConnectionClose(port: number, n: number): Promise<CloseRun> {
  const out: CloseRun = { upgraded: 0, welcomed: 0, shut: 0, failed: 0 };
  let started = 0;
  let finished = 0;
  return new Promise((resolve) => {
    const next = (): void => {
      if (started >= n) {
        if (finished === n) resolve(out);
        return;
      }
      const i = started++;
      const s = connect({ port, host: '127.0.0.1', localAddress: SOURCES[i % SOURCES.length] });
      let head = '';
      let at101 = -1;
      let framed = false;
      let weClosed = false;
      let settled = false;
      const settle = (): void => {
        if (settled) return;
        settled = true;
        clearTimeout(bound);
        s.destroy();
        if (at101 < 0) out.failed++;
        finished++;
        next();
      };
      const bound = setTimeout(settle, 10_000);
      s.on('connect', () => {
        s.write(`GET /ws HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: close\r\n` +
          `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
      });
      s.on('data', (d: Buffer) => {
        if (at101 >= 0) {
          if (!framed) { framed = true; out.welcomed++; }
          return;
        }
        head += d.toString('latin1');
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        if (!head.startsWith('HTTP/1.1 101')) { settle(); return; }
        at101 = performance.now();
        out.upgraded++;
        if (head.length > end + 4) { framed = true; out.welcomed++; }
        setTimeout(() => {
          if (settled) return;
          weClosed = true;
          // Still open: close it as a client should (a masked close frame, 1000), then FIN.
          const mask = randomBytes(4);
          s.end(Buffer.from([0x88, 0x82, ...mask, 0x03 ^ mask[0]!, 0xe8 ^ mask[1]!]));
          setTimeout(settle, 1000);
        }, SHUT_WINDOW_MS);
      });
      const gone = (): void => {
        if (!settled && !weClosed && at101 >= 0 && performance.now() - at101 <= SHUT_WINDOW_MS) out.shut++;
        settle();
      };
      s.on('end', gone);
      s.on('error', gone);
      s.on('close', gone);
    };
    for (let k = 0; k < Math.min(CONNECTION_CLOSE_IN_FLIGHT, n); k++) next();
  });
}

interface Result {
  way: Way;
  cpuPerUpgrade: number;
  perSecond: number;
  ws: WsRun;
  server1006: number;
  connectionClose: CloseRun;
  /** The server's open and close handlers during the `Connection: close` upgrades. */
  connectionCloseOpens: number;
  connectionCloseCloses: number;
  warnings: number;
  /** Other work on the machine during the measured upgrades, in cores. */
  otherLoad: number;
}

async function measure(way: Way): Promise<Result> {
  const srv = await startServer(way);
  try {
    await runWs(srv.port, WARMUP);
    const s0 = await serverStats(srv.port);
    const busy0 = machineBusySeconds();
    const self0 = process.cpuUsage();
    const ws = await runWs(srv.port, UPGRADES);
    const self1 = process.cpuUsage(self0);
    const busy1 = machineBusySeconds();
    const s1 = await serverStats(srv.port);
    // Everything else on the machine meanwhile, in cores (/proc/stat has 10 ms ticks).
    const otherLoad = (busy1 - busy0 - (s1.cpuMicros - s0.cpuMicros) / 1e6 - (self1.user + self1.system) / 1e6) / (ws.ms / 1000);
    const connectionClose = await runConnectionClose(srv.port, CONNECTION_CLOSE_UPGRADES);
    await new Promise((r) => setTimeout(r, 100)); // the last stderr lines, the last closes
    const s2 = await serverStats(srv.port);
    const r: Result = {
      way,
      cpuPerUpgrade: (s1.cpuMicros - s0.cpuMicros) / UPGRADES,
      perSecond: UPGRADES / (ws.ms / 1000),
      ws,
      server1006: s1.closes1006 - s0.closes1006,
      connectionClose,
      connectionCloseOpens: s2.opens - s1.opens,
      connectionCloseCloses: s2.closes - s1.closes,
      warnings: srv.warnings(),
      otherLoad,
    };
    process.stderr.write(`way ${way}: ${r.cpuPerUpgrade.toFixed(1)} us/upgrade, ${Math.round(r.perSecond)} upgrades/s, ` +
      `${ws.welcomed} welcomed, ${ws.serverClosedFirst} closed by the server first (server saw ${r.server1006} closes 1006), ` +
      `${ws.failed} failed; Connection: close ${connectionClose.shut}/${connectionClose.upgraded} shut, ${connectionClose.welcomed} welcomed ` +
      `(${connectionClose.failed} failed; server: ${r.connectionCloseOpens} opens, ${r.connectionCloseCloses} closes); ` +
      `${r.warnings} warning lines; other load ${(100 * otherLoad).toFixed(0)}% of a core\n`);
    return r;
  } finally {
    await stopServer(srv);
  }
}

if (process.argv[2] === 'serve') {
  serve((process.argv[3] ?? '1') as Way);
} else {
  if (!Number.isInteger(UPGRADES) || UPGRADES < 1) throw new Error(`upgrades must be a positive integer, not ${process.argv[2]}`);
  const ways = Object.keys(WAYS) as Way[];
  const results: Result[] = [];
  for (let rep = 0; rep < REPEATS; rep++) {
    for (const way of rep % 2 === 0 ? ways : [...ways].reverse()) results.push(await measure(way));
  }
  console.log(`${UPGRADES} upgrades per run (after ${WARMUP} unmeasured), ${IN_FLIGHT} in flight, ${REPEATS} runs per way ` +
    `(order ${results.map((r) => r.way).join(',')}), node ${process.version}`);
  console.log('');
  console.log('| how the waited upgrade is completed | server CPU per upgrade, median (range) | upgrades/s, median | ' +
    `closed by the server first, of ${UPGRADES} (per run) | \`Connection: close\`: shut within ${SHUT_WINDOW_MS} ms of the 101, ` +
    `of ${CONNECTION_CLOSE_UPGRADES} (per run) | \`Connection: close\`: welcome received / server's close handler ran ` +
    '(per run) | uWS warning lines (per run) |');
  console.log('|---|---|---|---|---|---|---|');
  for (const way of ways) {
    const rs = results.filter((r) => r.way === way);
    const cpu = rs.map((r) => r.cpuPerUpgrade);
    const list = (f: (r: Result) => number | string): string => rs.map(f).join(', ');
    console.log(`| ${way}. ${WAYS[way]} | ${median(cpu).toFixed(0)} µs (${Math.min(...cpu).toFixed(0)}-${Math.max(...cpu).toFixed(0)}) | ` +
      `${Math.round(median(rs.map((r) => r.perSecond)))} | ${list((r) => r.ws.serverClosedFirst)} | ` +
      `${list((r) => r.connectionClose.shut)} | ${list((r) => `${r.connectionClose.welcomed}/${r.connectionCloseCloses}`)} | ` +
      `${list((r) => r.warnings)} |`);
  }
  console.log(`\n(Warning lines counted over each server's whole life: ${WARMUP} + ${UPGRADES} + ${CONNECTION_CLOSE_UPGRADES} upgrades.)`);
  const other = results.map((r) => r.otherLoad * 100);
  console.log(`Other work on the machine during the measured upgrades: ${Math.max(0, Math.min(...other)).toFixed(0)}-` +
    `${Math.max(0, Math.max(...other)).toFixed(0)}% of a core.`);
  const failures = results.reduce((a, r) => a + r.ws.failed + r.connectionClose.failed, 0);
  if (failures > 0) console.log(`\n${failures} upgrades failed (no welcome, or no 101).`);
}
