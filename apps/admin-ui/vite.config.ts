// The admin page's build: a static dist/ (index.html + hashed assets) that
// the gateway serves at /ui/ under a strict CSP (script-src 'self',
// style-src 'self', connect-src 'self'): no inline script or style, no
// module-preload polyfill (an inline script), nothing from another origin.
import { defineConfig } from 'vite';

export default defineConfig({
  base: '/ui/',
  // JSX for Preact through Vite's own transformer (Oxc): no plugin needed.
  oxc: {
    jsx: { runtime: 'automatic', importSource: 'preact' },
  },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    modulePreload: { polyfill: false },
    // Never inline assets as data: URLs into scripts or styles; emit files.
    assetsInlineLimit: 0,
    sourcemap: false,
    reportCompressedSize: true,
  },
  server: {
    // `pnpm dev`: the admin API of a local gateway (ADMIN_PORT 9090) behind the dev server.
    proxy: {
      '/v1': 'http://127.0.0.1:9090',
      '/admin': 'http://127.0.0.1:9090',
    },
  },
});
