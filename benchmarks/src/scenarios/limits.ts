// S13 S1 with the limits of issue 17 configured and revocations in force:
// does the publish hot path pay for them? S1's load (pump.ts: 100 sockets,
// each its own topic, 16 publishes in flight, counted at the reply) against
// two arms of the same gateway, both with WS_AUTH=jwt (HS256; revocation needs
// tokens) and every socket its own user (socket i is u<i>, its own token):
//
// - `jwt`: nothing else configured;
// - `jwt + limits + revocations`: WS_USER_MSG_LIMIT, WS_TENANT_CONNECT_LIMIT
//   and WS_MAX_USER_SOCKETS set far above what the load reaches (so they
//   never refuse, but every publish goes through the per-user window and
//   every upgrade through the tenant window and the per-user socket count),
//   and `revocations` revocations of other users posted to /v1/revoke before
//   the sockets connect.
//
// Each arm on a fresh gateway per repeat, the two in an order that
// alternates by repeat; the headline is msgs per server-CPU-second, and the
// limits arm carries its ratio to the plain arm of the same repeat
// (`vsPlain`): its median over the repeats is what the issue holds to 5%.

import { metricSum } from '@sluice/gateway/testing';
import { authSpec, jwtEnv } from '../lib/jwt.ts';
import { LoadPool } from '../loadgen/pool.ts';
import { ServerProc, TARGETS } from '../lib/server.ts';
import { median } from '../lib/series.ts';
import { failedSample, formatSampleLine, waitQuiet, type RunOptions, type Sample } from './common.ts';
import { pumpOnce, S1_DEFAULT, sizeLabel, type PumpConfig } from './pump.ts';

export interface LimitsConfig extends PumpConfig {
  /** Revocations of other users posted before the limits arm's sockets connect. */
  revocations: number;
}

export const S13_DEFAULT: LimitsConfig = { ...S1_DEFAULT, scenario: 'S13', sizes: [32], revocations: 1000 };

/** The limits arm's settings: far above S1's load (about 200k publishes/s, 100 users, 100 upgrades). */
export const LIMITS_ENV: Readonly<Record<string, string>> = {
  WS_USER_MSG_LIMIT: '100000000', WS_TENANT_CONNECT_LIMIT: '100000000', WS_MAX_USER_SOCKETS: '1000000',
};

export function armsOf(cfg: LimitsConfig, size: number): { plain: string; limits: string } {
  return { plain: `${sizeLabel(size)}, jwt`, limits: `${sizeLabel(size)}, jwt + limits + ${cfg.revocations} revocations` };
}

/** Per-repeat ratios of the limits arm to the plain arm (msgs per server-CPU-s), by repeat. */
export function pairRatios(samples: readonly Sample[], plain: string, limits: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const l of samples.filter((s) => s.variant === limits && s.ok)) {
    const p = samples.find((s) => s.variant === plain && s.ok && s.repeat === l.repeat && s.target === l.target);
    if (p !== undefined && p.perServerCpuS > 0) out.set(l.repeat, l.perServerCpuS / p.perServerCpuS);
  }
  return out;
}

async function postRevocations(srv: ServerProc, n: number): Promise<void> {
  let next = 0;
  const bad: string[] = [];
  const worker = async (): Promise<void> => {
    while (next < n) {
      const k = next++;
      const res = await srv.gw.adminPost('/v1/revoke', { user: `revoked-${k}` });
      if (res.status !== 202) bad.push(`${res.status} ${(await res.text()).slice(0, 120)}`);
      else await res.arrayBuffer();
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  if (bad.length > 0) throw new Error(`${bad.length} of ${n} revocations refused: ${bad[0]!}`);
}

export async function runLimits(opts: RunOptions, cfg: LimitsConfig): Promise<Sample[]> {
  const pool = await LoadPool.start(cfg.procs, 30 * 60_000);
  const auth = authSpec();
  const out: Sample[] = [];
  try {
    for (let r = 0; r < opts.repeats; r++) {
      for (const name of opts.targets) {
        const spec = TARGETS[name];
        for (const size of cfg.sizes) {
          const arms = armsOf(cfg, size);
          const order = r % 2 === 0 ? ['plain', 'limits'] as const : ['limits', 'plain'] as const;
          for (const arm of order) {
            const variant = arms[arm];
            let srv: ServerProc | undefined;
            let s: Sample;
            try {
              srv = await ServerProc.start(spec, 60_000, { ...jwtEnv(auth), ...(arm === 'limits' ? LIMITS_ENV : {}) });
              const t0 = performance.now();
              if (arm === 'limits') await postRevocations(srv, cfg.revocations);
              const postedMs = performance.now() - t0;
              const quiet = await waitQuiet();
              s = await pumpOnce(pool, srv, spec, r, size, cfg, auth, variant);
              Object.assign(s.extra, { quietWaitMs: quiet.waitedMs, quietBusyCores: quiet.busyCores });
              s.extra['arm'] = arm;
              // That the per-user window is on the path: the keys the limiter settled since the start (one per tenant, or user, or
              // address, per batch: the limits arm settles each user's window too) and the frames any limit refused (none expected).
              const m = await srv.gw.metrics(10_000);
              s.extra['limiterSettles'] = metricSum(m, 'sluice_limiter_settles_total');
              s.extra['limiterKeysSettled'] = metricSum(m, 'sluice_limiter_settled_hits_total');
              s.extra['limitRejections'] = metricSum(m, 'sluice_limit_rejections_total');
              if (arm === 'limits') Object.assign(s.extra, { revocations: cfg.revocations, revocationsPostedMs: Math.round(postedMs), ...LIMITS_ENV });
            } catch (err) {
              s = failedSample('S13', variant, name, r, (err as Error).message);
            } finally {
              await srv?.stop();
            }
            opts.log(`  ${formatSampleLine(s)}`);
            out.push(s);
          }
        }
      }
    }
  } finally {
    await pool.close();
  }
  for (const name of opts.targets) {
    for (const size of cfg.sizes) {
      const arms = armsOf(cfg, size);
      const mine = out.filter((s) => s.target === name);
      const ratios = pairRatios(mine, arms.plain, arms.limits);
      const xs = [...ratios.values()];
      const all = [...ratios.entries()].sort((a, b) => a[0] - b[0]).map(([, x]) => x.toFixed(3)).join(', ');
      for (const s of mine) {
        if (s.variant !== arms.limits || !ratios.has(s.repeat)) continue;
        s.extra['vsPlain'] = Math.round(ratios.get(s.repeat)! * 1000) / 1000;
        s.extra['ratiosAll'] = all;
      }
      if (xs.length > 0) {
        opts.log(`  S13 ${name} ${sizeLabel(size)}: limits/plain per repeat ${xs.map((x) => x.toFixed(3)).join(', ')}; median ${median(xs).toFixed(3)}`);
      }
    }
  }
  return out;
}
