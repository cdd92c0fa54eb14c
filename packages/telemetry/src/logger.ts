import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

/**
 * JSON lines on stdout, written synchronously to fd 1 so that a line logged
 * just before a worker thread dies is not lost in a thread-to-main pipe.
 * Secrets are redacted wherever they appear in a logged object.
 */
export function createLogger(level: LevelWithSilent, bindings: Record<string, unknown> = {}): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid, ...bindings },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: {
        paths: ['adminToken', '*.adminToken', 'jwtSecret', '*.jwtSecret', 'token', '*.token', 'authorization', '*.authorization'],
        censor: '[redacted]',
      },
    },
    pino.destination({ dest: 1, sync: true }),
  );
}
