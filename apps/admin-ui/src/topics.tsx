/** The largest topics, and the topic inspector (presence, history). */
import { useState } from 'preact/hooks';
import { messageOf } from './api.ts';
import { query, tenantName, tenantOf, type Ctx, type Outcome } from './ctx.ts';
import type { TopicRow, TopicsAnswer } from './types.ts';

export function TopicsTable(props: {
  answer: TopicsAnswer | undefined;
  error: string | undefined;
  tenant: string;
  onTenant: (tenant: string) => void;
  onPick: (row: TopicRow) => void;
}) {
  const { answer, error, tenant, onTenant, onPick } = props;
  return (
    <section class="card" aria-labelledby="topics-h">
      <h2 id="topics-h">Largest topics</h2>
      <label class="inline">
        Tenant filter{' '}
        <input type="text" value={tenant} placeholder="all tenants" data-testid="topics-tenant" size={14}
          onInput={(e) => onTenant(e.currentTarget.value)} />
      </label>
      {error !== undefined && <p class="result err" data-testid="topics-error">{error}</p>}
      <table class="topics" data-testid="topics-table">
        <thead>
          <tr><th>Tenant</th><th>Topic</th><th class="num">Subscribers</th></tr>
        </thead>
        <tbody>
          {answer === undefined && <tr><td colSpan={3} class="empty">Loading…</td></tr>}
          {answer !== undefined && answer.topics.length === 0 && <tr><td colSpan={3} class="empty">No topic has subscribers.</td></tr>}
          {answer?.topics.map((t) => (
            <tr key={`${t.tenant}\u0000${t.topic}`} class="clickable" data-testid="topic-row" data-topic={t.topic} data-tenant={t.tenant}
              title="inspect this topic" onClick={() => onPick(t)}>
              <td>{t.tenant}</td>
              <td><button type="button" class="link">{t.topic}</button></td>
              <td class="num" data-testid="topic-subscribers">{String(t.subscribers)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <p class="hint">Click a topic to inspect it.</p>
    </section>
  );
}

export function TopicInspector(props: {
  ctx: Ctx;
  tenant: string;
  topic: string;
  onTenant: (v: string) => void;
  onTopic: (v: string) => void;
  presenceTopics: readonly string[];
}) {
  const { ctx, tenant, topic, onTenant, onTopic, presenceTopics } = props;
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<(Outcome & { title: string }) | undefined>(undefined);

  async function look(kind: 'presence' | 'history') {
    const t = topic.trim();
    if (t === '') {
      setResult({ ok: false, title: '', text: 'Enter a topic first.' });
      return;
    }
    const path = kind === 'presence'
      ? `/v1/presence${query({ tenant: tenantOf(tenant), topic: t })}`
      : `/v1/history${query({ tenant: tenantOf(tenant), topic: t, limit: 20 })}`;
    const title = `${kind === 'presence' ? 'Presence' : 'Last 20 events'} of ${t} (tenant ${tenantName(tenant)})`;
    setBusy(true);
    setResult(undefined);
    try {
      const answer = await ctx.read<unknown>(path);
      setResult({ ok: true, title, text: JSON.stringify(answer, null, 2) });
    } catch (err) {
      setResult({ ok: false, title, text: messageOf(err) });
    } finally {
      setBusy(false);
    }
  }

  return (
    <section class="card" aria-labelledby="topic-h" id="topic-inspector">
      <h2 id="topic-h">Topic inspector</h2>
      <form class="row" onSubmit={(e) => { e.preventDefault(); void look('history'); }}>
        <label>Tenant <input type="text" value={tenant} data-testid="topic-tenant" size={12} onInput={(e) => onTenant(e.currentTarget.value)} /></label>
        <label>Topic <input type="text" value={topic} data-testid="topic-name" size={22} placeholder="room.1" onInput={(e) => onTopic(e.currentTarget.value)} /></label>
        <button type="button" data-testid="topic-presence" disabled={busy} onClick={() => void look('presence')}>Presence</button>
        <button type="button" data-testid="topic-history" disabled={busy} onClick={() => void look('history')}>History (last 20)</button>
      </form>
      <p class="hint">
        {presenceTopics.length === 0
          ? 'No topic keeps presence on this gateway (WS_PRESENCE_TOPICS is empty).'
          : `Presence is kept for: ${presenceTopics.join(', ')}.`}
      </p>
      {busy && <p class="hint">Asking the gateway…</p>}
      {result !== undefined && (
        <>
          {result.title !== '' && <p class="caption">{result.title}</p>}
          <pre class={result.ok ? 'json' : 'json err'} data-testid="topic-result">{result.text}</pre>
        </>
      )}
    </section>
  );
}
