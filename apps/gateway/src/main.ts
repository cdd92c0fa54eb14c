#!/usr/bin/env node
/**
 * `pnpm start`: parses the environment once, then runs the coordinator in
 * the foreground until SIGTERM or SIGINT.
 */
import { availableParallelism } from 'node:os';
import { ConfigError, loadConfig } from '@sluice/core';
import { createLogger, loadTracing, type Tracer } from '@sluice/telemetry';
import { PROTOCOL_VERSION } from '@sluice/protocol';
import { loadJwtKey } from './auth.ts';
import { Coordinator } from './coordinator.ts';
import { watchLauncher } from './launcher.ts';
import { loadUws, NoNativeUwsError, type UwsBuild } from '@sluice/uws';

async function main(): Promise<void> {
  let loaded;
  try {
    loaded = loadConfig(process.env, { availableParallelism: availableParallelism() });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`sluice: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const { config, warnings } = loaded;
  if (config.auth === 'jwt') {
    // The key file is read here too, so that a bad one stops the start with
    // a message that names it, before any thread runs.
    try {
      loadJwtKey(config);
    } catch (err) {
      process.stderr.write(`sluice: Invalid configuration (1 problem):\n  ${(err as Error).message}\n`);
      process.exit(2);
    }
  }
  // Each shard thread imports the tracing module too; importing it here first
  // stops the start with a message naming the variable when it cannot load.
  let tracer: Tracer | null;
  try {
    tracer = await loadTracing(config.tracingModule, PROTOCOL_VERSION);
  } catch (err) {
    process.stderr.write(`sluice: Invalid configuration (1 problem):\n  WS_TRACING_MODULE: the module could not be loaded ` +
      `(${err instanceof Error ? err.message : String(err)}); accepts a path to an ES module file that registers an OpenTelemetry SDK\n`);
    process.exit(2);
  }
  // The uWS build for this Node and glibc, before anything starts: where
  // none loads natively, one message says what runs here and what to install.
  let uws: UwsBuild;
  try {
    uws = loadUws().build;
  } catch (err) {
    if (err instanceof NoNativeUwsError) {
      process.stderr.write(`sluice: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  const log = createLogger(config.logLevel, { role: 'coordinator' });
  if (tracer !== null) log.info({ module: config.tracingModule }, 'tracing: spans go to the SDK the tracing module registered');
  for (const w of warnings) log.warn(w);
  if (config.auth === 'none') {
    log.warn('WS_AUTH=none: every client is user "anonymous" of tenant "default" and may join and publish anywhere; ' +
      'set WS_AUTH=jwt for anything reachable from outside');
  }
  if (config.auth === 'hook' && config.allowedOrigins === undefined) {
    log.warn('WS_AUTH=hook without WS_ALLOWED_ORIGINS: a foreign web page can open sockets with a visitor\'s cookies ' +
      '(the connect hook gets them and the origin); set WS_ALLOWED_ORIGINS unless the backend checks origin itself');
  }
  if (config.adminToken === undefined) {
    log.warn(`ADMIN_TOKEN is unset: the admin API (publish, revoke, disconnect, subscribe, drain) is open to anyone who reaches ${
      config.adminHost}:${config.adminPort}${config.auth === 'none' ? '' : ' (ADMIN_INSECURE=1)'}`);
  }
  /** Exits 0 once the coordinator has stopped, 1 if stopping failed. */
  const exitAfter = (what: string, done: Promise<void>): void => {
    done.then(
      () => process.exit(0),
      (err: unknown) => {
        log.fatal({ err }, `${what} failed`);
        process.exit(1);
      },
    );
  };
  const drain = (reason: string): void => exitAfter('drain', coordinator.drain(reason));
  const stop = (reason: string): void => exitAfter('stop', coordinator.stop(reason));
  const coordinator = new Coordinator(config, log, {
    testHooks: process.env.SLUICE_TEST_HOOKS === '1',
    onDrainRequest: () => drain('POST /admin/drain'),
    tracer,
    uws,
  });
  // SIGTERM is the deploy: the paced drain. SIGINT (Ctrl-C) drains too; a
  // second SIGINT stops at once.
  process.on('SIGTERM', () => drain('SIGTERM'));
  // Started by npx, which exits on SIGTERM without passing it on: its exit is the SIGTERM.
  watchLauncher(process.env, (reason) => {
    log.info({ reason }, 'the npx that started this gateway is gone: draining as for SIGTERM');
    drain(reason);
  });
  let interrupted = false;
  process.on('SIGINT', () => {
    if (interrupted) stop('SIGINT again');
    else drain('SIGINT');
    interrupted = true;
  });
  coordinator.start().then(({ port, adminPort }) => {
    // The readiness contract for a parent that spawned the gateway with an
    // IPC channel (a test kit, a process manager): one message, no log text
    // to parse. The channel must not keep the process alive after a stop.
    if (process.send !== undefined) {
      process.send({ type: 'sluice.ready', port, adminPort, pid: process.pid } satisfies ReadyMessage);
      process.channel?.unref();
    }
  }, (err: unknown) => {
    log.fatal({ err }, 'start failed');
    process.stderr.write(`sluice: start failed: ${err instanceof Error ? err.message : String(err)}\n`);
    // Shards that did start must close their sockets before the process may exit.
    void coordinator.stop('start failed').finally(() => process.exit(1));
  });
}

/** What the gateway sends its parent over an IPC channel once it accepts sockets (see docs/operations.md). */
export interface ReadyMessage {
  readonly type: 'sluice.ready';
  readonly port: number;
  readonly adminPort: number;
  readonly pid: number;
}

void main();
