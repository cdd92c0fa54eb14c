import uWS from 'uWebSockets.js';

/**
 * The uWS package silently falls back to a slow pure-JavaScript server when
 * its native binary does not load. Sluice refuses to run on the fallback.
 */
export function loadNativeUws(): typeof uWS {
  if (!/\[native code\]/.test(String(uWS.App))) {
    throw new NativeUwsMissingError();
  }
  return uWS;
}

export class NativeUwsMissingError extends Error {
  constructor() {
    super(
      `uWebSockets.js did not load its native binary for node ${process.version} ` +
        `(${process.platform}-${process.arch}, ABI ${process.versions.modules}) and fell back to a JavaScript ` +
        'implementation; Sluice refuses to run on it. Install the uWebSockets.js build that matches this Node ' +
        '(see docs/architecture.md) and unset UWS_USE_FALLBACK.',
    );
    this.name = 'NativeUwsMissingError';
  }
}

export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket, us_socket_context_t, WebSocket } from 'uWebSockets.js';
