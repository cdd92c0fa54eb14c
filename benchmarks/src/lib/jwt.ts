// HS256 tokens for the scenarios that run the gateway with WS_AUTH=jwt (S11,
// S12, S13), signed by the load generator itself with node:crypto (no JWT
// library on the client side). Every token names its socket: its own `jti`,
// and, unless the spec names one user for all, its own `sub`. The gateway
// keeps verified tokens in a per-shard cache, so a measurement of what a
// verification costs needs a token string the gateway has not seen: a new
// `jti` per socket and per refresh round gives that.

import { createHmac } from 'node:crypto';

/** A secret the gateway accepts (WS_JWT_SECRET: at least 32 characters). */
export const BENCH_JWT_SECRET = 'sluice-benchmarks-hs256-secret-0123456789';

/** How the load generator makes the tokens of a run (sent to it over IPC: plain JSON). */
export interface AuthSpec {
  readonly secret: string;
  /** One user for every socket; null: socket i is user `<userPrefix><i>`. */
  readonly sub: string | null;
  readonly userPrefix: string;
  readonly tenant: string;
  /** exp = iat + ttlS (+ the refresh round, so that every refresh moves the socket's expiry). */
  readonly ttlS: number;
  /** Topic patterns of the `topics` and `publish` claims. */
  readonly topics: readonly string[];
  readonly publish: readonly string[];
  /** Prefix of every `jti`: `<jtiPrefix>-<round>-<id>`. */
  readonly jtiPrefix: string;
}

export function authSpec(over: Partial<AuthSpec> = {}): AuthSpec {
  return {
    secret: BENCH_JWT_SECRET, sub: null, userPrefix: 'u', tenant: 'default', ttlS: 3600,
    topics: ['bench.*'], publish: ['bench.*'], jtiPrefix: 'bench', ...over,
  };
}

/** The gateway's variables for that spec's tokens. */
export function jwtEnv(spec: AuthSpec = authSpec()): Record<string, string> {
  return { WS_AUTH: 'jwt', WS_JWT_SECRET: spec.secret };
}

const HEADER = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));

function b64url(s: string): string {
  return Buffer.from(s, 'utf8').toString('base64url');
}

/** A compact HS256 JWS of `claims`. */
export function signHs256(claims: Readonly<Record<string, unknown>>, secret: string, header = HEADER): string {
  const input = `${header}.${b64url(JSON.stringify(claims))}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

/** The user of socket `id` under `spec`. */
export function userOf(spec: AuthSpec, id: number): string {
  return spec.sub ?? `${spec.userPrefix}${id}`;
}

/** The token of socket `id` for round `round` (0: the upgrade; 1, 2, ...: refreshes), issued at `nowS`. */
export function tokenFor(spec: AuthSpec, id: number, round: number, nowS: number): string {
  return signHs256({
    sub: userOf(spec, id), tenant: spec.tenant, iat: nowS, exp: nowS + spec.ttlS + round,
    jti: `${spec.jtiPrefix}-${round}-${id}`, topics: spec.topics, publish: spec.publish,
  }, spec.secret);
}
