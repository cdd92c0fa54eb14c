export * from './bus.ts';
export * from './client.ts';
export * from './window-store.ts';
export * from './sharded.ts';
export * from './health.ts';
export * from './user-sockets.ts';
export * from './replica-acks.ts';
