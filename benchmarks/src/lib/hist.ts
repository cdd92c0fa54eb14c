// Latency histograms (microseconds), shipped between processes as HDR
// compressed base64 and merged in the parent.

import hdr from 'hdr-histogram-js';
import type { Histogram } from 'hdr-histogram-js';

export type { Histogram };

export function newHistogram(): Histogram {
  return hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: 3, autoResize: true });
}

export function encodeHistogram(h: Histogram): string {
  return hdr.encodeIntoCompressedBase64(h);
}

export function mergeEncoded(encoded: readonly string[]): Histogram {
  const out = newHistogram();
  for (const e of encoded) out.add(hdr.decodeFromCompressedBase64(e));
  return out;
}

export interface LatencySummary {
  count: number;
  p50Us: number;
  p99Us: number;
  p999Us: number;
  maxUs: number;
}

export function summarize(h: Histogram): LatencySummary {
  if (h.totalCount === 0) return { count: 0, p50Us: NaN, p99Us: NaN, p999Us: NaN, maxUs: NaN };
  return {
    count: h.totalCount,
    p50Us: h.getValueAtPercentile(50),
    p99Us: h.getValueAtPercentile(99),
    p999Us: h.getValueAtPercentile(99.9),
    maxUs: h.maxValue,
  };
}
