export * from './closes.ts';
export * from './reasons.ts';
export * from './frames.ts';
export * from './codec.ts';
export * from './event-id.ts';
export * from './server-frames.ts';
