// The inspector protocol over its WebSocket, to the gateway's main thread
// and through it (the NodeWorker domain) to each shard thread: what the
// tools in src/tools/ read shards with (heaps, heap snapshots, CPU
// profiles). V8's --cpu-prof does not reach piscina's worker threads; this
// does.

import { once } from 'node:events';
import WebSocket from 'ws';
import { type Gateway, startGateway } from '@sluice/gateway/testing';

/**
 * Starts the gateway (`entry`: its build or its sources, run in apps/gateway)
 * with the inspector on a free port and the S4 environment (per-socket
 * window lifted) under `env`, and connects to it and to each of its
 * `workers` shards.
 */
export async function startInspected(workers: number, entry: readonly string[], env: Record<string, string> = {}): Promise<{ gw: Gateway; insp: Inspector }> {
  let url: string | undefined;
  let gotUrl: () => void = () => {};
  const urlSeen = new Promise<void>((r) => { gotUrl = r; });
  const gw = await startGateway({ WS_WORKERS: String(workers), WS_MAX_MESSAGES: '1000000', ...env }, {
    raiseFileLimit: true, timeoutMs: 60_000,
    command: [process.execPath, '--inspect=127.0.0.1:0', ...entry],
    onStderr: (line) => {
      const m = /ws:\/\/\S+/.exec(line);
      if (m !== null && url === undefined) { url = m[0]; gotUrl(); }
    },
  });
  await urlSeen;
  const insp = await Inspector.open(url!);
  for (let i = 0; i < 50 && insp.workers.length < workers; i++) await new Promise((r) => setTimeout(r, 100));
  return { gw, insp };
}

interface Pending { resolve: (v: unknown) => void; reject: (e: Error) => void }

/** One inspector connection to the gateway's main thread, and through it to each worker (NodeWorker domain). */
export class Inspector {
  private id = 0;
  private readonly pending = new Map<number, Pending>();
  private readonly workerPending = new Map<string, Map<number, Pending>>();
  private readonly chunks = new Map<string, string[]>();
  readonly workers: string[] = [];

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (raw) => {
      const m = JSON.parse(raw.toString()) as { id?: number; method?: string; params?: Record<string, unknown>; result?: unknown; error?: { message: string } };
      if (m.id !== undefined) this.settle(this.pending, m);
      else if (m.method === 'NodeWorker.attachedToWorker') this.workers.push(m.params!.sessionId as string);
      else if (m.method === 'NodeWorker.receivedMessageFromWorker') {
        const session = m.params!.sessionId as string;
        const inner = JSON.parse(m.params!.message as string) as typeof m;
        if (inner.id !== undefined) this.settle(this.workerPending.get(session)!, inner);
        else if (inner.method === 'HeapProfiler.addHeapSnapshotChunk') this.chunks.get(session)?.push(inner.params!.chunk as string);
      }
    });
  }

  static async open(url: string): Promise<Inspector> {
    const ws = new WebSocket(url);
    await once(ws, 'open');
    const insp = new Inspector(ws);
    await insp.call('NodeWorker.enable', { waitForDebuggerOnStart: false });
    return insp;
  }

  private settle(map: Map<number, Pending>, m: { id?: number; result?: unknown; error?: { message: string } }): void {
    const p = map.get(m.id!);
    map.delete(m.id!);
    if (m.error !== undefined) p?.reject(new Error(m.error.message));
    else p?.resolve(m.result);
  }

  call(method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    const id = ++this.id;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  callWorker(session: string, method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    const id = ++this.id;
    let map = this.workerPending.get(session);
    if (map === undefined) this.workerPending.set(session, map = new Map());
    const p = new Promise((resolve, reject) => map.set(id, { resolve, reject }));
    void this.call('NodeWorker.sendMessageToWorker', { sessionId: session, message: JSON.stringify({ id, method, params }) });
    return p;
  }

  /** Full GC, then the heap in use, per worker. */
  async heaps(): Promise<number[]> {
    const out: number[] = [];
    for (const s of this.workers) {
      await this.callWorker(s, 'HeapProfiler.collectGarbage');
      await this.callWorker(s, 'HeapProfiler.collectGarbage');
      const u = await this.callWorker(s, 'Runtime.getHeapUsage') as { usedSize: number; totalSize: number };
      out.push(u.usedSize);
    }
    return out;
  }

  async snapshot(session: string): Promise<string> {
    this.chunks.set(session, []);
    await this.callWorker(session, 'HeapProfiler.enable');
    await this.callWorker(session, 'HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    const text = this.chunks.get(session)!.join('');
    this.chunks.delete(session);
    return text;
  }

  /** Starts V8's sampling profiler in every worker (`intervalUs` between samples), and in the main thread too with `main`. */
  async startProfiles(intervalUs = 100, main = false): Promise<void> {
    if (main) {
      await this.call('Profiler.enable');
      await this.call('Profiler.setSamplingInterval', { interval: intervalUs });
      await this.call('Profiler.start');
    }
    for (const s of this.workers) {
      await this.callWorker(s, 'Profiler.enable');
      await this.callWorker(s, 'Profiler.setSamplingInterval', { interval: intervalUs });
      await this.callWorker(s, 'Profiler.start');
    }
  }

  /** Stops the profilers of startProfiles: one profile (`.cpuprofile` JSON) per worker, in the order of `workers`, then the main thread's with `main`. */
  async stopProfiles(main = false): Promise<CpuProfile[]> {
    const out: CpuProfile[] = [];
    for (const s of this.workers) out.push((await this.callWorker(s, 'Profiler.stop') as { profile: CpuProfile }).profile);
    if (main) out.push((await this.call('Profiler.stop') as { profile: CpuProfile }).profile);
    return out;
  }

  /** Starts V8's sampling heap profiler in every worker: an allocation sampled every `intervalBytes` on average. */
  async startAllocations(intervalBytes = 4096): Promise<void> {
    for (const s of this.workers) {
      await this.callWorker(s, 'HeapProfiler.enable');
      await this.callWorker(s, 'HeapProfiler.startSampling', { samplingInterval: intervalBytes, includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: true });
    }
  }

  /** Stops startAllocations: bytes allocated per function (sampled), per worker. */
  async stopAllocations(): Promise<Map<string, number>[]> {
    const out: Map<string, number>[] = [];
    for (const s of this.workers) {
      const { profile } = await this.callWorker(s, 'HeapProfiler.stopSampling') as { profile: { head: AllocNode } };
      const bytes = new Map<string, number>();
      const walk = (n: AllocNode): void => {
        const fn = frameName(n.callFrame);
        bytes.set(fn, (bytes.get(fn) ?? 0) + n.selfSize);
        for (const c of n.children) walk(c);
      };
      walk(profile.head);
      out.push(bytes);
    }
    return out;
  }

  close(): void {
    this.ws.close();
  }
}

interface AllocNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: AllocNode[];
}

/** A function as the profiles name it: its name and where it is (the repo's folders kept, the rest of the path cut). */
function frameName(f: { functionName: string; url: string; lineNumber: number }): string {
  const file = f.url === '' ? '' : ` ${f.url.replace(/^.*\/(apps|packages|node_modules)\//, '$1/')}:${f.lineNumber + 1}`;
  return `${f.functionName === '' ? '(anonymous)' : f.functionName}${file}`;
}

/** V8's CPU profile (`Profiler.stop`), the fields read here. */
export interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** Self and inclusive sample counts per function (name and place), and the total. */
export function profileShares(p: CpuProfile): { total: number; rows: { fn: string; self: number; incl: number }[] } {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const nameOf = (id: number): string => frameName(byId.get(id)!.callFrame);
  const self = new Map<string, number>();
  const incl = new Map<string, number>();
  for (const id of p.samples) {
    const leaf = nameOf(id);
    self.set(leaf, (self.get(leaf) ?? 0) + 1);
    // Inclusive: each function once per sample, however often it recurs on the stack.
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const fn = nameOf(at);
      if (seen.has(fn)) continue;
      seen.add(fn);
      incl.set(fn, (incl.get(fn) ?? 0) + 1);
    }
  }
  const rows = [...incl.entries()].map(([fn, n]) => ({ fn, self: self.get(fn) ?? 0, incl: n }));
  return { total: p.samples.length, rows };
}

