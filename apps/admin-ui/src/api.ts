/**
 * The admin API, same origin only: every request is a relative URL, with
 * `Authorization: Bearer <token>` when the page has a token, and every POST
 * carries `X-Sluice-Source: ui` (the gateway logs the actions that do).
 */

/** A request that did not succeed: the gateway's answer (`status` > 0) or no answer at all (`status` 0). */
export class ApiError extends Error {
  constructor(
    /** The HTTP status; 0 when the gateway did not answer. */
    readonly status: number,
    /** The answer's `reason` (`unauthorized`, `bad_request`...); `network` when there was no answer. */
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }

  /** The token was refused (or one is needed). */
  get unauthorized(): boolean {
    return this.status === 401;
  }
}

export interface RequestOptions {
  readonly token: string | undefined;
  readonly signal?: AbortSignal;
}

/** GET `path` (relative, with its query); the parsed JSON answer. */
export function get<T>(path: string, opts: RequestOptions): Promise<T> {
  return request<T>('GET', path, undefined, opts);
}

/** POST `body` as JSON to `path`; the parsed JSON answer (`{}` for an empty one). */
export function post<T>(path: string, body: unknown, opts: RequestOptions): Promise<T> {
  return request<T>('POST', path, body, opts);
}

async function request<T>(method: 'GET' | 'POST', path: string, body: unknown, opts: RequestOptions): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (opts.token !== undefined) headers.Authorization = `Bearer ${opts.token}`;
  if (method === 'POST') {
    headers['Content-Type'] = 'application/json';
    headers['X-Sluice-Source'] = 'ui';
  }
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: method === 'POST' ? JSON.stringify(body) : null,
      cache: 'no-store',
      credentials: 'omit',
      signal: opts.signal ?? null,
    });
  } catch (err) {
    throw new ApiError(0, 'network', err instanceof Error ? err.message : String(err));
  }
  let text: string;
  try {
    text = await res.text();
  } catch (err) {
    throw new ApiError(0, 'network', err instanceof Error ? err.message : String(err));
  }
  let parsed: unknown = undefined;
  if (text !== '') {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
  }
  if (!res.ok) {
    const obj = isRecord(parsed) ? parsed : {};
    const reason = typeof obj.reason === 'string' ? obj.reason : `http_${res.status}`;
    const message = typeof obj.message === 'string' && obj.message !== ''
      ? obj.message
      : `${res.status} ${res.statusText || 'error'}${text !== '' && parsed === undefined ? `: ${text.slice(0, 200)}` : ''}`;
    throw new ApiError(res.status, reason, message);
  }
  if (text === '') return {} as T;
  if (parsed === undefined) throw new ApiError(res.status, 'bad_answer', `the gateway answered ${res.status} with something that is not JSON`);
  return parsed as T;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The message to show for any failure. */
export function messageOf(err: unknown): string {
  if (err instanceof ApiError) return err.status === 0 ? `The gateway did not answer: ${err.message}` : err.message;
  return err instanceof Error ? err.message : String(err);
}
