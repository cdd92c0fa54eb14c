// One clock for every process of a run: CLOCK_MONOTONIC in microseconds, so a
// timestamp written by the publisher's process can be subtracted from the
// receive time in a subscriber's process.

import { T_BASE } from './codec.ts';

export function monoUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/** The 15-digit T written into frames (see codec.ts). */
export function stampNow(): number {
  return T_BASE + monoUs();
}
