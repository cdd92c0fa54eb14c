/** Small helpers that work the same in browsers and Node. */

/** Byte length of `s` encoded as UTF-8 (what the server measures), without encoding it. */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3; // a BMP character, or a lone surrogate (encoded as U+FFFD)
  }
  return n;
}


interface CryptoLike {
  getRandomValues<T extends Uint8Array>(array: T): T;
}

/**
 * A random id for idempotency keys: 16 bytes from the platform's CSPRNG
 * (`crypto.getRandomValues`, in browsers and in Node 20), else from `random`.
 * Keys must not collide across every client of a tenant.
 */
export function randomId(random: () => number): string {
  const bytes = new Uint8Array(16);
  const c = (globalThis as { crypto?: CryptoLike }).crypto;
  if (c !== undefined && typeof c.getRandomValues === 'function') c.getRandomValues(bytes);
  else for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(random() * 256) & 0xff;
  let s = '';
  for (const b of bytes) s += b.toString(16).padStart(2, '0');
  return s;
}
