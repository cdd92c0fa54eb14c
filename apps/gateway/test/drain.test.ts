/** The paced drain of a deploy: readiness first, then 1012 closes at a steady rate. */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, type Gateway, metricValue, startGateway } from './harness.ts';

async function many(gw: Gateway, n: number): Promise<{ c: Client; closedAt: () => number | undefined }[]> {
  const out = [];
  for (let i = 0; i < n; i++) {
    const c = await Client.connect(gw.url());
    let at: number | undefined;
    c.ws.on('close', () => (at = Date.now()));
    out.push({ c, closedAt: () => at });
  }
  return out;
}

async function status(url: string): Promise<number | string> {
  try {
    return (await fetch(url)).status;
  } catch {
    return 'refused';
  }
}

describe('drain', () => {
  test('SIGTERM: readiness fails at once, closes wait for the delay, then come at WS_DRAIN_RATE with 1012; exit 0', async () => {
    const gw = await startGateway({ WS_DRAIN_DELAY_MS: '600', WS_DRAIN_RATE: '20', WS_DRAIN_MAX_MS: '20000' });
    const clients = await many(gw, 12);
    const signalled = Date.now();
    gw.proc.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(await status(gw.admin('/health/ready')), 503);
    assert.equal(await status(`http://127.0.0.1:${gw.port}/health/ready`), 503);
    assert.equal(await status(gw.admin('/health/live')), 200);
    assert.ok(clients.every((x) => x.closedAt() === undefined), 'nothing closed during the delay');
    const code = await gw.stop();
    assert.equal(code, 0, gw.stderr());
    const times = clients.map((x) => x.closedAt()!).sort((a, b) => a - b);
    assert.ok(times[0]! - signalled >= 550, `first close ${times[0]! - signalled} ms after SIGTERM`);
    // 12 sockets at 20 per second: about 550 ms from the first close to the last (the first tick closes one at once).
    const spread = times.at(-1)! - times[0]!;
    assert.ok(spread >= 350, `closes spread over ${spread} ms, not all at once`);
    for (const { c } of clients) {
      const closed = await c.closedBy();
      assert.equal(closed.code, 1012);
      const r = JSON.parse(closed.reason) as { reason: string; retryAfterMs: number };
      assert.equal(r.reason, 'unavailable');
      assert.ok(r.retryAfterMs >= 1000 && r.retryAfterMs <= 6000);
    }
    const started = gw.logs.find((l) => l.msg === 'drain started');
    const finished = gw.logs.find((l) => l.msg === 'drain finished');
    assert.equal(started?.sockets, 12);
    assert.equal(finished?.drained, 12);
  });

  test('POST /admin/drain drains the same way; the admin port answers throughout', async () => {
    const gw = await startGateway({ WS_DRAIN_DELAY_MS: '200', WS_DRAIN_RATE: '50', ADMIN_TOKEN: 'tok' });
    const clients = await many(gw, 4);
    assert.equal((await fetch(gw.admin('/admin/drain'), { method: 'POST' })).status, 401);
    const res = await fetch(gw.admin('/admin/drain'), { method: 'POST', headers: { authorization: 'Bearer tok' } });
    assert.equal(res.status, 202);
    assert.equal(await status(gw.admin('/health/ready')), 503);
    assert.equal(await metricValue(gw, 'sluice_draining'), 1);
    for (const { c } of clients) assert.equal((await c.closedBy(10_000)).code, 1012);
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('new upgrades during the drain get 503 with Retry-After', async () => {
    const gw = await startGateway({ WS_DRAIN_DELAY_MS: '2000' });
    gw.proc.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 150));
    await assert.rejects(Client.connect(gw.url()), /503/);
    assert.equal(await gw.stop(), 0);
  });

  test('at WS_DRAIN_MAX_MS every socket left is closed the same way and the process exits 0', async () => {
    const gw = await startGateway({ WS_DRAIN_DELAY_MS: '0', WS_DRAIN_RATE: '1', WS_DRAIN_MAX_MS: '700' });
    const clients = await many(gw, 8);
    const t0 = Date.now();
    gw.proc.kill('SIGTERM');
    assert.equal(await gw.stop(), 0, gw.stderr());
    assert.ok(Date.now() - t0 < 10_000);
    for (const { c } of clients) {
      const closed = await c.closedBy();
      assert.equal(closed.code, 1012);
      assert.equal((JSON.parse(closed.reason) as { reason: string }).reason, 'unavailable');
    }
    const finished = gw.logs.find((l) => l.msg === 'drain finished');
    assert.ok((finished?.left as number) > 0, 'the rate alone could not drain them in time');
  });
});
