/** The nodes: one table row each, and the charts of their last minutes. */
import { useMemo } from 'preact/hooks';
import { Chart, type Line } from './chart.tsx';
import { breakdown, formatBreakdown, formatBytes, formatDuration, formatMiB, formatRate, sum } from './format.ts';
import type { NodeView, NodesAnswer, SeriesPoint } from './types.ts';

const STATE_LABEL: Record<string, string> = {
  ready: 'ready',
  not_ready: 'not ready',
  draining: 'draining',
  unresponsive: 'unresponsive',
};

export function NodesTable(props: {
  answer: NodesAnswer;
  /** Nodes a drain request is on its way for. */
  draining: ReadonlySet<string>;
  onDrain: (node: NodeView) => void;
  /** The last drain's result or error, shown under the table. */
  result: { ok: boolean; text: string } | undefined;
}) {
  const { answer, draining, onDrain, result } = props;
  return (
    <section class="card" aria-labelledby="nodes-h">
      <h2 id="nodes-h">Nodes</h2>
      <div class="scroll">
        <table class="nodes" data-testid="nodes-table">
          <thead>
            <tr>
              <th>Node</th>
              <th>State</th>
              <th class="num">Sockets</th>
              <th class="num">Users</th>
              <th title="per shard: sockets · event-loop lag">Shards</th>
              <th class="num">Upgrades/s</th>
              <th class="num">Closes/s</th>
              <th class="num">Refused/s</th>
              <th class="num" title="sockets in the slow lane (behind on what they were sent)">Slow lane</th>
              <th class="num">Buffered</th>
              <th class="num" title="event-loop lag, the largest of the node's threads">Lag</th>
              <th class="num" title="heap used / resident set size, MiB">Heap / RSS</th>
              <th>Redis</th>
              <th title="upgrades admitted per second (WS_UPGRADE_RATE) and the backlog of upgrades waiting">Budget</th>
              <th><span class="sr">Actions</span></th>
            </tr>
          </thead>
          <tbody>
            {answer.nodes.length === 0 && (
              <tr><td colSpan={15} class="empty">No node reported.</td></tr>
            )}
            {answer.nodes.map((n) => <NodeRow key={n.id} node={n} at={answer.at} busy={draining.has(n.id)} onDrain={onDrain} />)}
          </tbody>
        </table>
      </div>
      {result !== undefined && (
        <p class={result.ok ? 'result ok' : 'result err'} data-testid="nodes-result" role="status">{result.text}</p>
      )}
    </section>
  );
}

function NodeRow(props: { node: NodeView; at: number; busy: boolean; onDrain: (node: NodeView) => void }) {
  const { node: n, at, busy, onDrain } = props;
  const gone = n.state === 'unresponsive';
  const canDrain = n.state === 'ready' || n.state === 'not_ready';
  return (
    <tr data-testid="node-row" data-node={n.id} data-state={n.state} class={gone ? 'gone' : undefined}>
      <td class="node-id">
        <span class="name">
          <strong>{n.id}</strong>
          {n.self && <span class="tag" title="the node that answers this page">this node</span>}
        </span>
        <div class="small">
          v{n.version} · up {formatDuration(at - n.startedAt)}
        </div>
        {gone && <div class="small warn-text">not answering for {Math.round(n.ageMs / 1000)} s</div>}
      </td>
      <td><span class={`badge st-${n.state}`}>{STATE_LABEL[n.state] ?? n.state}</span></td>
      <td class="num" data-testid="node-sockets">{String(n.sockets)}</td>
      <td class="num">{String(n.users)}</td>
      <td class="shards">
        {(n.shards ?? []).length === 0 ? <span class="small">–</span> : (n.shards ?? []).map((s) => (
          <div key={s.shard} class="small" title={`shard ${s.shard}: ${s.sockets} sockets, lag ${s.lagMs} ms, slow lane ${s.slowLane}, buffered ${formatBytes(s.bufferedBytes)}`}>
            s{s.shard} {s.sockets} · {Math.round(s.lagMs)} ms
          </div>
        ))}
      </td>
      <RateCell by={n.rates?.upgrades} />
      <RateCell by={n.rates?.closes} />
      <RateCell by={n.rates?.refused} />
      <td class="num">{String(n.slowLane)}</td>
      <td class="num">{formatBytes(n.bufferedBytes)}</td>
      <td class={`num${n.lagMs >= 100 ? ' warn-text' : ''}`}>{Math.round(n.lagMs)} ms</td>
      <td class="num">{formatMiB(n.heapUsedBytes)} / {formatMiB(n.rssBytes)} <span class="small">MiB</span></td>
      <td><span class={`badge redis-${n.redis}`}>{n.redis}</span></td>
      <td class="small">
        {n.upgradeBudget > 0 ? `${n.upgradeBudget}/s` : 'none'}
        {n.upgradeBacklogMs > 0 && <div>backlog {Math.round(n.upgradeBacklogMs)} ms</div>}
      </td>
      <td>
        {canDrain && (
          <button type="button" class="danger small-btn" data-testid="node-drain" disabled={busy} onClick={() => onDrain(n)}>
            {busy ? 'Draining…' : 'Drain'}
          </button>
        )}
      </td>
    </tr>
  );
}

/** A rate by reason: the sum, and the non-zero reasons under it (and in the tooltip). */
function RateCell(props: { by: Record<string, number> | undefined }) {
  const parts = breakdown(props.by);
  return (
    <td class="num" title={formatBreakdown(props.by)}>
      {formatRate(sum(props.by))}
      {parts.map(([k, v]) => <div key={k} class="small">{k} {formatRate(v)}</div>)}
    </td>
  );
}

const METRICS: readonly { key: keyof Omit<SeriesPoint, 't'>; title: string; format: (v: number) => string }[] = [
  { key: 'sockets', title: 'Sockets', format: (v) => String(Math.round(v)) },
  { key: 'upgrades', title: 'Upgrades/s', format: formatRate },
  { key: 'closes', title: 'Closes/s', format: formatRate },
  { key: 'sent', title: 'Sent frames/s', format: formatRate },
  { key: 'lagMs', title: 'Event-loop lag (ms)', format: (v) => String(Math.round(v)) },
];

export function Charts(props: { answer: NodesAnswer }) {
  const { answer } = props;
  const charts = useMemo(() => METRICS.map((m) => ({
    ...m,
    lines: answer.nodes.map((n, i): Line => ({
      id: n.id,
      color: i,
      faint: n.state === 'unresponsive',
      points: (n.series ?? []).map((p) => [p.t, p[m.key]] as const),
    })),
  })), [answer]);
  return (
    <section class="card" aria-labelledby="charts-h">
      <h2 id="charts-h">Last minutes</h2>
      <div class="charts" data-testid="charts">
        {charts.map((c) => <Chart key={c.key} title={c.title} lines={c.lines} format={c.format} />)}
      </div>
    </section>
  );
}
