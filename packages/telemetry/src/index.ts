export * from './histogram.ts';
export * from './logger.ts';
export * from './metrics.ts';
export * from './thread.ts';
export * from './throttle.ts';
export * from './tracing.ts';
export * from './signature.ts';
