export { SluiceClient } from './client.ts';
export {
  type ClientEvents,
  type ClientState,
  type ConnectedEvent,
  type DisconnectedEvent,
  type EventHandler,
  type JoinResult,
  type PresenceEvent,
  type PresenceState,
  type PresenceUser,
  type PublishOptions,
  type PublishResult,
  type ReconnectingEvent,
  type RecoveredEvent,
  type SubscribedEvent,
  type UnsubscribedEvent,
  type SluiceClientOptions,
  type SluiceEvent,
  type SubscribeOptions,
  type Subscription,
  type SubscriptionEvents,
  type TokenRequest,
} from './types.ts';
export { SluiceError, type SluiceErrorCode, type SluiceErrorDetails } from './errors.ts';
export type { WebSocketConstructor, WebSocketLike } from './socket.ts';
export { afterClose, afterRefusal, type Backoff, DEFAULT_BACKOFF, type Disposition, fullJitter, parseReason, reconnectDelay } from './policy.ts';
export { Pacer } from './pacer.ts';
