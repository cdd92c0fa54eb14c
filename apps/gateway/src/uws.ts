/**
 * The gateway's view of uWebSockets.js: which build loads, and the upgrade
 * cork that works around a bug every build on the registry has. Both live in
 * @sluice/uws (shared with the benchmarks' raw-uWS peer, so each runtime
 * measures the same build).
 */
export { loadUws, NoNativeUwsError, probeCorkInPlace, upgradeCorked, useUpgradeCork, type Uws, type UwsBuild } from '@sluice/uws';
export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket, us_socket_context_t, WebSocket } from '@sluice/uws';
