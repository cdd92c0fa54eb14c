import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ownerOf, topicKey } from '@sluice/core';
import { connect, type Socket } from 'node:net';
import { once } from 'node:events';
import { Client, clientsOnShards, eventually, metricTypes, metricValue, parseMetrics, rawUpgrade, runUntilExit, startGateway } from './harness.ts';

describe('start', () => {
  test('a bad environment stops the start with one message naming every bad variable', async () => {
    const r = await runUntilExit({ PORT: 'eighty', WS_MAX_MESSAGES: '0', LOG_LEVEL: 'loud' });
    assert.notEqual(r.code, 0);
    for (const name of ['PORT="eighty"', 'WS_MAX_MESSAGES="0"', 'LOG_LEVEL="loud"']) assert.ok(r.stderr.includes(name), r.stderr);
    assert.equal(r.stderr.match(/Invalid configuration/g)?.length, 1);
  });

  test('where no uWS build loads natively, the start is refused with one message naming Node, glibc and what to install', async () => {
    // --no-addons makes every binary fail to load, on every runtime, as a
    // missing glibc symbol does on the wrong system (Node 24 on Debian 12).
    const r = await runUntilExit({ NODE_OPTIONS: '--no-addons' });
    assert.equal(r.code, 1);
    const lines = r.stderr.trim().split('\n');
    assert.match(lines[0]!, new RegExp(`^sluice: no uWebSockets.js build loads natively on Node ${process.version.replace(/\./g, '\\.')} `));
    assert.match(lines[0]!, /with glibc \d+\.\d+/);
    for (const build of ['20.30.0', '20.57.0']) assert.ok(lines.some((l) => l.startsWith(`  - uWS ${build} `) && /does not load|ships no binary/.test(l)), r.stderr);
    assert.match(r.stderr, /Node 20 on glibc 2\.27 or newer .*Node 22 or 24 on glibc 2\.38 or newer/);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
    assert.equal(r.stdout, '', 'nothing started, nothing logged');
  });

  test('the start says which uWS build it loaded, in a log line and in sluice_build_info', async () => {
    const gw = await startGateway();
    const line = gw.logs.find((l) => typeof l['uws'] === 'string' && typeof l['cork'] === 'string');
    assert.ok(line, 'a log line names the build');
    const expected = process.versions.modules === '115' ? '20.30.0' : '20.57.0';
    assert.equal(line['uws'], expected);
    assert.equal(line['node'], process.version);
    assert.equal(line['msg'], `uWebSockets.js ${expected} loaded natively on Node ${process.version}`);
    const text = await gw.metrics();
    const info = parseMetrics(text).filter((s) => s.name === 'sluice_build_info');
    assert.equal(info.length, 1, text);
    assert.equal(info[0]!.labels['node'], process.version);
    assert.equal(info[0]!.labels['uws'], expected);
    assert.equal(info[0]!.value, 1);
    assert.equal(await gw.stop(), 0);
  });

  test('an unknown WS_ variable is warned about with a suggestion, and the gateway starts', async () => {
    const gw = await startGateway({ WS_MAX_MESAGES: '5' });
    assert.ok(gw.logs.some((l) => l.level === 'warn' && String(l.msg).includes('WS_MAX_MESSAGES')));
    assert.equal(await gw.stop(), 0);
  });
});

describe('outbound limits at start', () => {
  test('a soft limit above half the byte cap is lowered to half, and the start says so', async () => {
    const gw = await startGateway({ WS_MAX_BUFFERED_BYTES: '100000', WS_SLOW_CLIENT_BUFFER_BYTES: '80000' });
    const line = gw.logs.find((l) => String(l.msg).includes('WS_SLOW_CLIENT_BUFFER_BYTES lowered'));
    assert.ok(line, 'logged');
    assert.equal(line.used, 50000);
    assert.equal(line.level, 'warn');
    assert.equal(await gw.stop(), 0);
  });
});

describe('stop', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    test(`${signal} closes every socket with 1012 and a retry hint in range, and exits 0`, async () => {
      const gw = await startGateway({ WS_RETRY_AFTER_MIN_MS: '2000', WS_RETRY_AFTER_MAX_MS: '3000' });
      const clients = await clientsOnShards(gw.url(), [0, 1]);
      await clients[0]!.request({ type: 'join', topic: 'stop:t' });
      const code = await gw.stop(signal);
      assert.equal(code, 0, gw.stderr());
      for (const c of clients) {
        const closed = await c.closedBy();
        assert.equal(closed.code, 1012);
        const reason = JSON.parse(closed.reason) as { reason: string; retryAfterMs: number };
        assert.equal(reason.reason, 'unavailable');
        assert.ok(reason.retryAfterMs >= 2000 && reason.retryAfterMs <= 3000, String(reason.retryAfterMs));
      }
      assert.doesNotMatch(gw.stderr(), /Assertion failed|uv loop|Aborted|Segmentation/);
    });
  }
});

describe('shard crash', () => {
  test('a crashed shard is logged and restarted; the other shard keeps its sockets', async () => {
    const gw = await startGateway({ SLUICE_TEST_HOOKS: '1', WS_MAX_MESSAGES: '1000' });
    const [a, b] = await clientsOnShards(gw.url(), [0, 1]);
    // One topic owned by the shard that crashes, one by the shard that lives.
    const owned = (shard: number): string => {
      for (let i = 0; ; i++) if (ownerOf(topicKey('default', `crash:${i}`), 2) === shard) return `crash:${i}`;
    };
    const topics = [owned(0), owned(1)];
    // A topic is its first toucher's: a makes the first shard 0's, b the second shard 1's.
    await a!.request({ type: 'join', topic: topics[0]! });
    for (const t of topics) await b!.request({ type: 'join', topic: t });
    a!.send({ type: 'debug.crash' });
    const closed = await a!.closedBy();
    assert.notEqual(closed.code, 1000);
    await eventually(() => gw.logs.some((l) => l.msg === 'shard restarted'));
    assert.ok(gw.logs.some((l) => l.level === 'error' && l.msg === 'shard crashed; restarting it' && l.shard === 0));
    // b never noticed: same socket, still subscribed, served by a publish from the restarted shard.
    const [a2] = await clientsOnShards(gw.url(), [0]);
    assert.equal((a2!.welcome.connectionId as string).split('.')[2], '1', 'generation 1 of shard 0');
    for (const t of topics) {
      const ack = await a2!.request({ type: 'publish', topic: t, data: `after:${t}` });
      assert.equal(ack.status, 'ok');
      assert.equal((await b!.next((f) => f.type === 'event' && f.topic === t)).data, `after:${t}`);
      // and the other way round: b publishes, a2 (restarted shard) receives
      await a2!.request({ type: 'join', topic: t });
      await b!.request({ type: 'publish', topic: t, data: `back:${t}` });
      assert.equal((await a2!.next((f) => f.type === 'event' && f.topic === t)).data, `back:${t}`);
    }
    assert.equal(await metricValue(gw, 'sluice_shard_restarts_total'), 1);
    a2!.close();
    b!.close();
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('a crash while handshakes are half-received costs the shard, not the process', async () => {
    const gw = await startGateway({ SLUICE_TEST_HOOKS: '1' });
    // Connections that opened TCP or sent half a request: uWS holds them, JavaScript cannot reach them.
    const idle: Socket[] = [];
    for (let i = 0; i < 16; i++) {
      const s = connect(gw.port, '127.0.0.1');
      await once(s, 'connect');
      if (i % 2 === 0) s.write('GET /ws HTTP/1.1\r\nHost: x\r\n');
      s.on('error', () => {});
      idle.push(s);
    }
    const [a] = await clientsOnShards(gw.url(), [0]);
    a!.send({ type: 'debug.crash' });
    await a!.closedBy();
    await eventually(() => gw.logs.some((l) => l.msg === 'shard restarted'));
    const [again] = await clientsOnShards(gw.url(), [0]);
    assert.equal((await again!.request({ type: 'ping' })).type, 'pong');
    assert.equal(gw.proc.exitCode, null, 'the process lives');
    again!.close();
    for (const s of idle) s.destroy();
    assert.equal(await gw.stop(), 0, gw.stderr());
  });
});

describe('HTTP', () => {
  test('health on both ports; readiness and upgrades fail at WS_MAX_SOCKETS and come back below it', async () => {
    const gw = await startGateway({ WS_MAX_SOCKETS: '2' });
    const pub = `http://127.0.0.1:${gw.port}`;
    for (const base of [pub, gw.admin('')]) {
      assert.equal((await fetch(`${base}/health/live`)).status, 200);
      assert.equal((await fetch(`${base}/health/ready`)).status, 200);
    }
    const c1 = await Client.connect(gw.url());
    const c2 = await Client.connect(gw.url());
    for (const base of [pub, gw.admin('')]) assert.equal((await fetch(`${base}/health/ready`)).status, 503);
    const refused = await rawUpgrade(gw.port);
    assert.equal(refused.status, 503);
    assert.match(refused.headers['retry-after'] ?? '', /^\d+$/);
    const body = JSON.parse(refused.body) as { reason: string; retryAfterMs: number };
    assert.equal(body.reason, 'unavailable');
    assert.ok(body.retryAfterMs >= 1000 && body.retryAfterMs <= 6000);
    c1.close();
    await eventually(async () => (await fetch(`${pub}/health/ready`)).status === 200);
    assert.equal((await fetch(gw.admin('/health/ready'))).status, 200);
    c2.close();
    assert.equal(await gw.stop(), 0);
  });

  test('HTTP/1.0 on the public port: uWS 20.57 answers 505, uWS 20.30 leaves it unanswered; the admin port answers it on both', async () => {
    const gw = await startGateway();
    const uws = gw.logs.find((l) => typeof l['uws'] === 'string')?.['uws'];
    /** The status line of the answer to `head`, or '' when none came within 1 s. */
    const statusLine = (port: number, head: string): Promise<string> => new Promise((resolve, reject) => {
      const c = connect(port, '127.0.0.1', () => c.write(head));
      let got = '';
      c.on('data', (d: Buffer) => (got += d.toString('latin1')));
      c.on('error', reject);
      const done = (): void => {
        c.destroy();
        resolve(got.split('\r\n')[0] ?? '');
      };
      c.on('close', done);
      setTimeout(done, 1000);
    });
    const http10 = 'GET /health/live HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n';
    assert.equal(await statusLine(gw.port, http10), uws === '20.57.0' ? 'HTTP/1.1 505 HTTP Version Not Supported' : '');
    assert.equal(await statusLine(gw.adminPort, http10), 'HTTP/1.1 200 OK');
    assert.equal(await statusLine(gw.port, 'GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'), 'HTTP/1.1 200 OK');
    assert.equal(await gw.stop(), 0);
  });

  test('POST /v1/publish needs ADMIN_TOKEN when set, validates its body, and delivers', async () => {
    const gw = await startGateway({ ADMIN_TOKEN: 's3cret-token' });
    const sub = await Client.connect(gw.url());
    await sub.request({ type: 'join', topic: 'admin:t' });
    const post = (body: string, token?: string): Promise<Response> =>
      fetch(gw.admin('/v1/publish'), { method: 'POST', body, headers: token ? { authorization: `Bearer ${token}` } : {} });
    assert.equal((await post('{"topic":"admin:t","data":1}')).status, 401);
    assert.equal((await post('{"topic":"admin:t","data":1}', 'wrong')).status, 401);
    const bad = await post('{"topic":"no spaces","data":1}', 's3cret-token');
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { reason: string }).reason, 'bad_request');
    assert.equal((await post('not json', 's3cret-token')).status, 400);
    const ok = await post('{"topic":"admin:t","data":{"n":1},"idempotencyKey":"srv-1"}', 's3cret-token');
    assert.equal(ok.status, 200);
    const { id } = (await ok.json()) as { id: string };
    assert.deepEqual(await sub.next((f) => f.type === 'event'), { type: 'event', topic: 'admin:t', id, data: { n: 1 } });
    const dup = await post('{"topic":"admin:t","data":{"n":1},"idempotencyKey":"srv-1"}', 's3cret-token');
    assert.deepEqual(await dup.json(), { id, duplicate: true });
    // The token never reaches the logs.
    assert.ok(!JSON.stringify(gw.logs).includes('s3cret-token'));
    sub.close();
    assert.equal(await gw.stop(), 0);
  });

  test('/metrics aggregates every shard: connected sockets and frames in', async () => {
    const gw = await startGateway();
    const clients = await clientsOnShards(gw.url(), [0, 1]);
    for (const c of clients) await c.request({ type: 'ping' });
    assert.equal(await metricValue(gw, 'sluice_connected_sockets'), 2);
    assert.ok((await metricValue(gw, 'sluice_frames_in_total')) >= 2);
    const text = await gw.metrics();
    assert.equal(metricTypes(text).get('sluice_limit_rejections_total'), 'counter');
    assert.ok(parseMetrics(text).some((s) => s.name === 'process_resident_memory_bytes'));
    for (const c of clients) c.close();
    assert.equal(await gw.stop(), 0);
  });
});

describe('heartbeat', () => {
  test('the server pings; a socket that answers stays open, one that sends nothing is closed', async () => {
    // WS_HEARTBEAT_MS=2000 gives uWS its shortest idle timeout (8 s).
    const gw = await startGateway({ WS_HEARTBEAT_MS: '2000', WS_WORKERS: '1' });
    const WebSocket = (await import('ws')).default;
    const open = (autoPong: boolean): Promise<{ ws: InstanceType<typeof WebSocket>; pings: number[]; closed: Promise<number> }> =>
      new Promise((resolve) => {
        const ws = new WebSocket(gw.url(), { autoPong });
        const pings: number[] = [];
        ws.on('ping', () => pings.push(Date.now()));
        const closed = new Promise<number>((r) => ws.on('close', (code) => r(code)));
        ws.once('message', () => resolve({ ws, pings, closed }));
      });
    const answering = await open(true);
    const silent = await open(false);
    const started = Date.now();
    const code = await Promise.race([silent.closed, new Promise<string>((r) => setTimeout(() => r('still open'), 20_000))]);
    assert.notEqual(code, 'still open');
    assert.ok(silent.pings.length >= 1, 'the server pinged before giving up');
    assert.ok(Date.now() - started >= 4000, 'not closed before it could have answered');
    assert.equal(answering.ws.readyState, WebSocket.OPEN);
    assert.ok(answering.pings.length >= 1);
    answering.ws.close();
    assert.equal(await gw.stop(), 0);
  });
});
