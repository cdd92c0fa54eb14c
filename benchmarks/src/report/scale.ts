// S16's table and chart (issue 20: 100,000 sockets on one box).

import type { Sample } from '../scenarios/common.ts';
import { fmtBytes, fmtInt, fmtUs } from '../scenarios/common.ts';
import type { ScalePoint } from '../scenarios/scale.ts';
import type { Row } from './summary.ts';

function table(head: string[], body: string[][]): string {
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const r of body) lines.push(`| ${r.join(' | ')} |`);
  return lines.join('\n');
}

export function s16Table(rs: readonly Row[], status: (r: Row) => string): string {
  const x = (r: Row, k: string): number => r.extras[k] ?? NaN;
  const cores = (v: number): string => (Number.isFinite(v) ? v.toFixed(2) : 'n/a');
  const s = (v: number): string => (Number.isFinite(v) ? `${(v / 1000).toFixed(1)} s` : 'n/a');
  return 'Steady window: deliveries counted at the clients; gateway CPU: every thread of every node (/proc); Redis: redis-server\'s CPU (/proc) ' +
    'and INFO commandstats calls, per published event; latency from the stamp in each event\'s data to its arrival (HDR, every class); ' +
    'RSS per socket: a node\'s RSS with its sockets joined to their three topics minus its RSS before the first socket, over its sockets (median of nodes, min-max). ' +
    'Restart: every node in turn, SIGTERM (drain) and a new process; `lost`: (subscription, acknowledged event) pairs never received.\n\n' +
    table(
      ['variant', 'deliveries/s (of wanted)', 'gateway CPU per delivery', 'gateways / Redis / load / machine (cores)', 'Redis calls per event',
        'Redis CPU per event', 'p50 / p99', 'RSS per socket', 'idle CPU per socket', 'first limit', 'restart: drain / 99% back (worst node)',
        'acked durable / lost', 'ok runs'],
      rs.map((r) => [r.variant, `${fmtInt(r.perSec)} (${(x(r, 'deliveredShare') * 100).toFixed(1)}%)`, fmtUs(x(r, 'gatewayCpuUsPerDelivery')),
        `${cores(x(r, 'gatewayUtil'))} / ${cores(x(r, 'redisUtil'))} / ${cores(x(r, 'loadUtil'))} / ${cores(x(r, 'machineUtil'))}`,
        Number.isFinite(x(r, 'redisCallsPerEvent')) ? x(r, 'redisCallsPerEvent').toFixed(2) : 'n/a', fmtUs(x(r, 'redisCpuUsPerEvent')),
        `${fmtUs(r.p50Us)} / ${fmtUs(r.p99Us)}`,
        `${fmtBytes(x(r, 'rssPerSocketBytes'))} (${fmtBytes(x(r, 'rssPerSocketMinBytes'))}-${fmtBytes(x(r, 'rssPerSocketMaxBytes'))})`,
        Number.isFinite(x(r, 'idleCpuUsPerSocketS')) ? `${x(r, 'idleCpuUsPerSocketS').toFixed(2)} µs/s` : 'n/a',
        r.notes['firstLimit'] ?? '-', `${s(x(r, 'restartDrainMaxMs'))} / ${s(x(r, 'restartBack99MaxMs'))}`,
        `${fmtInt(x(r, 'ackedDurable'))} / ${Number.isFinite(x(r, 'lostPairs')) ? x(r, 'lostPairs') : 'n/a'}`, status(r)]),
    );
}

const esc = (t: string): string => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * Two panels over the run's time: sockets joined and deliveries per second
 * (one scale, in thousands), and CPU in cores (gateways, Redis, load
 * processes, the whole machine) with the delivery p99 on its own axis;
 * phases shaded and named.
 */
export function renderScaleSvg(s: Sample): string {
  const tl = (s.timeline ?? []) as ScalePoint[];
  const e = s.extra;
  const width = 900;
  const left = 70;
  const right = 70;
  const plotW = width - left - right;
  const top1 = 92;
  const h1 = 210;
  const top2 = top1 + h1 + 40;
  const h2 = 210;
  const height = top2 + h2 + 50;
  const maxT = Math.max(1, ...tl.map((p) => p.t));
  const x = (t: number): number => left + (t / maxT) * plotW;
  const perS = (p: ScalePoint, v: number): number => (p.wallS > 0 ? v / p.wallS : 0);
  const peak1 = Math.max(1, ...tl.map((p) => Math.max(p.subscribed, perS(p, p.deliveries))));
  const step1 = [5000, 10_000, 20_000, 25_000, 50_000, 100_000].find((st) => peak1 / st <= 6) ?? 200_000;
  const max1 = Math.ceil((peak1 * 1.05) / step1) * step1;
  const y1 = (v: number): number => top1 + h1 - (v / max1) * h1;
  const max2 = 2.2;
  const y2 = (v: number): number => top2 + h2 - (Math.min(v, max2) / max2) * h2;
  const p99s = tl.map((p) => p.p99Us ?? 0).filter((v) => v > 0);
  const maxLatMs = Math.max(10, Math.ceil((Math.max(0, ...p99s) / 1000) * 1.1 / 10) * 10);
  const yl = (us: number): number => top2 + h2 - (Math.min(us / 1000, maxLatMs) / maxLatMs) * h2;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  out.push(`<text x="10" y="20" font-size="14" font-weight="bold">${esc(`S16: ${s.variant} on one 2-core box, one redis-server`)}</text>`);
  out.push(`<text x="10" y="38" fill="#555">${esc(`each socket: the big topic, a room of ${String(e['roomSize'])}, one of ${String(e['feeds'])} keyed feeds; ` +
    `${String(e['rateBig'])} big event/s, ${String(e['rateRoom'])} room events/s, ${String(e['rateFeed'])} feed updates/s`)}</text>`);
  out.push(`<text x="10" y="54" fill="#555">${esc(`steady: ${fmtInt(s.perSec)} deliveries/s, p50 ${fmtUs(s.latency?.p50Us ?? NaN)}, p99 ${fmtUs(s.latency?.p99Us ?? NaN)}, ` +
    `${fmtBytes(Number(e['rssPerSocketBytes']))} gateway RSS per socket; first limit: ${String(e['firstLimit'])}`)}</text>`);
  out.push(`<text x="10" y="70" fill="#555">${esc(`rolling restart: ${String(e['ackedDurable'])} durable publishes acked, ${String(e['lostPairs'])} ` +
    `(subscription, event) pairs lost; worst node 99% back ${(Number(e['restartBack99MaxMs']) / 1000).toFixed(1)} s after SIGTERM`)}</text>`);
  // Phases: shaded bands (alternating), named at the top of panel 1.
  const phases: Array<{ name: string; a: number; b: number }> = [];
  let prevT = 0;
  for (const p of tl) {
    const a = Math.max(0, p.t - p.wallS);
    const last = phases[phases.length - 1];
    if (last !== undefined && last.name === p.phase) last.b = p.t;
    else phases.push({ name: p.phase, a: last === undefined ? a : prevT, b: p.t });
    prevT = p.t;
  }
  phases.forEach((ph, i) => {
    for (const [top, h] of [[top1, h1], [top2, h2]] as const) {
      if (i % 2 === 1) out.push(`<rect x="${x(ph.a).toFixed(1)}" y="${top}" width="${(x(ph.b) - x(ph.a)).toFixed(1)}" height="${h}" fill="#f3f3f3"/>`);
    }
    out.push(`<text x="${((x(ph.a) + x(ph.b)) / 2).toFixed(1)}" y="${top1 - 6}" text-anchor="middle" fill="#777" font-size="11">${esc(ph.name)}</text>`);
  });
  for (let v = 0; v <= max1; v += step1) {
    out.push(`<line x1="${left}" y1="${y1(v)}" x2="${left + plotW}" y2="${y1(v)}" stroke="#e4e4e4"/>`);
    out.push(`<text x="${left - 6}" y="${y1(v) + 4}" text-anchor="end" fill="#555">${fmtInt(v)}</text>`);
  }
  for (let v = 0; v <= 2; v += 0.5) {
    out.push(`<line x1="${left}" y1="${y2(v)}" x2="${left + plotW}" y2="${y2(v)}" stroke="#e4e4e4"/>`);
    out.push(`<text x="${left - 6}" y="${y2(v) + 4}" text-anchor="end" fill="#555">${v.toFixed(1)}</text>`);
  }
  for (let k = 0; k <= 4; k++) {
    const ms = (maxLatMs * k) / 4;
    out.push(`<text x="${left + plotW + 6}" y="${yl(ms * 1000) + 4}" fill="#8e44ad">${ms.toFixed(0)} ms</text>`);
  }
  const line = (pts: string, color: string, w = 1.5, dash = ''): void => {
    out.push(`<polyline fill="none" stroke="${color}" stroke-width="${w}"${dash === '' ? '' : ` stroke-dasharray="${dash}"`} points="${pts}"/>`);
  };
  const pts = (f: (p: ScalePoint) => number, y: (v: number) => number): string => tl.map((p) => `${x(p.t).toFixed(1)},${y(f(p)).toFixed(1)}`).join(' ');
  line(pts((p) => p.subscribed, y1), '#2c3e80', 2);
  line(pts((p) => perS(p, p.deliveries), y1), '#c0392b', 1.5);
  line(pts((p) => perS(p, p.machineBusyS), y2), '#333', 1.5);
  line(pts((p) => perS(p, p.gatewayCpuS), y2), '#c0392b', 1.5);
  line(pts((p) => perS(p, p.loadCpuS), y2), '#3a7d44', 1.5);
  line(pts((p) => perS(p, p.redisCpuS), y2), '#d68910', 1.5);
  line(tl.filter((p) => p.p99Us !== null).map((p) => `${x(p.t).toFixed(1)},${yl(p.p99Us!).toFixed(1)}`).join(' '), '#8e44ad', 1, '3 2');
  const legend = (items: Array<[string, string]>, y: number): void => {
    let lx = left;
    for (const [c, label] of items) {
      out.push(`<line x1="${lx}" y1="${y}" x2="${lx + 18}" y2="${y}" stroke="${c}" stroke-width="2"/>`);
      out.push(`<text x="${lx + 22}" y="${y + 4}" fill="#333">${esc(label)}</text>`);
      lx += 30 + label.length * 6.2;
    }
  };
  legend([['#2c3e80', 'sockets joined'], ['#c0392b', 'deliveries per second']], top1 + h1 + 18);
  legend([['#333', 'machine CPU (cores)'], ['#c0392b', 'gateways'], ['#3a7d44', 'load processes'], ['#d68910', 'redis-server'], ['#8e44ad', 'delivery p99 (right axis)']],
    top2 + h2 + 18);
  const stepT = maxT > 400 ? 60 : maxT > 150 ? 30 : maxT > 60 ? 10 : 5;
  for (let t = 0; t <= maxT; t += stepT) out.push(`<text x="${x(t)}" y="${top2 + h2 + 36}" text-anchor="middle" fill="#555">${t}s</text>`);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
