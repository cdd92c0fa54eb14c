/**
 * `@sluice/gateway/testing`: the kit the gateway's tests, the SDK's tests,
 * the benchmarks and the chaos harness share. A gateway process on free
 * ports whose readiness is the IPC ready message, a client on `ws` that
 * reads server frames with the protocol's decoder, a
 * Prometheus exposition reader and the client side of RFC 6455 framing.
 * Never imported by the gateway itself (main.ts and shard/index.ts bundle none of it).
 */
export {
  buildIsFresh, bundledFolders, GATEWAY_DIR, gatewayChoice, PLAIN_ENV, TEST_ADMIN_TOKEN, TEST_ENV, gatewayArgs, running, runsBuild, runUntilExit, startGateway,
  withFileLimit,
  type Gateway, type ReadyMessage, type StartOptions,
} from './gateway.ts';
export { Client, eventually, rawUpgrade, readServerFrame, Wakeups, type Frame, type RawResponse } from './client.ts';
export { metricByLabel, metricSum, metricTypes, metricValue, parseLabels, parseMetrics, seriesValue, type MetricSample } from './prometheus.ts';
export {
  Op, FrameSplitter, acceptFor, closePayload, decodeFrame, encodeFrame, upgradeRequest, type FrameHandler, type FrameSpec, type HandshakeOptions,
} from './frames.ts';
