// The signature of what Sluice POSTs to the application (lifecycle
// webhooks, hook calls with WS_HOOK_SECRET, the push worker's calls):
// `x-sluice-timestamp: <ms>` and `x-sluice-signature: v1=<hex>`, the
// HMAC-SHA256 of `<timestamp>.<body>`. The timestamp is signed, so a
// receiver that refuses old ones refuses replays.
import { createHmac, timingSafeEqual } from 'node:crypto';

/** `v1=<hex HMAC-SHA256 of "<timestamp>.<body>">`. */
export function signBody(secret: string, timestamp: string, body: string): string {
  return `v1=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/**
 * Whether a signed request is genuine and fresh: the signature matches
 * (compared in constant time) and the timestamp is within `toleranceMs` of
 * `now` (default 5 minutes).
 */
export function verifyBody(secret: string, signature: string | undefined, timestamp: string | undefined, body: string, now: number,
  toleranceMs = 300_000): boolean {
  if (signature === undefined || timestamp === undefined || !/^[0-9]{1,15}$/.test(timestamp)) return false;
  if (Math.abs(now - Number(timestamp)) > toleranceMs) return false;
  const want = Buffer.from(signBody(secret, timestamp, body));
  const got = Buffer.from(signature);
  return got.length === want.length && timingSafeEqual(got, want);
}
