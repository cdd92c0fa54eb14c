export * from './bus.ts';
export * from './client.ts';
