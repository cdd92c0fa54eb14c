// Run by test/package.test.ts with node, in an empty project outside the
// workspace where the packed tarball was installed with npm: it imports
// @sluice/client by its package name (dist/index.js), connects to the gateway
// at argv[2], subscribes to argv[3], publishes, waits for its own event, and
// prints one JSON line for the test to check.
import { SluiceClient, SluiceError } from '@sluice/client';

const [url, topic] = process.argv.slice(2);
if (url === undefined || topic === undefined) throw new Error('usage: consumer.mjs <ws url> <topic>');

// Node 22 and later have a global WebSocket; Node 20 takes the ws package.
const webSocket = globalThis.WebSocket === undefined ? 'ws' : 'global';
const WebSocket = globalThis.WebSocket ?? (await import('ws')).default;

setTimeout(() => {
  console.error(`consumer: no event back within 10 s (client state ${client.state})`);
  process.exit(2);
}, 10_000).unref();

const client = new SluiceClient({ url, WebSocket });
const errors = [];
client.on('error', (err) => errors.push(`${err.code}: ${err.message}`));
const connected = new Promise((resolve) => client.on('connected', resolve));
let deliver;
const received = new Promise((resolve) => (deliver = resolve));
const sub = client.subscribe(topic, (event) => deliver(event));
client.connect();

const welcome = await connected;
const joined = await sub.ready;
const published = await client.publish(topic, { from: 'node', n: 1, text: 'grüße ✓' });
const event = await received;
await client.close();

console.log(JSON.stringify({
  webSocket,
  sluiceErrorIsError: new SluiceError('closed', 'x') instanceof Error,
  connectionId: welcome.connectionId,
  maxFrameBytes: welcome.limits.maxFrameBytes,
  joined,
  published,
  event,
  lastId: sub.lastId,
  state: client.state,
  errors,
}));
