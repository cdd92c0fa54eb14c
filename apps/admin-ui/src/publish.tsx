/** Publish: an event to a topic, or to users; the data is checked as JSON before anything is sent. */
import { useState } from 'preact/hooks';
import { tenantName, tenantOf, type Ctx, type Outcome } from './ctx.ts';
import { parseJson, parseUserList } from './format.ts';

/** The data as the confirmation shows it: compact JSON, cut at `max` characters. */
function preview(value: unknown, max = 200): string {
  const s = JSON.stringify(value);
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

export function Publish(props: { ctx: Ctx }) {
  const { ctx } = props;
  const [tenant, setTenant] = useState('default');
  const [kind, setKind] = useState<'topic' | 'users'>('topic');
  const [target, setTarget] = useState('');
  const [data, setData] = useState('{"text": "hello"}');
  const [ephemeral, setEphemeral] = useState(false);
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<Outcome | undefined>(undefined);

  async function submit() {
    const parsed = parseJson(data);
    const t = tenantName(tenant);
    const base = tenantOf(tenant) === undefined ? {} : { tenant: tenantOf(tenant) };
    let action: string;
    let text: string;
    let body: Record<string, unknown>;
    let done: (answer: Record<string, unknown>) => string;
    if (kind === 'topic') {
      const topic = target.trim();
      if (topic === '') return setResult({ ok: false, text: 'Enter the topic to publish to.' });
      if (!parsed.ok) return setResult({ ok: false, text: parsed.message });
      action = `Publish to topic ${topic} (tenant ${t})${ephemeral ? ', ephemeral' : ''}`;
      text = `Publish to topic ${topic} (tenant ${t})${ephemeral ? ' as an ephemeral event (not kept in history)' : ''}? ` +
        `Every subscriber on every node receives it. Data: ${preview(parsed.value)}`;
      body = { ...base, topic, data: parsed.value, ...(ephemeral ? { ephemeral: true } : {}) };
      done = (a) => {
        if (typeof a.id === 'string') return `Published: event id ${a.id}${a.duplicate === true ? ' (a duplicate: already published)' : ''}.`;
        return 'Published (ephemeral: no event id).';
      };
    } else {
      const users = parseUserList(target);
      if (users.length === 0) return setResult({ ok: false, text: 'Enter one user id or more, separated by commas.' });
      if (!parsed.ok) return setResult({ ok: false, text: parsed.message });
      action = `Send to user${users.length === 1 ? '' : 's'} ${users.join(', ')} (tenant ${t})`;
      text = `Send an event to ${users.length === 1 ? 'user' : `${users.length} users:`} ${users.join(', ')} (tenant ${t})? ` +
        `Every open socket of ${users.length === 1 ? 'that user' : 'these users'} on every node receives it; nothing is stored. Data: ${preview(parsed.value)}`;
      body = { ...base, users, data: parsed.value };
      done = (a) => {
        const online = Array.isArray(a.online) ? a.online.map(String) : [];
        return online.length === 0 ? 'None of these users is online: nobody received it.' : `Sent; online and reached: ${online.join(', ')}.`;
      };
    }
    setBusy(true);
    try {
      const outcome = await ctx.act(action, text, async () => done(await ctx.write<Record<string, unknown>>('/v1/publish', body)));
      if (outcome !== undefined) setResult(outcome);
    } finally {
      setBusy(false);
    }
  }

  return (
    <section class="card" aria-labelledby="publish-h">
      <h2 id="publish-h">Publish</h2>
      <form class="stack" onSubmit={(e) => { e.preventDefault(); void submit(); }}>
        <div class="row">
          <label>Tenant <input type="text" value={tenant} data-testid="publish-tenant" size={12} onInput={(e) => setTenant(e.currentTarget.value)} /></label>
          <label>To{' '}
            <select value={kind} data-testid="publish-target-kind" onChange={(e) => setKind(e.currentTarget.value === 'users' ? 'users' : 'topic')}>
              <option value="topic">topic</option>
              <option value="users">users</option>
            </select>
          </label>
          <label>
            {kind === 'topic' ? 'Topic' : 'Users'}{' '}
            <input type="text" value={target} data-testid="publish-target" size={24}
              placeholder={kind === 'topic' ? 'room.1' : 'u1, u2'} onInput={(e) => setTarget(e.currentTarget.value)} />
          </label>
          <label class="check" title={kind === 'users' ? 'an event to users is always ephemeral' : 'not kept in history, no event id'}>
            <input type="checkbox" data-testid="publish-ephemeral" checked={kind === 'users' || ephemeral} disabled={kind === 'users'}
              onChange={(e) => setEphemeral(e.currentTarget.checked)} /> ephemeral
          </label>
        </div>
        <label class="block">Data (JSON)
          <textarea data-testid="publish-data" rows={4} spellcheck={false} value={data} onInput={(e) => setData(e.currentTarget.value)} />
        </label>
        <div class="row">
          <button type="submit" class="danger" data-testid="publish-submit" disabled={busy}>Publish…</button>
          {result !== undefined && <span class={result.ok ? 'result ok' : 'result err'} data-testid="publish-result" role="status">{result.text}</span>}
        </div>
      </form>
    </section>
  );
}
