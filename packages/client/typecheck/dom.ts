// Compiled with the DOM library and no Node types (tsconfig.browser.json):
// src needs nothing from Node, and the browser's WebSocket fits the option.
import { SluiceClient, type WebSocketConstructor } from '../src/index.ts';

const ctor: WebSocketConstructor = WebSocket;
export const client = new SluiceClient({ url: 'wss://example.test/ws', WebSocket: ctor, token: () => 'a.b.c' });
