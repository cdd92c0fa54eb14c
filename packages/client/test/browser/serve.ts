/**
 * The browser test's page: the SDK bundled for the browser by esbuild at test
 * time (kept in memory), and a node:http server on 127.0.0.1 that serves it
 * with a tiny HTML page.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ENTRY = fileURLToPath(new URL('./entry.ts', import.meta.url));
const REPO = fileURLToPath(new URL('../../../../', import.meta.url));

export interface Bundle {
  readonly code: string;
  /** Every source file in the bundle, relative to the repo root. */
  readonly inputs: string[];
}

/** Bundles test/browser/entry.ts, and with it src/index.ts and @sluice/protocol, for the browser (ESM). */
export async function bundleForBrowser(): Promise<Bundle> {
  const r = await build({
    entryPoints: [ENTRY],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: ['chrome120', 'firefox120', 'safari16'],
    write: false,
    metafile: true,
    sourcemap: 'inline',
    logLevel: 'silent',
  });
  const out = r.outputFiles[0];
  if (out === undefined) throw new Error('esbuild wrote no output');
  // esbuild names inputs relative to the working directory.
  const inputs = Object.keys(r.metafile.inputs).map((p) => relative(REPO, fileURLToPath(new URL(p, `file://${process.cwd()}/`))));
  return { code: out.text, inputs };
}

export interface PageServer {
  readonly origin: string;
  readonly requests: string[];
  close(): Promise<void>;
}

const HTML = '<!doctype html><html><head><meta charset="utf-8"><title>Sluice SDK in the browser</title>' +
  '<script type="module" src="/sdk.js"></script></head><body>Sluice SDK browser test</body></html>';

export async function servePage(bundle: Bundle): Promise<PageServer> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method ?? '?'} ${req.url ?? '?'}`);
    if (req.url === '/' || req.url === '/index.html') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
      res.end(HTML);
    } else if (req.url === '/sdk.js') {
      res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-store' });
      res.end(bundle.code);
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
