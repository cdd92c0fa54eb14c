// Starts one peer as its own process: `node --import tsx src/peers/main.ts <uws|ws|sio|sio-redis>` (sio-redis: REDIS_URL too).
// Env PORT (0 = any free port), HOST (default 127.0.0.1). Tells an IPC parent
// it is ready as the gateway does, {type: 'sluice.ready', port, adminPort, pid}
// (its /stats answer on its one port); exits 0 on SIGTERM.

import { startUwsPeer } from './uws.ts';
import { startWsPeer } from './ws.ts';
import { startSioPeer } from './sio.ts';
import { startSioRedisPeer } from './sio-redis.ts';
import type { PeerHandle } from './common.ts';

const kind = process.argv[2];
const port = Number(process.env['PORT'] ?? '0');
const host = process.env['HOST'] ?? '127.0.0.1';
const starters: Record<string, (port: number, host: string) => Promise<PeerHandle>> = {
  uws: startUwsPeer,
  ws: startWsPeer,
  sio: startSioPeer,
  'sio-redis': startSioRedisPeer,
};
const start = kind === undefined ? undefined : starters[kind];
if (start === undefined || !Number.isInteger(port)) {
  process.stderr.write(`usage: PORT=<port> main.ts <${Object.keys(starters).join('|')}>\n`);
  process.exit(2);
}

const peer = await start(port, host);
process.send?.({ type: 'sluice.ready', port: peer.port, adminPort: peer.port, pid: process.pid });
process.channel?.unref();
process.once('SIGTERM', () => {
  void peer.close().then(() => process.exit(0));
});
