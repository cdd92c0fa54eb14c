/**
 * What every part of a shard shares: its task and config, its logger with
 * the throttled line kinds, its counters, and its tracing (null without
 * WS_TRACING_MODULE). Made once per shard by the composition root.
 */
import type { Config } from '@sluice/core';
import { createLogger, type Logger, LogThrottle, type SuppressedCounts, suppressedCounts } from '@sluice/telemetry';
import type { ShardCounters } from './metrics.ts';
import { newCounters } from './metrics.ts';
import type { ShardTask } from './task.ts';
import type { ShardTracing } from './tracing.ts';

/** Lines of one kind (rejected frames, refused upgrades, closed abusers) a shard writes per second at most. */
const LOG_LINES_PER_SECOND = 20;

type Level = 'debug' | 'info' | 'warn';

/** A kind of log line a flood of bad input could multiply: at most LOG_LINES_PER_SECOND of it per second, with how many were left out. */
export class ThrottledLine {
  private readonly throttle: LogThrottle;

  constructor(private readonly log: Logger, private readonly level: Level, suppressed: SuppressedCounts) {
    this.throttle = new LogThrottle(LOG_LINES_PER_SECOND, level, suppressed);
  }

  /** Whether a line of this kind would be written at all (skip building its fields when not). */
  get enabled(): boolean {
    return this.log.isLevelEnabled(this.level);
  }

  write(fields: Record<string, unknown>, msg: string): void {
    const left = this.throttle.take(Date.now());
    if (left < 0) return;
    if (left > 0) fields.suppressed = left;
    this.log[this.level](fields, msg);
  }
}

export class ShardContext {
  readonly cfg: Config;
  /**
   * WS_COMPRESSION is on: events (and presence_state) go out with uWS's
   * `compress` flag, deflated for the sockets that negotiated
   * permessage-deflate; replies, pongs and acks never (a few dozen bytes,
   * where deflate costs more than it saves).
   */
  readonly compressEvents: boolean;
  readonly log: Logger;
  readonly counters: ShardCounters = newCounters();
  /** Log lines left out by the throttle, by level. */
  readonly suppressed = suppressedCounts();
  readonly lines: { readonly rejected: ThrottledLine; readonly refused: ThrottledLine; readonly closed: ThrottledLine;
    readonly degraded: ThrottledLine; readonly hooks: ThrottledLine };

  constructor(readonly task: ShardTask, readonly tracing: ShardTracing | null) {
    this.cfg = task.config;
    this.compressEvents = this.cfg.compression !== 'off';
    this.log = createLogger(this.cfg.logLevel, { shard: task.shard });
    this.lines = {
      rejected: new ThrottledLine(this.log, 'debug', this.suppressed),
      refused: new ThrottledLine(this.log, 'debug', this.suppressed),
      closed: new ThrottledLine(this.log, 'info', this.suppressed),
      degraded: new ThrottledLine(this.log, 'warn', this.suppressed),
      hooks: new ThrottledLine(this.log, 'warn', this.suppressed),
    };
  }
}
