import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * How many TCP connections accepted on `port` this process still holds,
 * read from the kernel (Linux /proc). uWS gives no count of sockets it is
 * still closing: `end()` fires the close handler at once while the socket
 * waits for the peer's FIN. A worker thread that exits while uWS holds such a
 * socket aborts the whole process, so the coordinator waits for this count
 * to reach zero before it ends the shard threads.
 * Returns undefined where /proc is not readable.
 */
export function acceptedSocketsOnPort(port: number): number | undefined {
  let fds: string[];
  try {
    fds = readdirSync('/proc/self/fd');
  } catch {
    return undefined;
  }
  const inodes = new Set<string>();
  for (const fd of fds) {
    try {
      const link = readlinkSync(`/proc/self/fd/${fd}`);
      if (link.startsWith('socket:[')) inodes.add(link.slice(8, -1));
    } catch {
      // The fd closed between readdir and readlink.
    }
  }
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  let n = 0;
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10) continue;
      const local = cols[1]!;
      const state = cols[3]!;
      const inode = cols[9]!;
      if (state === '0A' || inode === '0') continue; // listening, or no longer owned (TIME_WAIT)
      if (local.slice(local.indexOf(':') + 1) === hexPort && inodes.has(inode)) n++;
    }
  }
  return n;
}
