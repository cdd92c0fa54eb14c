// WS_TRACING_MODULE of the `sluice-traced` benchmark target: an OpenTelemetry
// SDK that samples and records every span (attributes, links, status) and
// hands each finished span to a processor that drops it. What it measures is
// the gateway's cost of making spans; an exporter's own cost (batching,
// serialization, the network) comes on top and depends on the operator's.
import { trace } from '@opentelemetry/api';
import { AlwaysOnSampler, BasicTracerProvider } from '@opentelemetry/sdk-trace-base';

let ended = 0;
const drop = {
  onStart() {},
  onEnd() {
    ended++;
  },
  forceFlush: () => Promise.resolve(),
  shutdown: () => Promise.resolve(),
};
trace.setGlobalTracerProvider(new BasicTracerProvider({ sampler: new AlwaysOnSampler(), spanProcessors: [drop] }));
globalThis.sluiceBenchSpansEnded = () => ended;
