export * from './config.ts';
export * from './event-id.ts';
export * from './fixed-window.ts';
export * from './jitter.ts';
export * from './history.ts';
export * from './idempotency.ts';
export * from './broker.ts';
export * from './backpressure.ts';
