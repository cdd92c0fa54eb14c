/** What the dashboard's forms get from the page: reads, and actions that are confirmed and logged. */

export interface Outcome {
  readonly ok: boolean;
  readonly text: string;
}

export interface Ctx {
  /** GET `path` with the page's token; a 401 sends the page back to the login (and still rejects). */
  read<T>(path: string): Promise<T>;
  /** POST `body` to `path` with the page's token and `X-Sluice-Source: ui`; a 401 as for `read`. */
  write<T>(path: string, body: unknown): Promise<T>;
  /**
   * An action: asks `confirmText` in the dialog; when confirmed, runs `run`
   * and logs `action` with its result (run's text) or its error message.
   * Undefined when cancelled.
   */
  act(action: string, confirmText: string, run: () => Promise<string>): Promise<Outcome | undefined>;
}

/** The tenant field's value to send: undefined (the gateway's `default`) when empty. */
export function tenantOf(field: string): string | undefined {
  const t = field.trim();
  return t === '' ? undefined : t;
}

/** The tenant as the confirmation texts name it. */
export function tenantName(field: string): string {
  return tenantOf(field) ?? 'default';
}

/** A query string from the fields that are set. */
export function query(params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}
