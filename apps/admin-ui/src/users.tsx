/** The user inspector: a user's connections on every node, and the actions on that user. */
import { useState } from 'preact/hooks';
import { messageOf } from './api.ts';
import { query, tenantName, tenantOf, type Ctx, type Outcome } from './ctx.ts';
import { clock, formatBytes, formatDuration } from './format.ts';
import type { ConnectionsAnswer } from './types.ts';

export function UserInspector(props: { ctx: Ctx; auth: 'none' | 'jwt' | 'hook' }) {
  const { ctx, auth } = props;
  const [tenant, setTenant] = useState('default');
  const [user, setUser] = useState('');
  const [reconnect, setReconnect] = useState(false);
  const [unsubTopic, setUnsubTopic] = useState('');
  const [busy, setBusy] = useState(false);
  const [found, setFound] = useState<{ answer: ConnectionsAnswer; user: string; tenant: string; at: number } | undefined>(undefined);
  const [result, setResult] = useState<Outcome | undefined>(undefined);
  const noTokens = auth === 'none';

  /** The user field, or undefined after showing why it cannot be used. */
  function userOrComplain(): string | undefined {
    const u = user.trim();
    if (u === '') {
      setResult({ ok: false, text: 'Enter a user id first.' });
      return undefined;
    }
    return u;
  }

  async function find() {
    const u = userOrComplain();
    if (u === undefined) return;
    setBusy(true);
    setResult(undefined);
    try {
      const answer = await ctx.read<ConnectionsAnswer>(`/v1/connections${query({ tenant: tenantOf(tenant), user: u })}`);
      const connections = answer.connections ?? [];
      const unanswered = answer.unanswered ?? [];
      setFound({ answer: { connections, unanswered }, user: u, tenant: tenantName(tenant), at: Date.now() });
      const nodes = new Set(connections.map((c) => c.node)).size;
      setResult({
        ok: true,
        text: connections.length === 0
          ? `User ${u} (tenant ${tenantName(tenant)}) has no open connection${unanswered.length > 0 ? ' on the nodes that answered' : ''}.`
          : `User ${u} (tenant ${tenantName(tenant)}) has ${connections.length} connection${connections.length === 1 ? '' : 's'} on ${nodes} node${nodes === 1 ? '' : 's'}.`,
      });
    } catch (err) {
      setResult({ ok: false, text: messageOf(err) });
    } finally {
      setBusy(false);
    }
  }

  async function run(action: string, confirmText: string, path: string, body: Record<string, unknown>, done: string) {
    setBusy(true);
    try {
      const outcome = await ctx.act(action, confirmText, async () => {
        await ctx.write<unknown>(path, body);
        return done;
      });
      if (outcome !== undefined) setResult(outcome);
    } finally {
      setBusy(false);
    }
  }

  function disconnect() {
    const u = userOrComplain();
    if (u === undefined) return;
    const t = tenantName(tenant);
    void run(
      `Disconnect user ${u} (tenant ${t})${reconnect ? ', letting it reconnect' : ''}`,
      `Disconnect every socket of user ${u} (tenant ${t}) on every node? ` + (reconnect
        ? 'The clients are asked to reconnect (close code 4000).'
        : 'The clients are told not to come back (close code 1008).'),
      '/v1/disconnect',
      { ...withTenant(tenant), user: u, reconnect },
      'Disconnect sent: every node acts on it within 1 s.',
    );
  }

  function unsubscribe() {
    const u = userOrComplain();
    if (u === undefined) return;
    const topic = unsubTopic.trim();
    if (topic === '') {
      setResult({ ok: false, text: 'Enter the topic to unsubscribe the user from.' });
      return;
    }
    const t = tenantName(tenant);
    void run(
      `Unsubscribe user ${u} (tenant ${t}) from ${topic}`,
      `Unsubscribe every socket of user ${u} (tenant ${t}) from topic ${topic} on every node? The sockets stay open.`,
      '/v1/unsubscribe',
      { ...withTenant(tenant), user: u, topic },
      `Unsubscribe from ${topic} sent: every node acts on it within 1 s.`,
    );
  }

  function revoke() {
    const u = userOrComplain();
    if (u === undefined) return;
    const t = tenantName(tenant);
    void run(
      `Revoke the tokens of user ${u} (tenant ${t})`,
      `Revoke every token of user ${u} (tenant ${t})? Every socket of the user closes on every node (4003 token_revoked) and the tokens issued so far are refused from now on.`,
      '/v1/revoke',
      { ...withTenant(tenant), user: u },
      'Revocation sent: every node acts on it within 1 s.',
    );
  }

  return (
    <section class="card" aria-labelledby="user-h">
      <h2 id="user-h">User inspector</h2>
      <form class="row" onSubmit={(e) => { e.preventDefault(); void find(); }}>
        <label>Tenant <input type="text" value={tenant} data-testid="user-tenant" size={12} onInput={(e) => setTenant(e.currentTarget.value)} /></label>
        <label>User <input type="text" value={user} data-testid="user-id" size={18} placeholder="u1" onInput={(e) => setUser(e.currentTarget.value)} /></label>
        <button type="submit" data-testid="user-find" disabled={busy}>Find connections</button>
      </form>

      {found !== undefined && <Connections found={found} />}

      <div class="actions">
        <div class="row">
          <button type="button" class="danger" data-testid="user-disconnect" disabled={busy} onClick={disconnect}>Disconnect</button>
          <label class="check"><input type="checkbox" checked={reconnect} data-testid="user-reconnect" onChange={(e) => setReconnect(e.currentTarget.checked)} /> let it reconnect</label>
        </div>
        <div class="row">
          <label>Topic <input type="text" value={unsubTopic} data-testid="user-unsub-topic" size={18} placeholder="room.1" onInput={(e) => setUnsubTopic(e.currentTarget.value)} /></label>
          <button type="button" class="danger" data-testid="user-unsubscribe" disabled={busy} onClick={unsubscribe}>Unsubscribe from topic…</button>
        </div>
        <div class="row">
          <button type="button" class="danger" data-testid="user-revoke" disabled={busy || noTokens} onClick={revoke}
            title={noTokens ? 'This gateway takes no tokens (WS_AUTH=none): there is nothing to revoke.' : undefined}>
            Revoke tokens
          </button>
          {noTokens && <span class="hint">This gateway takes no tokens (WS_AUTH=none): there is nothing to revoke.</span>}
        </div>
      </div>
      {result !== undefined && <p class={result.ok ? 'result ok' : 'result err'} data-testid="user-result" role="status">{result.text}</p>}
    </section>
  );
}

function withTenant(field: string): { tenant?: string } {
  const t = tenantOf(field);
  return t === undefined ? {} : { tenant: t };
}

function Connections(props: { found: { answer: ConnectionsAnswer; user: string; tenant: string; at: number } }) {
  const { answer, user, tenant, at } = props.found;
  return (
    <>
      <p class="caption">Connections of {user} (tenant {tenant}) at {clock(at)}</p>
      <div class="scroll">
        <table data-testid="user-connections">
          <thead>
            <tr>
              <th>Connection</th><th>Node</th><th class="num">Shard</th><th>Address</th><th>Token expires</th><th>Topics</th><th class="num">Buffered</th><th>Slow</th>
            </tr>
          </thead>
          <tbody>
            {answer.connections.length === 0 && <tr><td colSpan={8} class="empty">No open connection.</td></tr>}
            {answer.connections.map((c) => (
              <tr key={c.connectionId} data-testid="connection-row" data-connection={c.connectionId}>
                <td class="mono">{c.connectionId}</td>
                <td class="nowrap">{c.node}</td>
                <td class="num">{String(c.shard)}</td>
                <td class="mono">{c.ip}</td>
                <td>{c.expiresAt === null ? <span class="small">no token</span>
                  : <>{clock(c.expiresAt)} <span class="small">(in {formatDuration(c.expiresAt - at)})</span></>}</td>
                <td class="topics-cell">{c.topics.length === 0 ? <span class="small">none</span> : c.topics.join(', ')}</td>
                <td class="num">{formatBytes(c.bufferedBytes)}</td>
                <td>{c.slow ? <span class="badge st-not_ready">slow</span> : 'no'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {answer.unanswered.length > 0 && (
        <p class="result warn" data-testid="user-unanswered">
          These nodes did not answer in time, so their connections are missing: {answer.unanswered.join(', ')}
        </p>
      )}
    </>
  );
}
