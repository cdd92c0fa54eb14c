/** Pure helpers: numbers and times as the page prints them, and input parsing. No DOM here (test/format.test.ts). */

const KIB = 1024;
const MIB = KIB * 1024;
const GIB = MIB * 1024;

/** Bytes for people: `512 B`, `1.5 KiB`, `12.3 MiB`, `1.21 GiB`. */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return '–';
  const abs = Math.abs(n);
  if (abs < KIB) return `${Math.round(n)} B`;
  if (abs < MIB) return `${trim(n / KIB)} KiB`;
  if (abs < GIB) return `${trim(n / MIB)} MiB`;
  return `${trim(n / GIB)} GiB`;
}

/** Mebibytes without the unit (heap / RSS columns): `45.2`. */
export function formatMiB(n: number): string {
  return Number.isFinite(n) ? trim(n / MIB) : '–';
}

/** Three significant digits at most, no trailing zeros: 1234 → `1234`, 12.345 → `12.3`, 0.256 → `0.26`. */
function trim(x: number): string {
  const abs = Math.abs(x);
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : 2;
  return String(Number(x.toFixed(digits)));
}

/** A rate per second: `0`, `0.25`, `3.5`, `12.3`, `1250`. */
export function formatRate(n: number): string {
  if (!Number.isFinite(n)) return '–';
  if (n === 0) return '0';
  return trim(n);
}

/** The sum of a breakdown's values (`rates.upgrades` by outcome...). */
export function sum(by: Readonly<Record<string, number>> | undefined): number {
  let s = 0;
  for (const v of Object.values(by ?? {})) if (Number.isFinite(v)) s += v;
  return s;
}

/** The non-zero entries of a breakdown, largest first. */
export function breakdown(by: Readonly<Record<string, number>> | undefined): [string, number][] {
  return Object.entries(by ?? {}).filter(([, v]) => Number.isFinite(v) && v > 0).sort((a, b) => b[1] - a[1]);
}

/** A breakdown on one line: `accepted 12 · over_budget 3.5`; `none` when every value is 0. */
export function formatBreakdown(by: Readonly<Record<string, number>> | undefined): string {
  const parts = breakdown(by).map(([k, v]) => `${k} ${formatRate(v)}`);
  return parts.length === 0 ? 'none' : parts.join(' · ');
}

/** A duration for people: `850 ms`, `12 s`, `3 min 5 s`, `2 h 4 min`, `3 d 1 h`. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 === 0 ? `${m} min` : `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return m % 60 === 0 ? `${h} h` : `${h} h ${m % 60} min`;
  const d = Math.floor(h / 24);
  return h % 24 === 0 ? `${d} d` : `${d} d ${h % 24} h`;
}

/** Whole seconds, at least 0: how long ago `then` was at `now`. */
export function secondsAgo(then: number, now: number): number {
  return Math.max(0, Math.floor((now - then) / 1000));
}

/** A clock time `HH:MM:SS` in the browser's zone. */
export function clock(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A comma-separated list of user ids: trimmed, without empties or repeats. */
export function parseUserList(text: string): string[] {
  const out: string[] = [];
  for (const part of text.split(',')) {
    const u = part.trim();
    if (u !== '' && !out.includes(u)) out.push(u);
  }
  return out;
}

export type Parsed = { ok: true; value: unknown } | { ok: false; message: string };

/** The publish form's data: JSON, or a message that says why not. */
export function parseJson(text: string): Parsed {
  if (text.trim() === '') return { ok: false, message: 'Data is empty: enter a JSON value (for example {"text":"hi"} or "hi").' };
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (err) {
    return { ok: false, message: `Data is not valid JSON: ${err instanceof Error ? err.message : String(err)}` };
  }
}

