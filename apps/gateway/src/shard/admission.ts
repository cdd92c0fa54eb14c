/**
 * Admission: one WebSocket upgrade from request to socket or refusal. The
 * request is read once (uWS: every header MUST be read before upgrade()
 * returns), the pure checks run (`checkHandshake`), then the IP window and
 * the identity: on the spot in embedded mode with WS_AUTH=none (the node's
 * shared window table), otherwise asynchronously (the window store, the
 * token, the hook), and whatever is written afterwards goes in one cork.
 * Touches no socket data but the record it makes.
 */
import { ANONYMOUS, type ConnectAnswer, parseConnectAnswer, checkHandshake, chooseSubprotocol, clientAddress, type Identity, type OriginRule, parseOriginList,
  type Refusal, retryAfterSeconds, retryHint, type Revocations, tenantConnectWindowKey, userKey } from '@sluice/core';
import { endSpan, type Span } from '@sluice/telemetry';
import { type HttpRequest, type HttpResponse, upgradeCorked, type us_socket_context_t } from '@sluice/uws';
import { tokenFrom, type Verifier } from '../auth.ts';
import type { HookClient } from '../hooks.ts';
import type { SharedLimits } from '../shared-limits.ts';
import type { UpgradeBudget } from '../upgrade-budget.ts';
import type { UserSocketCap } from '../user-socket-cap.ts';
import type { ShardContext } from './context.ts';
import { newSocketData, socketIdPrefix } from './socket-data.ts';

/** Why `admit` refused a valid token: it is revoked. */
const REVOKED = 'revoked\u0000';
/** Why `admit` refused a valid token: its user holds WS_MAX_USER_SOCKETS sockets. */
const TOO_MANY = 'too many\u0000';
/** Who comes in, and whether a place was claimed for it under WS_MAX_USER_SOCKETS (to give back at its close). */
interface Admitted {
  readonly identity: Identity;
  readonly claimed: boolean;
}
/** The tenant's upgrade window is full: wait this long. */
interface TenantFull {
  readonly tenantWaitMs: number;
}
/** WS_AUTH=hook: the backend refused (401 or 403, with its message). */
interface HookRefused {
  readonly status: 401 | 403;
  readonly message: string | undefined;
}
/** WS_AUTH=hook: the backend failed (or its breaker is open, or the node's calls in flight are at the cap): 503, come back then. */
interface HookDown {
  readonly hookDownMs: number;
}
/** What the connect hook is sent: the request's identity material, read before upgrade() returns. */
interface Material {
  readonly ip: string;
  readonly origin: string;
  readonly cookie: string;
  readonly authorization: string;
  readonly token: string | undefined;
  readonly userAgent: string;
}

/** The connect hook's request body; empty headers are left out. */
export function connectBody(node: string, m: Material): string {
  return JSON.stringify({
    hook: 'connect', node, ip: m.ip,
    origin: m.origin === '' ? undefined : m.origin,
    cookie: m.cookie === '' ? undefined : m.cookie,
    authorization: m.authorization === '' ? undefined : m.authorization,
    token: m.token,
    userAgent: m.userAgent === '' ? undefined : m.userAgent,
  });
}

const isRefusal = (a: ConnectAnswer): boolean => !a.allow;

export class Admission {
  private readonly origins: readonly OriginRule[] | undefined;
  /** Connections accepted by this shard generation: the last part of their ids. */
  private seq = 0;
  /** `<node>.<shard>.<generation>.`: the first part of their ids, one string for all. */
  private readonly idPrefix: string;

  constructor(
    private readonly ctx: ShardContext,
    private readonly limits: SharedLimits,
    /** WS_AUTH=jwt: the token checker the session's `refresh` uses too; null with WS_AUTH=none. */
    private readonly verifier: Verifier | null,
    /** False while the shard stops, the node drains, or WS_MAX_SOCKETS is reached. */
    private readonly available: () => boolean,
    /** The revocations in force: a revoked token gets 401 `token_revoked`. */
    private readonly revocations: Revocations,
    /** WS_MAX_USER_SOCKETS: null when off. */
    private readonly cap: UserSocketCap | null,
    /** WS_AUTH=hook: the backend that decides identities; null otherwise. */
    private readonly hook: HookClient | null,
    /** WS_UPGRADE_RATE: the node's upgrade budget; null when it is 0 (off). */
    private readonly budget: UpgradeBudget | null = null,
  ) {
    const cfg = ctx.cfg;
    this.origins = cfg.allowedOrigins === undefined ? undefined : parseOriginList(cfg.allowedOrigins);
    this.idPrefix = socketIdPrefix(ctx.task);
  }

  readonly upgrade = (res: HttpResponse, req: HttpRequest, context: us_socket_context_t): void => {
    const cfg = this.ctx.cfg;
    if (!this.available()) {
      this.refuseUnavailable(res);
      return;
    }
    // The budget before anything else is read: a refusal costs one status
    // line, and its hint is this client's place among the refused.
    if (this.budget !== null) {
      const waitMs = this.budget.take();
      if (waitMs !== 0) {
        this.ctx.counters.upgrades.over_budget++;
        this.writeRetry(res, 'unavailable', '503 Service Unavailable', waitMs);
        return;
      }
    }
    // One pass over the headers: their size, and every X-Forwarded-For line
    // (a proxy may add its own line rather than append to the client's).
    const query = req.getQuery() ?? ''; // undefined when the URL has none, whatever the typings say
    let headerBytes = req.getUrl().length + query.length;
    let forwardedFor = '';
    req.forEach((k, v) => {
      headerBytes += k.length + v.length + 4;
      if (k === 'x-forwarded-for') forwardedFor = forwardedFor === '' ? v : `${forwardedFor},${v}`;
    });
    const key = req.getHeader('sec-websocket-key');
    const refusal = checkHandshake({ headerBytes, version: req.getHeader('sec-websocket-version'), key, origin: req.getHeader('origin') },
      { maxHeaderBytes: cfg.maxHeaderBytes, origins: this.origins });
    if (refusal !== undefined) {
      this.refuse(res, refusal);
      return;
    }
    const ip = clientAddress(Buffer.from(res.getRemoteAddressAsText()).toString(), forwardedFor, cfg.trustProxy);
    const offered = req.getHeader('sec-websocket-protocol');
    const extensions = req.getHeader('sec-websocket-extensions');
    const protocol = chooseSubprotocol(offered);
    const authorization = req.getHeader('authorization');
    const token = this.verifier === null && this.hook === null ? undefined : tokenFrom({ authorization, protocols: offered, query });
    const material: Material | undefined = this.hook === null ? undefined : {
      ip, origin: req.getHeader('origin'), cookie: req.getHeader('cookie'), authorization, token, userAgent: req.getHeader('user-agent'),
    };
    const span = this.ctx.tracing?.upgrade(req.getHeader('traceparent'));
    // WS_AUTH=none in embedded mode: the IP window is the whole decision, and
    // the node's shared table answers it on the spot, so the socket is
    // upgraded inside this handler as a plain uWS server does (no promise, no
    // abort handler, no cork of a later turn: S5). No room in the table for
    // this address: the coordinator's store counts it, below.
    if (this.verifier === null && this.hook === null) {
      const wait = this.limits.connectNow(ip);
      if (wait !== undefined) {
        const outcome = wait !== 0 ? this.refuseIp(res, wait) : this.accept(res, context, key, protocol, extensions, ip, ANONYMOUS, false, true);
        if (span !== undefined) {
          span.setAttribute('sluice.outcome', outcome);
          if (outcome === 'accepted') span.setAttribute('sluice.tenant', ANONYMOUS.tenant);
          span.end();
        }
        return;
      }
    }
    // uWS requires an abort handler while the upgrade waits.
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
      this.ctx.counters.upgrades.aborted++;
    });
    // A place claimed under WS_MAX_USER_SOCKETS that no socket took yet: given back unless the upgrade completes.
    let claimedKey: string | undefined;
    this.admit(ip, token, material, span).then((who) => {
      if (typeof who === 'object' && 'identity' in who && who.claimed) claimedKey = userKey(who.identity.tenant, who.identity.user);
      let outcome: string;
      if (aborted) outcome = 'aborted';
      else if (typeof who === 'number') outcome = this.refuseIp(res, who);
      else if (who === REVOKED) outcome = this.refuse(res, { reason: 'token_revoked', status: '401 Unauthorized', why: 'revoked' });
      else if (who === TOO_MANY) outcome = this.refuse(res, { reason: 'too_many_sockets', status: '429 Too Many Requests', why: 'user at cap' });
      else if (typeof who === 'string') outcome = this.refuse(res, { reason: 'unauthorized', status: '401 Unauthorized', why: who });
      else if ('tenantWaitMs' in who) outcome = this.refuseWithRetry(res, 'tenant_rate_limited', '429 Too Many Requests', who.tenantWaitMs);
      else if ('hookDownMs' in who) outcome = this.refuseWithRetry(res, 'unavailable', '503 Service Unavailable', who.hookDownMs);
      else if ('status' in who) outcome = this.refuseHook(res, who);
      else if (!this.available()) outcome = this.refuseUnavailable(res);
      else {
        outcome = this.accept(res, context, key, protocol, extensions, ip, who.identity, who.claimed);
        // The socket holds the place now, and gives it back at its close.
        claimedKey = undefined;
      }
      // A claimed place the upgrade did not take (aborted, or the node became unavailable) is given back.
      if (claimedKey !== undefined) {
        this.cap!.release(claimedKey);
        claimedKey = undefined;
      }
      if (span !== undefined) {
        span.setAttribute('sluice.outcome', outcome);
        if (typeof who === 'object' && 'identity' in who) span.setAttribute('sluice.tenant', who.identity.tenant);
        span.end();
      }
    }).catch((err: unknown) => {
      if (claimedKey !== undefined) this.cap!.release(claimedKey);
      // The window store or the key set failed (or a bug above): this
      // upgrade gets a 503, the shard goes on.
      this.ctx.lines.degraded.write({ err }, 'upgrade check failed');
      endSpan(span, 'unavailable');
      if (aborted) return;
      try {
        this.refuseUnavailable(res);
      } catch {
        // Already answered before the failure.
      }
    });
  };

  /**
   * Who may come in: the identity, or the ms to wait (IP window full), or
   * why the token was refused. Every attempt counts toward the IP window.
   */
  private async admit(ip: string, token: string | undefined, material: Material | undefined,
    span: Span | undefined): Promise<Admitted | number | string | TenantFull | HookRefused | HookDown> {
    const wait = await this.limits.connect(ip);
    if (wait !== 0) return wait;
    let identity: Identity;
    if (this.hook !== null) {
      // A node that will answer 503 anyway (draining, at WS_MAX_SOCKETS) does not ask the backend.
      if (!this.available()) return { hookDownMs: retryHint(this.ctx.cfg, Math.random) };
      const auth = span === undefined ? undefined : this.ctx.tracing!.child(span, 'sluice.hook');
      const r = await this.hook.call('connect', connectBody(this.ctx.task.nodeId, material!), (json) => parseConnectAnswer(json, Date.now()), isRefusal);
      endSpan(auth, r.ok ? (r.value.allow ? undefined : 'unauthorized') : 'unavailable');
      if (!r.ok) return { hookDownMs: r.retryAfterMs };
      if (!r.value.allow) return { status: r.value.status, message: r.value.message };
      identity = r.value.identity;
    } else {
      if (this.verifier === null) return { identity: ANONYMOUS, claimed: false };
      if (token === undefined) return 'no token';
      const auth = span === undefined ? undefined : this.ctx.tracing!.child(span, 'sluice.auth');
      const v = await this.verifier.verify(token, Date.now());
      endSpan(auth, v.ok ? undefined : 'unauthorized');
      if (!v.ok) return v.why;
      identity = v.identity;
    }
    // Two map lookups: the revocations are in memory (fed by the coordinator).
    if (this.revocations.size > 0 && this.revocations.revoked(identity, Date.now())) return REVOKED;
    const tenantWaitMs = await this.limits.tenantUpgrade(tenantConnectWindowKey(identity.tenant));
    if (tenantWaitMs !== 0) return { tenantWaitMs };
    if (this.cap === null) return { identity, claimed: false };
    const claim = await this.cap.claim(userKey(identity.tenant, identity.user));
    if (claim === 'refused') return TOO_MANY;
    return { identity, claimed: claim === 'claimed' };
  }

  /** The connect hook's refusal: 401 `unauthorized` or 403 `forbidden`, with the backend's message (escaped) when it gave one. */
  private refuseHook(res: HttpResponse, r: HookRefused): 'unauthorized' | 'forbidden' {
    const reason = r.status === 401 ? 'unauthorized' : 'forbidden';
    this.ctx.counters.upgrades[reason]++;
    if (this.ctx.lines.refused.enabled) {
      this.ctx.lines.refused.write({ reason, why: 'connect hook refused', ip: Buffer.from(res.getRemoteAddressAsText()).toString() }, 'upgrade refused');
    }
    const body = r.message === undefined ? `{"reason":"${reason}"}` : `{"reason":"${reason}","message":${JSON.stringify(r.message)}}`;
    res.cork(() => {
      res.writeStatus(r.status === 401 ? '401 Unauthorized' : '403 Forbidden').writeHeader('content-type', 'application/json').end(body, true);
    });
    return reason;
  }

  /** A plain-HTTP refusal at the upgrade; no socket is opened. `why` goes to the debug log, never a token. */
  refuse(res: HttpResponse, r: Refusal): Refusal['reason'] {
    const ctx = this.ctx;
    ctx.counters.upgrades[r.reason]++;
    if (ctx.lines.refused.enabled) {
      ctx.lines.refused.write({ reason: r.reason, why: r.why, ip: Buffer.from(res.getRemoteAddressAsText()).toString() }, 'upgrade refused');
    }
    res.cork(() => {
      res.writeStatus(r.status);
      if (r.header !== undefined) res.writeHeader(r.header[0], r.header[1]);
      res.writeHeader('content-type', 'application/json').end(`{"reason":"${r.reason}"}`, true);
    });
    return r.reason;
  }

  private refuseIp(res: HttpResponse, waitMs: number): 'ip_rate_limited' {
    return this.refuseWithRetry(res, 'ip_rate_limited', '429 Too Many Requests', waitMs);
  }

  private refuseUnavailable(res: HttpResponse): 'unavailable' {
    return this.refuseWithRetry(res, 'unavailable', '503 Service Unavailable', retryHint(this.ctx.cfg, Math.random));
  }

  /** A refusal the client may retry after `retryAfterMs`: in the body, and in whole seconds in `retry-after`. */
  private refuseWithRetry<R extends 'ip_rate_limited' | 'tenant_rate_limited' | 'unavailable'>(res: HttpResponse, reason: R, status: string, retryAfterMs: number): R {
    this.ctx.counters.upgrades[reason]++;
    this.writeRetry(res, reason, status, retryAfterMs);
    return reason;
  }

  private writeRetry(res: HttpResponse, reason: string, status: string, retryAfterMs: number): void {
    res.cork(() => {
      res.writeStatus(status)
        .writeHeader('retry-after', retryAfterSeconds(retryAfterMs))
        .writeHeader('content-type', 'application/json')
        .end(`{"reason":"${reason}","retryAfterMs":${retryAfterMs}}`, true);
    });
  }

  /** `inHandler`: called inside uWS's upgrade handler (which corks), not after a wait. */
  private accept(res: HttpResponse, context: us_socket_context_t, key: string, protocol: string, extensions: string, ip: string,
    who: Identity, claimed: boolean, inHandler = false): 'accepted' {
    const data = newSocketData(this.idPrefix, ++this.seq, who, ip,
      this.ctx.cfg.userMsgLimit > 0 && this.ctx.cfg.auth !== 'none', claimed);
    this.ctx.counters.upgrades.accepted++;
    if (inHandler) res.upgrade({ d: data }, key, protocol, extensions, context);
    // After a wait, not res.cork(): see upgradeCorked.
    else upgradeCorked(res, () => res.upgrade({ d: data }, key, protocol, extensions, context));
    return 'accepted';
  }
}
