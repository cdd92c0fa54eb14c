/**
 * The gateway's own test helpers, on the shared kit (`@sluice/gateway/testing`,
 * src/testing/): sockets landed on chosen shards, and the uWS build's HTTP
 * idle bound read from the gateway's start line.
 */
import { UWS_BUILDS } from '@sluice/uws';
import assert from 'node:assert/strict';
import { Client, type Frame, type Gateway } from '../src/testing/index.ts';

export {
  Client, eventually, metricTypes, metricValue, parseMetrics, rawUpgrade, running, runUntilExit, seriesValue, startGateway, TEST_ADMIN_TOKEN,
  type Frame, type Gateway, type RawResponse, type StartOptions,
} from '../src/testing/index.ts';

/** Opens sockets until one lands on each shard in `want`; closes the extra ones. */
export async function clientsOnShards(url: string, want: number[]): Promise<Client[]> {
  const found = new Map<number, Client>();
  for (let i = 0; i < 200 && found.size < want.length; i++) {
    const c = await Client.connect(url);
    if (want.includes(c.shard) && !found.has(c.shard)) found.set(c.shard, c);
    else c.close();
  }
  if (found.size < want.length) throw new Error(`could not land sockets on shards ${want.join(',')}`);
  return want.map((s) => found.get(s)!);
}

/**
 * How long uWS leaves a connection whose request never completes, in the
 * build this gateway loaded (its start line names it): the build's fixed
 * HTTP idle timeout, up to one 4 s check late, and 2 s for a loaded box.
 * 16 s on 20.30 (Node 20), 36 s on 20.57 (Node 22 and 24).
 */
export function httpIdleBoundMs(gw: Gateway): number {
  const uws = gw.logs.find((l) => typeof l['uws'] === 'string' && typeof l['cork'] === 'string')?.['uws'];
  const build = UWS_BUILDS.find((b) => b.uws === uws);
  if (build === undefined) throw new Error(`the gateway's start line names no known uWS build (${String(uws)})`);
  return (build.httpIdleTimeoutS + 4 + 2) * 1000;
}

/**
 * A durable publisher on `c` as the SDK is, until `stop()`: every publish
 * has its own idempotency key, and an `unavailable` answer is resent with
 * the same key after 50 ms (any other refusal fails the test). `acked`
 * holds the ids in the order they were acknowledged.
 */
export function keyedPublisher(c: Client, topic: string): { acked: string[]; unavailable: () => number; stop: () => Promise<void> } {
  const acked: string[] = [];
  let unavailable = 0;
  let running = true;
  const load = (async () => {
    for (let n = 0; running; n++) {
      for (;;) {
        const r: Frame = await c.request({ type: 'publish', topic, data: n, idempotencyKey: `p-${n}` }, 10_000);
        if (r.status === 'ok') {
          acked.push((r.data as { id: string }).id);
          break;
        }
        assert.equal(r.reason, 'unavailable', JSON.stringify(r));
        unavailable++;
        await new Promise((res) => setTimeout(res, 50));
      }
    }
  })();
  return {
    acked,
    unavailable: () => unavailable,
    stop: async () => {
      running = false;
      await load;
    },
  };
}
