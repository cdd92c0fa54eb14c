/** Frame shapes of protocol v1, as decoded (client to server) or encoded (server to client). */

export const PROTOCOL_VERSION = 'sluice.v1';

/** Topic names the client sees. Inside the gateway topics are namespaced per tenant. */
export const TOPIC_PATTERN = /^[A-Za-z0-9:_.-]{1,200}$/;
export const MAX_REF_LENGTH = 64;
export const MAX_IDEMPOTENCY_KEY_LENGTH = 128;
export const MAX_KEY_LENGTH = 200;
/** Stream ids: `<ms>-<seq>`, as Redis streams write them. */
export const EVENT_ID_PATTERN = /^(\d{1,15})-(\d{1,15})$/;
/**
 * W3C Trace Context `traceparent`: version 00 exactly; a later version may
 * append fields, which are ignored. Version ff and all-zero ids are invalid.
 * The appended fields are printable ASCII without `"` and `\`: the gateway
 * splices the value into every subscriber's event frame as is, so a quote
 * would let a publisher write fields (a forged id) into that frame.
 */
export const TRACEPARENT_PATTERN =
  /^(?:00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}|(?!ff|00)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}(?:-[\x21\x23-\x5b\x5d-\x7e]*)?)$/;

/** How a published event travels. Chosen by the publisher. */
export const EventClass = {
  /** Stored in history, given an id, never dropped silently. */
  Durable: 0,
  /** Only the newest per (topic, key) matters; superseded ones may be dropped. */
  Keyed: 1,
  /** Not stored, no id, the first thing dropped for a congested subscriber. */
  Ephemeral: 2,
} as const;
export type EventClass = (typeof EventClass)[keyof typeof EventClass];

export interface JoinFrame {
  readonly type: 'join';
  readonly ref: string | undefined;
  readonly topic: string;
  readonly since: string | undefined;
}

export interface LeaveFrame {
  readonly type: 'leave';
  readonly ref: string | undefined;
  readonly topic: string;
}

export interface PublishFrame {
  readonly type: 'publish';
  readonly ref: string | undefined;
  readonly topic: string;
  /** `data` re-serialized once, ready to splice into the event frame. */
  readonly dataJson: string;
  readonly cls: EventClass;
  readonly key: string | undefined;
  readonly idempotencyKey: string | undefined;
  readonly traceparent: string | undefined;
}

export interface PingFrame {
  readonly type: 'ping';
  readonly ref: string | undefined;
}

/** A new token for the open socket (WS_AUTH=jwt): same user and tenant, new expiry and rights. */
export interface RefreshFrame {
  readonly type: 'refresh';
  readonly ref: string | undefined;
  readonly token: string;
}

/** The longest token a `refresh` may carry: the upgrade's headers are capped at WS_MAX_HEADER_BYTES (8192 by default) too. */
export const MAX_TOKEN_LENGTH = 8192;

/** Asks who is present on a presence topic (WS_PRESENCE_TOPICS); the reply's data is as in `presence_state`. */
export interface PresenceFrame {
  readonly type: 'presence';
  readonly ref: string | undefined;
  readonly topic: string;
}

export type ClientFrame = JoinFrame | LeaveFrame | PublishFrame | PingFrame | RefreshFrame | PresenceFrame;

export interface Limits {
  readonly maxFrameBytes: number;
  readonly hardMaxFrameBytes: number;
  readonly maxMessages: number;
  readonly rateWindowMs: number;
  readonly maxJoins: number;
}
