/** PORT=0: finding a port every shard can bind with SO_REUSEPORT. */
import { readFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';

/**
 * PORT=0: a free port for the shards to share. Not one from the kernel's
 * ephemeral range: the coordinator has to let go of its probe before the
 * shards bind the port with SO_REUSEPORT, and in that moment the kernel
 * could hand the same port to another process asking for port 0 (another
 * gateway starting at the same time would then share the listeners, and
 * the kernel would spread connections over both). Below the range no
 * port-0 bind ever lands, so only a random draw that matches another's
 * could collide. Falls back to a kernel-chosen port where the range leaves
 * no room below it.
 */
export async function freePort(host: string): Promise<number> {
  const [low] = ephemeralRange();
  const from = 10_000;
  if (low - from >= 1000) {
    for (let i = 0; i < 50; i++) {
      const port = from + Math.floor(Math.random() * (low - from));
      if (await probe(host, port) !== undefined) return port;
    }
  }
  const port = await probe(host, 0);
  if (port === undefined) throw new Error(`no free port on ${host}`);
  return port;
}

/** Binds `port` (0: the kernel picks) without SO_REUSEPORT and lets go: the port it got, or undefined when it is taken. */
function probe(host: string, port: number): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' || err.code === 'EACCES' ? resolve(undefined) : reject(err)));
    srv.listen(port, host, () => {
      const got = (srv.address() as AddressInfo).port;
      srv.close(() => resolve(got));
    });
  });
}

function ephemeralRange(): [number, number] {
  try {
    const [lo, hi] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (Number.isInteger(lo) && Number.isInteger(hi)) return [lo!, hi!];
  } catch {
    // Not Linux, or /proc not readable: the kernel's default range.
  }
  return [32768, 60999];
}
