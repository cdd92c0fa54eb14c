// The push worker's entry point (`pnpm push-worker`): see worker.ts and docs/operations.md, "Offline push".
import { pino } from 'pino';
import { loadPushConfig, PushConfigError } from './config.ts';
import { PushWorker } from './worker.ts';

let cfg;
try {
  cfg = loadPushConfig(process.env);
} catch (err) {
  if (err instanceof PushConfigError) {
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  throw err;
}
const log = pino({ level: cfg.logLevel, base: { service: 'sluice-push-worker' } });
const worker = new PushWorker(cfg, log);
const { metricsPort } = await worker.start();
log.info({ queue: cfg.queue, metricsPort, concurrency: cfg.concurrency, attempts: cfg.attempts }, 'push worker ready');
let stopping = false;
const stop = (signal: string): void => {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'push worker stopping');
  worker.stop().then(() => {
    log.info('push worker stopped');
    process.exit(0);
  }, (err: unknown) => {
    log.error({ err }, 'push worker stop failed');
    process.exit(1);
  });
};
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));
