// S9 reconnect storm (issue 8): `clients` clients connected to gateway node A
// are dropped at once by a drain (SIGTERM, a short WS_DRAIN_DELAY_MS and a
// WS_DRAIN_RATE high enough to close them all within about a second), and
// come back at node B. Two kinds of client, each on its own fresh pair of
// nodes, one after the other in the same run:
//
// - `sdk`: @sluice/client's SluiceClient on `ws`, url list [A, B]. Each first
//   attempt goes to A (the client's random source answers 0 once, for that
//   pick only; every later draw, the reconnect jitter included, is
//   Math.random). After the 1012 close the client avoids A and waits as the
//   server said: the close's retryAfterMs (uniform in [1000, 6000] ms by
//   default) plus its full jitter.
// - `browser`: the same SDK client, but its sockets hide a refused upgrade's
//   status and body (as a browser's WebSocket does: a 1006 and nothing
//   else), so it backs off with its full jitter instead of the server's hint.
// - `naive`: a plain `ws` socket that, when A closes it, opens one to B at
//   once, and again at once after every failed attempt.
//
// Each mode runs with node B's upgrade budget off and on (WS_UPGRADE_RATE,
// `budgets`); B's refusals for rate are counted from its /metrics. After the
// storms, the cost of a refusal against an accepted upgrade: one gateway
// with a budget of 1/s answering raw upgrade requests (nearly all 503), then
// one without a budget accepting as many, each request's socket closed on
// the first bytes of the answer; the gateway's CPU per request.
//
// The clients live in `procs` child processes (this file, run with
// --storm-child; ~2500 clients each, one fd per client), spread over the
// loopback source addresses the other scenarios use. Arrivals are counted
// twice: client-side (the time each client got B's `welcome`) and at B
// (sluice_upgrades_total{outcome="accepted"} from its /metrics, polled every
// 100 ms). The wait ends 1 s after every client is back, 2 s after 99% are,
// or `maxWaitMs` after SIGTERM, whichever comes first. Loopback only; every loop
// is bounded; not part of `ci`.

import { connect } from 'node:net';
import { availableParallelism } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import WebSocket from 'ws';
import { SluiceClient, type WebSocketConstructor } from '@sluice/client';
import { decodeServerFrame } from '@sluice/protocol';
import { split } from '../loadgen/pool.ts';
import { machineBusySeconds } from '../lib/proc.ts';
import { ServerProc, TARGETS } from '../lib/server.ts';
import { metricByLabel, metricSum } from '@sluice/gateway/testing';
import { RpcChild, serveRequests } from '../lib/child-rpc.ts';
import { bucketCounts, bucketGrowth, median, peakInWindow, peakRate, timeToShare, type CounterPoll } from '../lib/series.ts';
import { SOURCES } from './connect.ts';
import { failedSample, otherUtil, sleep, type RunOptions, type Sample } from './common.ts';

export type StormMode = 'sdk' | 'browser' | 'naive';

export interface StormConfig {
  /** Clients per mode. */
  clients: number;
  /** Client processes (at least clients / 2500). */
  procs: number;
  /** WS_DRAIN_RATE of node A: closes per second for the node. */
  rate: number;
  /** WS_DRAIN_DELAY_MS of node A. */
  delayMs: number;
  /** Handshakes in flight per client process while the clients first connect to A. */
  concurrency: number;
  /** The longest wait for the clients after SIGTERM. */
  maxWaitMs: number;
  modes: readonly StormMode[];
  /** WS_UPGRADE_RATE of node B, one storm per mode for each; 0 = off. */
  budgets: readonly number[];
  /** Upgrade requests for the refusal-cost measurement (0: skipped). */
  costRequests: number;
}

export const S9_DEFAULT: StormConfig = {
  clients: 10_000, procs: 4, rate: 10_000, delayMs: 100, concurrency: 200, maxWaitMs: 30_000, modes: ['sdk', 'browser', 'naive'],
  // 1000: below the SDK's arrivals here (its drain hints spread 10,000 over 5 s: about 2300 in the busiest second), so every kind meets it.
  budgets: [0, 1000], costRequests: 20_000,
};

const PER_PROC_MAX = 2500;
const BUCKET_MS = 100;
/** After 99% are back, how long the wait goes on for the rest. */
const TAIL_MS = 2000;

const MODE_TEXT: Record<StormMode, string> = { sdk: 'SDK clients', browser: 'SDK clients as in a browser (no refusal body)', naive: 'naive ws clients' };

export function variantOf(cfg: Pick<StormConfig, 'clients' | 'rate'>, mode: StormMode, budget = 0): string {
  return `${cfg.clients} ${MODE_TEXT[mode]}, drain ${cfg.rate}/s, ${budget === 0 ? 'no upgrade budget' : `WS_UPGRADE_RATE=${budget}`}`;
}

export interface Poll {
  /** ms after SIGTERM, when the answer came. */
  ms: number;
  accepted: number;
  cpuS: number;
}

const series = (polls: readonly Poll[], key: 'accepted' | 'cpuS'): CounterPoll[] => polls.map((p) => ({ ms: p.ms, value: p[key] }));

/** One bucket of the chart. */
export interface StormBucket {
  /** Start of the bucket, ms after SIGTERM. */
  t: number;
  /** Clients that got B's welcome. */
  arrivals: number;
  /** Growth of B's accepted-upgrades counter, in the bucket of the poll that saw it. */
  server: number;
  /** Clients whose socket A closed. */
  closes: number;
}

// ---- the child process: holds the clients ------------------------------------------

type Request =
  | { op: 'connect'; mode: StormMode; urlA: string; urlB: string; count: number; idBase: number; sources: string[]; concurrency: number; timeoutMs: number }
  | { op: 'results' }
  | { op: 'reset' }
  | { op: 'exit' };

interface ConnectReply {
  ready: number;
  onA: number;
  failed: number;
  reasons: Record<string, number>;
  /** Which gateway process welcomed each client first: the node id that starts its connection ids. */
  nodes: Record<string, number>;
}

interface ResultsReply {
  /** Epoch ms (performance.timeOrigin + now) of each close by A, and of each welcome from B. */
  closesAtA: number[];
  arrivals: number[];
  closeCodes: Record<string, number>;
  /** Sockets the clients opened, per node, since they connected. */
  attemptsA: number;
  attemptsB: number;
  /** Why attempts after the drop failed (the SDK's reconnecting reasons; the naive client's close codes). */
  failures: Record<string, number>;
  errors: Record<string, number>;
  odd: string[];
  /** SDK only: the server's retryAfterMs on the drop, and the wait the client chose. */
  retryAfterMs: number[];
  plannedMs: number[];
  stillOnA: number;
  notBack: number;
}


const nowMs = (): number => performance.timeOrigin + performance.now();

interface Held {
  close(): Promise<void> | void;
}

class Clients {
  held: Held[] = [];
  closesAtA: number[] = [];
  arrivals: number[] = [];
  closeCodes: Record<string, number> = {};
  attempts: Record<string, number> = {};
  failures: Record<string, number> = {};
  /** Socket errors (`ws`'s error event). */
  errors: Record<string, number> = {};
  /** Closes by A other than 1012, described (the first 10). */
  odd: string[] = [];
  retryAfterMs: number[] = [];
  plannedMs: number[] = [];
  phases: Array<'connecting' | 'onA' | 'dropped' | 'back' | 'failed'> = [];
  nodes: Record<string, number> = {};
  urlA = '';
  urlB = '';
  stopping = false;
  counting = false;

  private count(map: Record<string, number>, k: string): void {
    map[k] = (map[k] ?? 0) + 1;
  }

  async connect(r: Extract<Request, { op: 'connect' }>): Promise<ConnectReply> {
    this.urlA = r.urlA;
    this.urlB = r.urlB;
    this.stopping = false;
    const reasons: Record<string, number> = {};
    let ready = 0;
    let failed = 0;
    let next = 0;
    const deadline = Date.now() + r.timeoutMs;
    const ctors = r.sources.map((local) => this.ctor(local, r.mode === 'browser'));
    await new Promise<void>((resolveAll) => {
      let inflight = 0;
      const pump = (): void => {
        while (inflight < r.concurrency && next < r.count) {
          if (Date.now() > deadline) { failed += r.count - next; next = r.count; break; }
          const i = next++;
          inflight++;
          const done = (ok: boolean, why?: string): void => {
            inflight--;
            if (ok) ready++; else { failed++; this.count(reasons, why ?? 'unknown'); }
            pump();
          };
          const ctor = ctors[(r.idBase + i) % ctors.length]!;
          if (r.mode === 'naive') this.naiveClient(i, r.sources[(r.idBase + i) % r.sources.length]!, done); else this.sdkClient(i, ctor, done);
        }
        if (inflight === 0 && next >= r.count) resolveAll();
      };
      pump();
    });
    this.counting = true;
    const onA = this.phases.filter((p) => p === 'onA').length;
    return { ready, onA, failed, reasons, nodes: this.nodes };
  }

  /**
   * A `ws` constructor from one loopback source address that counts the
   * sockets opened per URL. `hideRefusals`: the SDK's listener for a refused
   * upgrade is not attached, so `ws` reports it as an error and a 1006, as a
   * browser does.
   */
  private ctor(local: string, hideRefusals: boolean): WebSocketConstructor {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the class below counts into this object
    const self = this;
    return class extends WebSocket {
      constructor(url: string, protocols?: string | string[]) {
        super(url, protocols, { localAddress: local });
        if (self.counting) self.count(self.attempts, url === self.urlA ? 'A' : url === self.urlB ? 'B' : url);
        // Beside the SDK's own handler, which ignores errors (a close follows).
        this.on('error', (e) => self.count(self.errors, e.message.startsWith('Unexpected server response') ? 'refused upgrade (hidden)' : e.message));
      }

      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- ws's own listener type for every event
      override on(event: string | symbol, listener: (...args: any[]) => void): this {
        if (hideRefusals && event === 'unexpected-response') return this;
        return super.on(event, listener);
      }
    };
  }

  private sdkClient(i: number, ctor: WebSocketConstructor, done: (ok: boolean, why?: string) => void): void {
    let first = true;
    const client = new SluiceClient({
      url: [this.urlA, this.urlB],
      WebSocket: ctor,
      // The first pick of the URL list goes to A (index 0); every later draw is random.
      random: () => {
        if (first) { first = false; return 0; }
        return Math.random();
      },
    });
    this.phases[i] = 'connecting';
    let settled = false;
    let firstConn = { id: '', at: 0 };
    client.on('connected', (e) => {
      const p = this.phases[i];
      if (p === 'connecting') {
        firstConn = { id: e.connectionId, at: nowMs() };
        this.count(this.nodes, e.connectionId.split('.')[0]!);
        this.phases[i] = e.url === this.urlA ? 'onA' : 'failed';
        settled = true;
        done(e.url === this.urlA, e.url === this.urlA ? undefined : `first connected to ${e.url}`);
      } else if (p === 'dropped') {
        if (e.url === this.urlB) { this.phases[i] = 'back'; this.arrivals.push(nowMs()); } else this.count(this.failures, 'connected to A again');
      }
    });
    client.on('disconnected', (e) => {
      if (this.phases[i] !== 'onA' || this.stopping) return;
      this.phases[i] = 'dropped';
      this.closesAtA.push(nowMs());
      this.count(this.closeCodes, e.code === 1012 ? '1012' : `${e.code} ${e.reason ?? ''}`.trim());
      if (e.code !== 1012 && this.odd.length < 10) this.odd.push(`${firstConn.id} closed ${e.code} ${(nowMs() - firstConn.at).toFixed(0)} ms after its welcome`);
      if (e.retryAfterMs !== undefined) this.retryAfterMs.push(e.retryAfterMs);
    });
    let planned = false;
    client.on('reconnecting', (e) => {
      if (this.stopping) return;
      if (this.phases[i] === 'connecting' && !settled) {
        // The first connect failed: the client would now avoid A. Give it up.
        settled = true;
        this.phases[i] = 'failed';
        void client.close();
        done(false, `first connect: ${e.reason ?? String(e.code ?? e.status)}`);
        return;
      }
      if (this.phases[i] !== 'dropped') return;
      if (!planned) { planned = true; this.plannedMs.push(e.inMs); } else this.count(this.failures, e.reason ?? `code ${String(e.code)}`);
    });
    client.on('error', () => undefined);
    this.held.push({ close: () => client.close() });
    client.connect();
  }

  private naiveClient(i: number, local: string, done: (ok: boolean, why?: string) => void): void {
    this.phases[i] = 'connecting';
    let ws: WebSocket | undefined;
    let welcomed = false;
    let tries = 0;
    let firstConn = { id: '', at: 0 };
    const open = (url: string): void => {
      if (this.counting) this.count(this.attempts, url === this.urlA ? 'A' : 'B');
      const s = new WebSocket(url, ['sluice.v1'], { localAddress: local });
      ws = s;
      welcomed = false;
      s.on('message', (data) => {
        if (welcomed) return;
        welcomed = true;
        if (this.phases[i] === 'connecting') {
          this.phases[i] = 'onA';
          const d = decodeServerFrame(String(data));
          firstConn = { id: d.ok && d.frame.type === 'welcome' ? d.frame.connectionId : '', at: nowMs() };
          this.count(this.nodes, firstConn.id.split('.')[0]!);
          done(true);
        } else if (this.phases[i] === 'dropped') { this.phases[i] = 'back'; this.arrivals.push(nowMs()); }
      });
      s.on('error', (e) => this.count(this.errors, e.message)); // a close follows
      s.on('close', (code) => {
        if (this.stopping || ws !== s) return;
        const p = this.phases[i];
        if (p === 'connecting') { this.phases[i] = 'failed'; done(false, `first connect: close ${code}`); return; }
        if (p === 'onA' && welcomed) {
          this.phases[i] = 'dropped';
          this.closesAtA.push(nowMs());
          this.count(this.closeCodes, String(code));
          if (code !== 1012 && this.odd.length < 10) this.odd.push(`${firstConn.id} closed ${code} ${(nowMs() - firstConn.at).toFixed(0)} ms after its welcome`);
          open(this.urlB); // at once
          return;
        }
        if (p === 'dropped') {
          this.count(this.failures, `close ${code}`);
          // At once again, bounded in count.
          if (++tries < 1000) open(this.urlB);
        }
      });
    };
    this.held.push({ close: () => { ws?.terminate(); } });
    open(this.urlA);
  }

  results(): ResultsReply {
    return {
      closesAtA: this.closesAtA, arrivals: this.arrivals, closeCodes: this.closeCodes,
      attemptsA: this.attempts['A'] ?? 0, attemptsB: this.attempts['B'] ?? 0, failures: this.failures, errors: this.errors, odd: this.odd,
      retryAfterMs: this.retryAfterMs, plannedMs: this.plannedMs,
      stillOnA: this.phases.filter((p) => p === 'onA').length,
      notBack: this.phases.filter((p) => p === 'dropped').length,
    };
  }

  async reset(): Promise<void> {
    this.stopping = true;
    this.counting = false;
    await Promise.all(this.held.map((h) => h.close()));
    this.held = [];
    this.closesAtA = [];
    this.arrivals = [];
    this.closeCodes = {};
    this.attempts = {};
    this.failures = {};
    this.errors = {};
    this.odd = [];
    this.retryAfterMs = [];
    this.plannedMs = [];
    this.phases = [];
    this.nodes = {};
  }
}

function childMain(): void {
  const clients = new Clients();
  serveRequests<Request>('storm client', Number(process.env['STORM_LIFETIME_MS'] ?? 10 * 60_000),
    (r) => (r.op === 'connect' ? clients.connect(r) : r.op === 'results' ? clients.results() : r.op === 'reset' ? clients.reset() : null));
}

// ---- the orchestrator's side --------------------------------------------------------

const SELF = fileURLToPath(import.meta.url);

type StormProc = RpcChild<Request>;

const startStormProc = (index: number): Promise<StormProc> => RpcChild.start<Request>(SELF, '--storm-child', `storm clients ${index}`);

/** The node id a gateway logs at start (`starting sluice`): the first part of its connection ids. */
function nodeIdOf(srv: ServerProc): string {
  return String(srv.logs.find((l) => typeof l['node'] === 'string')?.['node'] ?? '?');
}

async function readMetrics(adminPort: number | undefined): Promise<string> {
  if (adminPort === undefined) throw new Error('no admin port');
  return (await fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(2000) })).text();
}

/** WS_DRAIN_MAX_MS of node A: every client at the rate, plus 10 s. */
export function drainMaxMs(cfg: Pick<StormConfig, 'clients' | 'rate' | 'delayMs'>): number {
  return Math.ceil((cfg.clients / cfg.rate) * 1000 + cfg.delayMs + 10_000);
}

export async function runStorm(opts: RunOptions, cfg: StormConfig): Promise<Sample[]> {
  const n = cfg.budgets.length === 0 ? 0 : Math.max(cfg.procs, Math.ceil(cfg.clients / PER_PROC_MAX));
  const procs = await Promise.all(Array.from({ length: n }, (_, i) => startStormProc(i)));
  const out: Sample[] = [];
  try {
    for (const budget of cfg.budgets) {
      for (const mode of cfg.modes) {
        try {
          const s = await stormOnce(opts, procs, cfg, mode, budget);
          opts.log(`  ${formatStorm(s)}`);
          out.push(s);
        } catch (err) {
          opts.log(`  S9 ${mode}, budget ${budget}: failed: ${(err as Error).message}`);
          out.push(failedSample('S9', variantOf(cfg, mode, budget), 'sluice', 0, (err as Error).message));
        }
      }
    }
  } finally {
    await Promise.all(procs.map((p) => p.exit()));
  }
  if (cfg.costRequests > 0) {
    try {
      const s = await refusalCost(cfg.costRequests, cfg.concurrency);
      opts.log(`  S9 refusal cost: ${s.extra['refusedUs']} us of gateway CPU per 503, ${s.extra['acceptedUs']} us per accepted upgrade; ` +
        `raw uWS ${s.extra['rawRefusedUs']} us per 503, ${s.extra['rawAcceptedUs']} us per upgrade`);
      out.push(s);
    } catch (err) {
      out.push(failedSample('S9', 'refusal cost', 'sluice', 0, (err as Error).message));
    }
  }
  return out;
}

/** A raw upgrade request on a socket from `local`; resolves with the status line's code once the answer's first bytes came, the socket destroyed. */
function oneRequest(port: number, local: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const sock = connect({ host: '127.0.0.1', port, localAddress: local });
    sock.setNoDelay(true);
    sock.once('connect', () => sock.write('GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: sluice.v1\r\n\r\n'));
    sock.once('data', (d: Buffer) => {
      const code = Number(/^HTTP\/1\.1 (\d{3})/.exec(d.toString('latin1'))?.[1] ?? 0);
      sock.destroy();
      resolve(code);
    });
    sock.once('error', reject);
  });
}

/**
 * The gateway's CPU per refused upgrade (WS_UPGRADE_RATE=1: every request
 * after the first 503) and per accepted one (no budget: each a socket,
 * upgraded and welcomed, then dropped by the client), `n` requests each,
 * `concurrency` in flight, from the loopback sources in turn; and the same
 * two on raw uWS (its refusal the same 503 written in its upgrade handler,
 * `UWS_PEER_REFUSE=1`): the floor of this stack, the kernel's accept and
 * close and uWS's HTTP parsing, which no refusal can go below.
 */
async function refusalCost(n: number, concurrency: number): Promise<Sample> {
  const spec = TARGETS['sluice'];
  const perRequest = async (budget: number, target = spec, env: Record<string, string> = { WS_UPGRADE_RATE: String(budget) }):
    Promise<{ us: number; codes: Record<string, number>; wallS: number; cpuS: number }> => {
    const srv = await ServerProc.start(target, 60_000, env);
    try {
      // A warm-up, then the measured requests.
      for (let i = 0; i < 500; i++) await oneRequest(srv.port, SOURCES[i % SOURCES.length]!);
      await sleep(500);
      const codes: Record<string, number> = {};
      const cpu0 = srv.cpuSeconds();
      const t0 = performance.now();
      let next = 0;
      await Promise.all(Array.from({ length: concurrency }, async () => {
        while (next < n) {
          const i = next++;
          const code = await oneRequest(srv.port, SOURCES[i % SOURCES.length]!);
          codes[code] = (codes[code] ?? 0) + 1;
        }
      }));
      const wallS = (performance.now() - t0) / 1000;
      await sleep(500); // the closes of the last sockets
      const cpuS = srv.cpuSeconds() - cpu0;
      return { us: (cpuS / n) * 1e6, codes, wallS, cpuS };
    } finally {
      await srv.stop(10_000);
    }
  };
  const refused = await perRequest(1);
  const accepted = await perRequest(0);
  const rawRefused = await perRequest(0, TARGETS['uws'], { UWS_PEER_REFUSE: '1' });
  const rawAccepted = await perRequest(0, TARGETS['uws'], {});
  const r2 = (v: number): number => Math.round(v * 100) / 100;
  const problems: string[] = [];
  if ((rawRefused.codes['503'] ?? 0) !== n) problems.push(`raw uWS refusing: ${rawRefused.codes['503'] ?? 0}/${n} were 503: ${JSON.stringify(rawRefused.codes)}`);
  if ((rawAccepted.codes['101'] ?? 0) !== n) problems.push(`raw uWS: ${rawAccepted.codes['101'] ?? 0}/${n} were 101: ${JSON.stringify(rawAccepted.codes)}`);
  // At 1/s with a burst of 1: one at once, then one a second while they run.
  if ((refused.codes['503'] ?? 0) < n - 2 - Math.ceil(refused.wallS)) problems.push(`with WS_UPGRADE_RATE=1 only ${refused.codes['503'] ?? 0}/${n} were 503: ${JSON.stringify(refused.codes)}`);
  if ((accepted.codes['101'] ?? 0) !== n) problems.push(`without a budget ${accepted.codes['101'] ?? 0}/${n} were 101: ${JSON.stringify(accepted.codes)}`);
  return {
    scenario: 'S9', variant: 'refusal cost', target: spec.name, repeat: 0, ok: problems.length === 0, ...(problems.length > 0 ? { error: problems.join('; ') } : {}),
    count: n, wallS: refused.wallS + accepted.wallS, serverCpuS: refused.cpuS + accepted.cpuS, clientCpuS: [], serverUtil: NaN, clientUtilMax: NaN, otherUtil: NaN,
    bound: 'none', perSec: NaN, perServerCpuS: NaN,
    extra: {
      requests: n, concurrency, refusedUs: r2(refused.us), acceptedUs: r2(accepted.us), ratio: r2(accepted.us / refused.us),
      rawRefusedUs: r2(rawRefused.us), rawAcceptedUs: r2(rawAccepted.us),
      refusedCodes: JSON.stringify(refused.codes), acceptedCodes: JSON.stringify(accepted.codes),
      refusedPerS: Math.round(n / refused.wallS), acceptedPerS: Math.round(n / accepted.wallS), findings: '',
    },
  };
}

function formatStorm(s: Sample): string {
  if (!s.ok) return `S9 ${s.variant}: FAILED ${s.error ?? ''}`;
  const x = (k: string): number => Number(s.extra[k]);
  return `S9 ${s.variant}: ${x('reconnected')}/${x('clients')} back at B; 99% at ${x('t99Ms').toFixed(0)} ms after SIGTERM ` +
    `(${x('t99FromFirstCloseMs').toFixed(0)} ms after the first close); peak ${x('peakPerS').toFixed(0)}/s per 100 ms, ${x('peak1s')} in 1 s, ` +
    `B's counter ${x('serverPeakPerS').toFixed(0)}/s; B CPU peak ${(x('peakServerCpu') * 100).toFixed(0)}%`;
}

async function stormOnce(opts: RunOptions, procs: StormProc[], cfg: StormConfig, mode: StormMode, budget: number): Promise<Sample> {
  const spec = TARGETS['sluice'];
  const maxMs = drainMaxMs(cfg);
  // One after the other: a gateway with PORT=0 takes a port the kernel just freed and then binds it with SO_REUSEPORT,
  // so two starting at once could end up sharing one port (see the check of the welcoming node below).
  const [aRes] = await Promise.allSettled([
    ServerProc.start(spec, 60_000, { WS_DRAIN_DELAY_MS: String(cfg.delayMs), WS_DRAIN_RATE: String(cfg.rate), WS_DRAIN_MAX_MS: String(maxMs) }),
  ]);
  // B is stopped once the clients have left it: it may close what is left at once.
  const [bRes] = await Promise.allSettled([ServerProc.start(spec, 60_000, { WS_DRAIN_RATE: '1000000', WS_UPGRADE_RATE: String(budget) })]);
  const a = aRes.status === 'fulfilled' ? aRes.value : undefined;
  const b = bRes.status === 'fulfilled' ? bRes.value : undefined;
  try {
    if (a === undefined || b === undefined) {
      throw (aRes.status === 'rejected' ? aRes.reason : (bRes as PromiseRejectedResult).reason) as Error;
    }
    if (a.port === b.port) throw new Error(`nodes A and B got the same port ${a.port}`);
    const urlA = `ws://127.0.0.1:${a.port}/ws`;
    const urlB = `ws://127.0.0.1:${b.port}/ws`;
    const counts = split(cfg.clients, procs.length);
    const tc = performance.now();
    const conn = await Promise.all(procs.map((p, i) => p.call<ConnectReply>({
      op: 'connect', mode, urlA, urlB, count: counts[i]!, idBase: counts.slice(0, i).reduce((x, y) => x + y, 0),
      sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 60_000,
    }, 90_000)));
    const ready = conn.reduce((x, c) => x + c.ready, 0);
    const onA = conn.reduce((x, c) => x + c.onA, 0);
    const connectReasons: Record<string, number> = {};
    for (const c of conn) for (const [k, v] of Object.entries(c.reasons)) connectReasons[k] = (connectReasons[k] ?? 0) + v;
    const welcomedBy: Record<string, number> = {};
    for (const c of conn) for (const [k, v] of Object.entries(c.nodes)) welcomedBy[k] = (welcomedBy[k] ?? 0) + v;
    const nodeA = nodeIdOf(a);
    const strangers = Object.entries(welcomedBy).filter(([k]) => k !== nodeA);
    opts.log(`  S9 ${mode}, budget ${budget === 0 ? 'off' : budget}: ${onA}/${cfg.clients} clients on A in ${((performance.now() - tc) / 1000).toFixed(1)} s; WS_DRAIN_MAX_MS=${maxMs}`);
    await sleep(1000);

    // What A holds just before the signal: every client should still be there.
    const aText = await readMetrics(a.adminPort);
    const aHeld = metricSum(aText, 'sluice_connected_sockets');
    const aClosed = Object.fromEntries(Object.entries(metricByLabel(aText, 'sluice_clients_closed_total', 'reason')).filter(([, v]) => v > 0));
    const aWarnings = a.logs.map((l) => JSON.stringify(l)).filter((l) => /"level":"(warn|error|fatal)"/.test(l) && !l.includes('WS_AUTH=none'));

    // SIGTERM A, then poll B every 100 ms until the clients are back.
    const accepted = (text: string): number => metricByLabel(text, 'sluice_upgrades_total', 'outcome')['accepted'] ?? 0;
    const b0Text = await readMetrics(b.adminPort);
    const accepted0 = accepted(b0Text);
    const busy0 = machineBusySeconds();
    const gen0 = procs.map((p) => p.cpuSeconds());
    const cpuB0 = b.cpuSeconds();
    const cpuA0 = a.cpuSeconds();
    const t0 = performance.now();
    const t0Epoch = nowMs();
    process.kill(a.pid, 'SIGTERM');
    const polls: Poll[] = [{ ms: 0, accepted: 0, cpuS: 0 }];
    const target99 = Math.ceil(0.99 * onA);
    let reached99At: number | undefined;
    let reachedAllAt: number | undefined;
    let pollErrors = 0;
    for (let i = 0; i < cfg.maxWaitMs / 50; i++) {
      const started = performance.now();
      try {
        const text = await readMetrics(b.adminPort);
        const ms = performance.now() - t0;
        // The counter of a shard that did not answer in time drops out of the sum: keep the highest seen.
        const got = Math.max(accepted(text) - accepted0, polls[polls.length - 1]!.accepted);
        polls.push({ ms, accepted: got, cpuS: b.cpuSeconds() - cpuB0 });
        if (got >= target99 && reached99At === undefined) reached99At = ms;
        if (got >= onA && reachedAllAt === undefined) reachedAllAt = ms;
        // A second more after the last one (B's CPU and the 1 s rates need it), 2 s after 99%, or the limit.
        if ((reachedAllAt !== undefined && ms - reachedAllAt >= 1000) || (reached99At !== undefined && ms - reached99At >= TAIL_MS) || ms >= cfg.maxWaitMs) break;
      } catch {
        pollErrors++;
        if (performance.now() - t0 >= cfg.maxWaitMs) break;
      }
      await sleep(Math.max(0, BUCKET_MS - (performance.now() - started)));
    }
    const wallS = (performance.now() - t0) / 1000;
    const busy1 = machineBusySeconds();
    const gen1 = procs.map((p) => p.cpuSeconds());
    const cpuA = a.alive ? a.cpuSeconds() - cpuA0 : NaN;
    const endText = await readMetrics(b.adminPort).catch(() => '');
    const aExited = await a.waitExit(maxMs + 20_000);
    const results = await Promise.all(procs.map((p) => p.call<ResultsReply>({ op: 'results' }, 30_000)));
    await Promise.all(procs.map((p) => p.call({ op: 'reset' }, 30_000)));

    // ---- analysis: times in ms after SIGTERM ----
    const rel = (xs: number[]): number[] => xs.map((t) => t - t0Epoch).sort((x, y) => x - y);
    const arrivals = rel(results.flatMap((r) => r.arrivals));
    const closes = rel(results.flatMap((r) => r.closesAtA));
    const sum = (f: (r: ResultsReply) => number): number => results.reduce((x, r) => x + f(r), 0);
    const merge = (f: (r: ResultsReply) => Record<string, number>): Record<string, number> => {
      const m: Record<string, number> = {};
      for (const r of results) for (const [k, v] of Object.entries(f(r))) m[k] = (m[k] ?? 0) + v;
      return m;
    };
    const closeCodes = merge((r) => r.closeCodes);
    const failures = merge((r) => r.failures);
    const socketErrors = merge((r) => r.errors);
    const retry = results.flatMap((r) => r.retryAfterMs);
    const planned = results.flatMap((r) => r.plannedMs);
    const firstClose = closes[0] ?? NaN;
    const lastClose = closes[closes.length - 1] ?? NaN;
    const t50 = timeToShare(arrivals, onA, 0.5);
    const t99 = timeToShare(arrivals, onA, 0.99);
    const tAll = arrivals.length >= onA ? arrivals[arrivals.length - 1]! : NaN;
    const endMs = Math.ceil(Math.max(wallS * 1000, arrivals[arrivals.length - 1] ?? 0) / BUCKET_MS) * BUCKET_MS + BUCKET_MS;
    const per100 = bucketCounts(arrivals, 0, endMs, BUCKET_MS);
    const closes100 = bucketCounts(closes, 0, endMs, BUCKET_MS);
    const server100 = bucketGrowth(series(polls, 'accepted'), 0, per100.length * BUCKET_MS, BUCKET_MS);
    const timeline: StormBucket[] = per100.map((c, i) => ({ t: i * BUCKET_MS, arrivals: c, server: server100[i] ?? 0, closes: closes100[i] ?? 0 }));
    const refusedAtB = metricByLabel(endText, 'sluice_upgrades_total', 'outcome');
    const refusedB0 = metricByLabel(b0Text, 'sluice_upgrades_total', 'outcome');
    const refusals: Record<string, number> = {};
    for (const [k, v] of Object.entries(refusedAtB)) if (k !== 'accepted' && v - (refusedB0[k] ?? 0) > 0) refusals[k] = v - (refusedB0[k] ?? 0);
    const stallText = /^sluice_eventloop_stall_max_seconds\s+(\S+)/m.exec(endText);
    const serverCpuS = polls[polls.length - 1]!.cpuS;
    const clientCpuS = gen1.map((g, i) => g - (gen0[i] ?? 0));

    const problems: string[] = [];
    if (ready < cfg.clients || onA < cfg.clients) problems.push(`only ${onA}/${cfg.clients} clients connected to A: ${JSON.stringify(connectReasons)}`);
    if (strangers.length > 0) {
      problems.push(`${strangers.reduce((x, [, v]) => x + v, 0)} clients were welcomed on A's port ${a.port} by other gateway processes ` +
        `(${strangers.map(([k, v]) => `node ${k}: ${v}`).join(', ')}; A is ${nodeA}): another process shares the port (SO_REUSEPORT), the run is void`);
    }
    if (!aExited) problems.push('node A did not exit within WS_DRAIN_MAX_MS + 20 s');
    else if (a.exitCode !== 0) problems.push(`node A exited with ${String(a.exitCode)} (signal ${String(a.exitSignal)})`);
    if (!Number.isFinite(t99)) problems.push(`only ${arrivals.length}/${onA} back at B within ${cfg.maxWaitMs} ms`);
    const findings: string[] = [];
    if ((closeCodes['1012'] ?? 0) !== closes.length) {
      findings.push(`not every close by A was 1012: ${JSON.stringify(closeCodes)} (${results.flatMap((r) => r.odd).slice(0, 5).join('; ')}; ` +
        `A is node ${nodeA} on port ${a.port}, B node ${nodeIdOf(b)} on port ${b.port})`);
    }
    if (aHeld !== onA || Object.keys(aClosed).length > 0) {
      findings.push(`before SIGTERM A held ${aHeld} sockets for ${onA} clients; A's closes by reason: ${JSON.stringify(aClosed)}`);
    }
    if (aWarnings.length > 0) findings.push(`A logged: ${aWarnings.join(' | ').slice(0, 600)}`);
    if (Object.keys(refusals).length > 0) findings.push(`B refused upgrades: ${JSON.stringify(refusals)}`);
    if (Object.keys(failures).length > 0) findings.push(`failed attempts after the drop: ${JSON.stringify(failures)}`);
    if (Object.keys(socketErrors).length > 0) findings.push(`socket errors: ${JSON.stringify(socketErrors)}`);
    if (pollErrors > 0) findings.push(`${pollErrors} polls of B's /metrics failed`);

    const r2 = (v: number): number => Math.round(v * 100) / 100;
    return {
      scenario: 'S9', variant: variantOf(cfg, mode, budget), target: spec.name, repeat: 0,
      ok: problems.length === 0, ...(problems.length > 0 ? { error: problems.join('; ') } : {}),
      count: arrivals.length, wallS, serverCpuS, clientCpuS,
      serverUtil: serverCpuS / wallS,
      clientUtilMax: Math.max(...clientCpuS.map((c) => c / wallS)),
      otherUtil: otherUtil(busy1 - busy0, serverCpuS + (Number.isFinite(cpuA) ? cpuA : 0), clientCpuS, wallS),
      bound: 'none',
      perSec: Number.isFinite(t99) ? Math.ceil(0.99 * onA) / ((t99 - firstClose) / 1000) : NaN,
      perServerCpuS: serverCpuS > 0 ? arrivals.length / serverCpuS : NaN,
      extra: {
        mode, budget, overBudget: refusals['over_budget'] ?? 0, clients: cfg.clients, onA, procs: procs.length, cores: availableParallelism(), rate: cfg.rate, delayMs: cfg.delayMs, drainMaxMs: maxMs,
        closes: closes.length, closeCodes: JSON.stringify(closeCodes), firstCloseMs: r2(firstClose), lastCloseMs: r2(lastClose),
        closesPeakPer100: Math.max(0, ...closes100),
        reconnected: arrivals.length, notBack: sum((r) => r.notBack), stillOnA: sum((r) => r.stillOnA),
        firstArrivalMs: r2(arrivals[0] ?? NaN), t50Ms: r2(t50), t99Ms: r2(t99), tAllMs: r2(tAll), t99FromFirstCloseMs: r2(t99 - firstClose),
        peakPer100: Math.max(0, ...per100), peakPerS: Math.max(0, ...per100) * (1000 / BUCKET_MS), peak1s: peakInWindow(arrivals, 1000),
        serverPeakPerS: Math.round(peakRate(series(polls, 'accepted'), BUCKET_MS)), serverPeak1s: Math.round(peakRate(series(polls, 'accepted'), 1000)),
        serverAccepted: polls[polls.length - 1]!.accepted, polls: polls.length, pollErrors,
        attemptsA: sum((r) => r.attemptsA), attemptsB: sum((r) => r.attemptsB),
        failures: JSON.stringify(failures), socketErrors: JSON.stringify(socketErrors), refusalsAtB: JSON.stringify(refusals),
        retrySeen: retry.length, retryMinMs: retry.length > 0 ? Math.min(...retry) : NaN, retryMaxMs: retry.length > 0 ? Math.max(...retry) : NaN,
        plannedMinMs: planned.length > 0 ? Math.min(...planned) : NaN, plannedMedianMs: median(planned), plannedMaxMs: planned.length > 0 ? Math.max(...planned) : NaN,
        peakServerCpu: r2(peakRate(series(polls, 'cpuS'), 1000)), serverCpuS: r2(serverCpuS),
        stallMaxMsB: stallText === null ? NaN : r2(Number(stallText[1]) * 1000),
        welcomedBy: JSON.stringify(welcomedBy), aExitCode: a.exitCode ?? -1, aHeldBeforeSigterm: aHeld, aClosedBeforeSigterm: JSON.stringify(aClosed),
        findings: findings.join('; '),
      },
      timeline,
    };
  } finally {
    await Promise.all(procs.map((p) => p.call({ op: 'reset' }, 30_000).catch(() => undefined)));
    await Promise.all([a, b].map((s) => (s?.alive === true ? s.stop(10_000) : undefined)));
  }
}

if (process.argv.includes('--storm-child') && process.argv[1] !== undefined && pathToFileURL(process.argv[1]).href === import.meta.url) childMain();
