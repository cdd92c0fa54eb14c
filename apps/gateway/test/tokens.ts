/** HS256 tokens for the control tests (control.test.ts, control-cluster.test.ts). */
import { SignJWT } from 'jose';

export const SECRET = 'test-secret-of-at-least-thirty-two-characters';
const enc = new TextEncoder();

export interface Claims {
  sub?: string;
  tenant?: string;
  topics?: string[];
  publish?: string[];
  jti?: string;
}

/** A token (user u1 by default) issued at `iat` (seconds; now by default), valid 10 minutes. */
export function token(claims: Claims = {}, iat?: number): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ sub: 'u1', ...claims }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt(iat ?? now)
    .setExpirationTime(now + 600).sign(enc.encode(SECRET));
}

export const bearer = (t: string): { headers: Record<string, string> } => ({ headers: { authorization: `Bearer ${t}` } });
