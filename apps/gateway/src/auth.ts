/**
 * Token verification for WS_AUTH=jwt, with jose. One Verifier per shard
 * thread: the key is imported once, and tokens verified recently are kept so
 * that a reconnect storm of the same clients costs a map lookup, not a
 * signature check, per upgrade.
 */
import { createPublicKey, createSecretKey, type KeyObject, webcrypto } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { errors, jwtVerify, type JWTVerifyOptions } from 'jose';
import { type Config, type Identity, identityFromClaims } from '@sluice/core';

export type Verified = { readonly ok: true; readonly identity: Identity } | { readonly ok: false; readonly why: string };

/** How many verified tokens a shard remembers. */
const CACHE_SIZE = 10_000;

/** The key and algorithm a config names; throws a message naming the variable when the key file is unusable. */
export function loadJwtKey(cfg: Config): { key: KeyObject; algorithms: string[] } {
  // A KeyObject, not bytes: jose converts a public one once and keeps the result (the Verifier imports a secret itself).
  if (cfg.jwtSecret !== undefined) return { key: createSecretKey(Buffer.from(cfg.jwtSecret, 'utf8')), algorithms: ['HS256'] };
  const file = cfg.jwtPublicKeyFile;
  if (file === undefined) throw new Error('WS_AUTH=jwt needs WS_JWT_SECRET or WS_JWT_PUBLIC_KEY_FILE');
  let pem: string;
  try {
    pem = readFileSync(file, 'utf8');
  } catch (err) {
    throw new Error(`WS_JWT_PUBLIC_KEY_FILE=${JSON.stringify(file)}: cannot read it (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
      { cause: err });
  }
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (err) {
    throw new Error(`WS_JWT_PUBLIC_KEY_FILE=${JSON.stringify(file)}: expected a PEM public key (RSA or EC P-256)`, { cause: err });
  }
  if (key.asymmetricKeyType === 'rsa') return { key, algorithms: ['RS256'] };
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1') return { key, algorithms: ['ES256'] };
  throw new Error(`WS_JWT_PUBLIC_KEY_FILE=${JSON.stringify(file)}: expected an RSA (RS256) or EC P-256 (ES256) public key, ` +
    `got ${key.asymmetricKeyType ?? 'unknown'}${key.asymmetricKeyDetails?.namedCurve === undefined ? '' : ` ${key.asymmetricKeyDetails.namedCurve}`}`);
}

export class Verifier {
  /**
   * What jose verifies with. An HMAC secret is imported into WebCrypto once
   * here: jose 6 exports a secret KeyObject and imports it again on every
   * call (about 0.1 ms of CPU per token, measured by S11), where it keeps
   * the CryptoKey of a public KeyObject in a WeakMap.
   */
  private readonly key: KeyObject | Promise<webcrypto.CryptoKey>;
  private readonly options: JWTVerifyOptions;
  /** Verified tokens, oldest first (a Map keeps insertion order). */
  private readonly cache = new Map<string, Identity>();

  constructor(cfg: Config) {
    const { key, algorithms } = loadJwtKey(cfg);
    this.key = key.type === 'secret'
      ? webcrypto.subtle.importKey('raw', key.export(), { name: 'HMAC', hash: 'SHA-256' }, false, ['verify'])
      : key;
    this.options = {
      algorithms,
      requiredClaims: ['exp', 'sub'],
      ...(cfg.jwtIssuer === undefined ? {} : { issuer: cfg.jwtIssuer }),
      ...(cfg.jwtAudience === undefined ? {} : { audience: cfg.jwtAudience }),
    };
  }

  /**
   * Verifies a token at `now`. The reason of a refusal is for debug logs
   * only: it never contains the token.
   */
  async verify(token: string, now: number): Promise<Verified> {
    const cached = this.cache.get(token);
    if (cached !== undefined) {
      if (cached.expiresAt > now) return { ok: true, identity: cached };
      this.cache.delete(token);
      return { ok: false, why: 'token expired' };
    }
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(token, await this.key, { ...this.options, currentDate: new Date(now) }));
    } catch (err) {
      return { ok: false, why: describe(err) };
    }
    const r = identityFromClaims(payload);
    if (!r.ok) return { ok: false, why: r.message };
    if (this.cache.size >= CACHE_SIZE) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(token, r.identity);
    return r;
  }
}

function describe(err: unknown): string {
  if (err instanceof errors.JWTExpired) return 'token expired';
  if (err instanceof errors.JWTClaimValidationFailed) return `claim ${err.claim} ${err.reason}`;
  if (err instanceof errors.JWSSignatureVerificationFailed) return 'bad signature';
  if (err instanceof errors.JOSEAlgNotAllowed) return 'algorithm not allowed';
  if (err instanceof errors.JOSEError) return err.code;
  return 'not a token';
}

export interface TokenSources {
  readonly authorization: string;
  readonly protocols: string;
  readonly query: string;
}

const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i;

/** The token of an upgrade: `Authorization: Bearer`, else a `bearer.` subprotocol, else `?token=`. */
export function tokenFrom(src: TokenSources): string | undefined {
  if (src.authorization !== '') {
    const m = BEARER.exec(src.authorization);
    return m === null ? undefined : m[1];
  }
  if (src.protocols.includes('bearer.')) {
    for (const p of src.protocols.split(',')) {
      const t = p.trim();
      if (t.startsWith('bearer.') && t.length > 7) return t.slice(7);
    }
  }
  if (src.query !== '') {
    for (const pair of src.query.split('&')) {
      if (pair.startsWith('token=')) {
        try {
          return decodeURIComponent(pair.slice(6));
        } catch {
          return undefined;
        }
      }
    }
  }
  return undefined;
}
