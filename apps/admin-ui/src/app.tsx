/**
 * The page: the login, then the dashboard that polls the gateway every 2 s.
 *
 * The token is kept in sessionStorage (this tab only, gone when it closes).
 * The gateway says in index.html whether its API wants a token
 * (`<meta name="sluice-auth" content="token|none">`): with one and none saved,
 * the login shows at once (no request answered 401, which the browser would
 * log as an error); otherwise the page tries GET /v1/nodes with the saved
 * token, or with none, and a 401 shows the login. A 401 later, on any
 * request, sends the page back to the login with a message.
 */
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ActivityLog, ACTIVITY_LIMIT, type Activity } from './activity.tsx';
import { ApiError, get, messageOf, post } from './api.ts';
import { ConfirmDialog, type ConfirmRequest } from './confirm.tsx';
import { query, tenantOf, type Ctx, type Outcome } from './ctx.ts';
import { secondsAgo } from './format.ts';
import { useNow } from './hooks.ts';
import { Charts, NodesTable } from './nodes.tsx';
import { Publish } from './publish.tsx';
import { TopicInspector, TopicsTable } from './topics.tsx';
import type { NodeView, NodesAnswer, TopicRow, TopicsAnswer } from './types.ts';
import { UserInspector } from './users.tsx';

const TOKEN_KEY = 'sluice-admin-token';
export const POLL_MS = 2000;

/** What the gateway said in index.html: 'token', 'none', or undefined (an index without the tag: ask). */
function authMode(): string | undefined {
  return document.querySelector('meta[name="sluice-auth"]')?.getAttribute('content') ?? undefined;
}

function savedToken(): string | undefined {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? undefined;
  } catch {
    return undefined;
  }
}

function saveToken(token: string | undefined): void {
  try {
    if (token === undefined) sessionStorage.removeItem(TOKEN_KEY);
    else sessionStorage.setItem(TOKEN_KEY, token);
  } catch {
    // Storage refused (a privacy mode): the token lives until the page is reloaded.
  }
}

type Auth =
  | { readonly phase: 'checking' }
  | { readonly phase: 'login'; readonly error?: string | undefined }
  | { readonly phase: 'in'; readonly token: string | undefined; readonly first: NodesAnswer; readonly at: number };

const REFUSED_LATER = 'The gateway refused the token (was ADMIN_TOKEN changed?): log in again.';

export function App() {
  const [auth, setAuth] = useState<Auth>(() => (authMode() === 'token' && savedToken() === undefined ? { phase: 'login' } : { phase: 'checking' }));

  useEffect(() => {
    const token = savedToken();
    if (authMode() === 'token' && token === undefined) return undefined;
    const ctrl = new AbortController();
    get<NodesAnswer>('/v1/nodes', { token, signal: ctrl.signal }).then(
      (first) => setAuth({ phase: 'in', token, first, at: Date.now() }),
      (err: unknown) => {
        if (ctrl.signal.aborted) return;
        if (err instanceof ApiError && err.unauthorized) {
          if (token !== undefined) saveToken(undefined);
          setAuth({ phase: 'login', error: token !== undefined ? REFUSED_LATER : undefined });
        } else {
          setAuth({ phase: 'login', error: messageOf(err) });
        }
      },
    );
    return () => ctrl.abort();
  }, []);

  const logout = useCallback((error?: string) => {
    saveToken(undefined);
    setAuth({ phase: 'login', error });
  }, []);

  if (auth.phase === 'checking') return <main class="login"><p class="hint">Connecting to the gateway…</p></main>;
  if (auth.phase === 'login') {
    return (
      <Login
        error={auth.error}
        onIn={(token, first) => {
          saveToken(token);
          setAuth({ phase: 'in', token, first, at: Date.now() });
        }}
      />
    );
  }
  return <Dashboard key={auth.token ?? ''} token={auth.token} first={auth.first} firstAt={auth.at} onLogout={logout} />;
}

function Login(props: { error: string | undefined; onIn: (token: string, first: NodesAnswer) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState(props.error);
  const [busy, setBusy] = useState(false);

  async function submit(e: Event) {
    e.preventDefault();
    const t = token.trim();
    if (t === '') {
      setError('Enter the admin token.');
      return;
    }
    setBusy(true);
    try {
      const first = await get<NodesAnswer>('/v1/nodes', { token: t });
      props.onIn(t, first);
    } catch (err) {
      setError(err instanceof ApiError && err.unauthorized ? 'Wrong token' : messageOf(err));
      setBusy(false);
    }
  }

  return (
    <main class="login">
      <h1>Sluice admin</h1>
      <form class="card stack" data-testid="login-form" onSubmit={(e) => void submit(e)}>
        <label class="block" for="login-token">Admin token</label>
        <input id="login-token" type="password" autocomplete="current-password" data-testid="login-token" value={token}
          aria-invalid={error !== undefined} aria-describedby="login-help"
          onInput={(e) => setToken(e.currentTarget.value)} />
        {error !== undefined && <p class="result err" data-testid="login-error" role="alert">{error}</p>}
        <p class="hint" id="login-help">The gateway's ADMIN_TOKEN. It is kept in this tab only (sessionStorage) until you log out or close the tab.</p>
        <button type="submit" data-testid="login-submit" disabled={busy}>{busy ? 'Checking…' : 'Log in'}</button>
      </form>
    </main>
  );
}

function Dashboard(props: { token: string | undefined; first: NodesAnswer; firstAt: number; onLogout: (error?: string) => void }) {
  const { token, onLogout } = props;
  const [nodes, setNodes] = useState<NodesAnswer>(props.first);
  const [updatedAt, setUpdatedAt] = useState(props.firstAt);
  const [pollError, setPollError] = useState<string | undefined>(undefined);
  const [topics, setTopics] = useState<TopicsAnswer | undefined>(undefined);
  const [topicsError, setTopicsError] = useState<string | undefined>(undefined);
  const [topicsTenant, setTopicsTenant] = useState('');
  const topicsTenantRef = useRef('');
  topicsTenantRef.current = topicsTenant;
  const [inspectTenant, setInspectTenant] = useState('default');
  const [inspectTopic, setInspectTopic] = useState('');
  const [confirm, setConfirm] = useState<ConfirmRequest | undefined>(undefined);
  const confirmRef = useRef<ConfirmRequest | undefined>(undefined);
  const [activity, setActivity] = useState<readonly Activity[]>([]);
  const seq = useRef(0);
  const [draining, setDraining] = useState<ReadonlySet<string>>(new Set());
  const [drainResult, setDrainResult] = useState<Outcome | undefined>(undefined);
  // Set once a 401 was seen: the page is going back to the login, nothing more is asked.
  const gone = useRef(false);

  const refused = useCallback((err: unknown) => {
    if (err instanceof ApiError && err.unauthorized && !gone.current) {
      gone.current = true;
      onLogout(REFUSED_LATER);
    }
  }, [onLogout]);

  // Polling: one cycle at a time (nodes, then topics), the next POLL_MS after the last ended.
  useEffect(() => {
    const ctrl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const cycle = async () => {
      if (!document.hidden) {
        try {
          const answer = await get<NodesAnswer>('/v1/nodes', { token, signal: ctrl.signal });
          if (ctrl.signal.aborted) return;
          setNodes(answer);
          setUpdatedAt(Date.now());
          setPollError(undefined);
        } catch (err) {
          if (ctrl.signal.aborted) return;
          refused(err);
          if (gone.current) return;
          setPollError(messageOf(err));
        }
        try {
          const answer = await get<TopicsAnswer>(`/v1/topics${query({ limit: 20, tenant: tenantOf(topicsTenantRef.current) })}`, { token, signal: ctrl.signal });
          if (ctrl.signal.aborted) return;
          setTopics(answer);
          setTopicsError(undefined);
        } catch (err) {
          if (ctrl.signal.aborted) return;
          refused(err);
          if (gone.current) return;
          setTopicsError(messageOf(err));
        }
      }
      if (!ctrl.signal.aborted) timer = setTimeout(() => void cycle(), POLL_MS);
    };
    void cycle();
    return () => {
      ctrl.abort();
      clearTimeout(timer);
    };
  }, [token, refused]);

  const log = useCallback((action: string, outcome: Outcome) => {
    const entry: Activity = { seq: ++seq.current, at: Date.now(), action, ok: outcome.ok, result: outcome.text };
    setActivity((prev) => [entry, ...prev].slice(0, ACTIVITY_LIMIT));
  }, []);

  const ctx = useMemo((): Ctx => ({
    read: async <T,>(path: string) => {
      try {
        return await get<T>(path, { token });
      } catch (err) {
        refused(err);
        throw err;
      }
    },
    write: async <T,>(path: string, body: unknown) => {
      try {
        return await post<T>(path, body, { token });
      } catch (err) {
        refused(err);
        throw err;
      }
    },
    act: async (action, confirmText, run) => {
      const ok = await new Promise<boolean>((resolve) => {
        confirmRef.current?.resolve(false);
        confirmRef.current = { text: confirmText, resolve };
        setConfirm(confirmRef.current);
      });
      if (!ok) return undefined;
      let outcome: Outcome;
      try {
        outcome = { ok: true, text: await run() };
      } catch (err) {
        outcome = { ok: false, text: messageOf(err) };
      }
      log(action, outcome);
      return outcome;
    },
  }), [token, refused, log]);

  const onConfirmDone = useCallback((ok: boolean) => {
    const c = confirmRef.current;
    confirmRef.current = undefined;
    setConfirm(undefined);
    c?.resolve(ok);
  }, []);

  const drain = useCallback(async (node: NodeView) => {
    setDraining((s) => new Set([...s, node.id]));
    try {
      const outcome = await ctx.act(
        `Drain node ${node.id}`,
        `Drain node ${node.id}${node.self ? ' (the node that answers this page)' : ''}? It stops taking new connections at once, ` +
          `closes its ${node.sockets} socket${node.sockets === 1 ? '' : 's'} gradually (their clients reconnect to other nodes), then exits.`,
        async () => {
          await ctx.write<unknown>('/admin/drain', { node: node.id });
          return `Node ${node.id} is draining.`;
        },
      );
      if (outcome !== undefined) setDrainResult(outcome);
    } finally {
      setDraining((s) => {
        const next = new Set(s);
        next.delete(node.id);
        return next;
      });
    }
  }, [ctx]);

  const pickTopic = useCallback((row: TopicRow) => {
    setInspectTenant(row.tenant);
    setInspectTopic(row.topic);
    document.getElementById('topic-inspector')?.scrollIntoView({ block: 'nearest' });
  }, []);

  return (
    <>
      <header class="top">
        <h1>Sluice admin</h1>
        <span class="badge mode" title="embedded: one node; cluster: nodes joined through Redis">{nodes.mode}</span>
        <span>{nodes.nodes.length} node{nodes.nodes.length === 1 ? '' : 's'}</span>
        <LastUpdated at={updatedAt} />
        <span class="spacer" />
        <button type="button" data-testid="logout" onClick={() => onLogout()}>Log out</button>
      </header>
      <main class="dash">
        {token === undefined && (
          <p class="banner warn" data-testid="no-token-warning">
            No admin token set on this gateway: anyone who reaches its admin port can use this page (set ADMIN_TOKEN).
          </p>
        )}
        {pollError !== undefined && (
          <p class="banner err" data-testid="poll-error" role="alert">
            The data below is stale: the last poll failed: {pollError}
          </p>
        )}
        <NodesTable answer={nodes} draining={draining} onDrain={(n) => void drain(n)} result={drainResult} />
        <Charts answer={nodes} />
        <div class="cols">
          <TopicsTable answer={topics} error={topicsError} tenant={topicsTenant} onTenant={setTopicsTenant} onPick={pickTopic} />
          <TopicInspector ctx={ctx} tenant={inspectTenant} topic={inspectTopic} onTenant={setInspectTenant} onTopic={setInspectTopic}
            presenceTopics={nodes.features?.presenceTopics ?? []} />
        </div>
        <div class="cols">
          <UserInspector ctx={ctx} auth={nodes.features?.auth ?? 'jwt'} />
          <Publish ctx={ctx} />
        </div>
        <ActivityLog entries={activity} />
      </main>
      <ConfirmDialog request={confirm} onDone={onConfirmDone} />
    </>
  );
}

function LastUpdated(props: { at: number }) {
  const now = useNow(1000);
  const s = secondsAgo(props.at, now);
  return (
    <span data-testid="last-updated" class={s * 1000 > POLL_MS * 3 ? 'warn-text' : 'muted'} title={new Date(props.at).toLocaleString()}>
      updated {s} s ago
    </span>
  );
}
