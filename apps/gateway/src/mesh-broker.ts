import type { MessagePort } from 'node:worker_threads';
import {
  BrokerUnavailable, type Config, type Delivery, type HistoryRead, idempotencyScope, MemoryIdempotency, ownerOf, PendingRequests,
  type PublishFields, type PublishResult, type RequestFailure, topicKey, type TopicOwners,
} from '@sluice/core';
import { EventClass } from '@sluice/protocol';
import type { Logger } from '@sluice/telemetry';
import { TopicOwner } from './topic-owner.ts';
import { keepsPresence, clientTopic, PresenceHub, presencePatterns } from './presence-hub.ts';
import type { PresenceFlush, Rights } from '@sluice/core';
import type { BrokerStats, ShardBroker } from './shard-broker.ts';
import { Batcher, decodePeer, encodeDelivery, encodePeer, forEachMessage, type FromOwner, type PeerMessage, type ToOwner } from './messages.ts';

const UNAVAILABLE: PublishResult = Object.freeze({ ok: false, reason: 'unavailable' });
/** A publish's request options, made once: a publish to another shard's topic builds no options object. */
const PUBLISH_REQUEST: { readonly fail: { readonly value: PublishResult } } = Object.freeze({ fail: Object.freeze({ value: UNAVAILABLE }) });

class PeerLink {
  readonly out: Batcher<PeerMessage>;
  /** Requests sent to this peer (as the owner of a topic or key) and not answered yet. */
  readonly requests = new PendingRequests();
  constructor(readonly port: MessagePort) {
    this.out = new Batcher(encodePeer, (batch) => port.postMessage(batch));
  }
  send(m: PeerMessage): void {
    this.out.push(m);
  }
  deliver(ev: Delivery): void {
    this.out.pushEncoded(encodeDelivery(ev));
  }
}

/**
 * The embedded broker as a shard sees it. Every topic has an owner shard,
 * the one that touched it first (`TopicOwners`, the node's table in shared
 * memory); this shard's TopicOwner serves the topics it owns, and the
 * others are reached over a full mesh of MessagePorts. A publish to a topic
 * this shard owns is stored and fanned out without leaving the thread, and
 * a socket's own topics (joined first on its shard) are owned by its shard.
 * An idempotency key is owned too (`ownerOf(tenant + key)`): a durable
 * publish with a key goes to the key's owner first, which answers a repeat
 * from its table (or joins it to the first publish still on its way) and
 * otherwise passes the publish on to the topic's owner and records the id.
 * Keeps the guarantees stated on `Broker`. When a peer shard dies, requests
 * waiting on it resolve `unavailable` (publish) or reject with
 * BrokerUnavailable (subscribe, history); when it comes back, this shard
 * subscribes again to its topics.
 */
export class MeshBroker implements ShardBroker {
  readonly hub: TopicOwner;
  private readonly peers = new Map<number, PeerLink>();
  /** Topic keys this shard is subscribed to, wherever their owner is. */
  private readonly subscribed = new Set<string>();
  private deliver: (ev: Delivery) => void = () => {};
  private readonly idempotency: MemoryIdempotency;
  /** Keys whose first publish is on its way to the topic owner, with the repeats waiting on it. */
  private readonly firstPublish = new Map<string, ((r: PublishResult) => void)[]>();
  duplicates = 0;
  readonly stats: BrokerStats;
  /** The presence tables of the presence topics this shard owns; null without WS_PRESENCE_TOPICS. */
  readonly presence: PresenceHub | null;
  private readonly presenceTopics: Rights | null;
  private presenceFlush: (topic: string, snapshot: boolean, f: PresenceFlush) => void = () => {};
  /** A peer shard is (back) up: the shard says its presence counts again to the topics that peer owns. */
  private peerUp: (shard: number) => void = () => {};

  constructor(
    private readonly self: number,
    private readonly shards: number,
    config: Config,
    private readonly log: Logger,
    /** Who owns which topic: the node's table, shared with the other shards and the coordinator. */
    private readonly owners: TopicOwners,
  ) {
    // In cluster mode Redis positions the topics (RedisBroker's marks), not the mesh's memory history.
    this.hub = new TopicOwner({ ...config, positionRefreshMs: config.redisUrl === undefined ? config.positionRefreshMs : 0 });
    const hub = this.hub;
    const counted = (): number => this.duplicates;
    this.stats = {
      published: hub.stats.published,
      get duplicates() {
        return counted();
      },
      get historyTopics() {
        return hub.topicCount;
      },
      redisCommands: 0,
      redisErrors: 0,
      replicaAckFailures: 0,
      get positionMarks() {
        return hub.marks;
      },
    };
    this.idempotency = new MemoryIdempotency(config.idempotencyTtlMs);
    // The local link: what the hub sends to this shard is handled at once.
    this.hub.attach(self, { deliver: (ev) => this.deliver(ev) });
    this.presenceTopics = presencePatterns(config);
    this.presence = this.presenceTopics === null ? null : new PresenceHub(config.presenceDiffMs, {
      flush: (shard, topic, snapshot, f) => {
        if (shard === self) this.presenceFlush(topic, snapshot, f);
        else this.peers.get(shard)?.send({ op: 'pflush', topic, snapshot, flush: f });
      },
    });
    this.presence?.start();
  }

  /** Whether a topic key keeps presence (WS_PRESENCE_TOPICS). */
  keepsPresence(key: string): boolean {
    return keepsPresence(this.presenceTopics, clientTopic(key));
  }

  /** Where the owners' flushes of presence topics go (the shard's replicas), and who says its counts again when a peer is back. */
  onPresence(flush: (topic: string, snapshot: boolean, f: PresenceFlush) => void, peerUp: (shard: number) => void): void {
    this.presenceFlush = flush;
    this.peerUp = peerUp;
  }

  /** Whether `shard` owns the topic key. */
  ownedBy(key: string, shard: number): boolean {
    return this.owner(key) === shard;
  }

  /** The topic key's owner, claimed for this shard if nobody has touched it yet. */
  private owner(key: string): number {
    return this.owners.claim(key, this.self);
  }

  /** This shard's count of a user's sockets on a presence topic, to the topic's owner. */
  presenceSet(key: string, user: string, n: number): void {
    const owner = this.owner(key);
    if (owner === this.self) this.presence?.set(`s${this.self}`, key, user, n);
    else this.peers.get(owner)?.send({ op: 'pset', topic: key, user, n });
  }

  /** The topic's presence now, as the `data` of an answer (encoded by the owner), or null for nobody present. */
  presenceRead(key: string): Promise<string> {
    const owner = this.owner(key);
    if (owner === this.self) return this.readPresence(key);
    const link = this.peers.get(owner);
    if (link === undefined) return Promise.reject(new BrokerUnavailable(`shard ${owner}, owner of the topic, is unavailable`));
    return link.requests.request<string>((rid) => link.send({ op: 'pread', rid, topic: key }), { fail: ownerGone(owner) }).then((data) => {
      if (data === '') throw new BrokerUnavailable('the topic\'s presence could not be read (redis)');
      return data;
    });
  }

  private async readPresence(key: string): Promise<string> {
    return this.encodePresence(this.presence === null ? new Map() : await this.presence.read(key));
  }

  /** How a presence read is encoded at the owner (set by the shard: it knows WS_PRESENCE_MAX_USERS). */
  encodePresence: (users: ReadonlyMap<string, number>) => string = () => '{"users":{},"count":0}';

  /** Talks to `shard` on `port` from now on, replacing a link to an earlier life of it. */
  addPeer(shard: number, port: MessagePort): void {
    if (this.peers.has(shard)) this.peerGone(shard);
    const link = new PeerLink(port);
    this.peers.set(shard, link);
    this.hub.attach(shard, link);
    port.on('message', (batch: string) => forEachMessage(batch, decodePeer, (m) => this.fromPeer(shard, link, m)));
    port.on('close', () => {
      if (this.peers.get(shard) === link) this.peerGone(shard);
    });
    for (const key of this.subscribed) if (this.owner(key) === shard) link.send({ op: 'sub', rid: 0, topic: key });
    this.peerUp(shard);
  }

  publish(tenant: string, req: PublishFields): Promise<PublishResult> {
    if (req.idempotencyKey !== undefined && req.cls === EventClass.Durable) {
      const scope = idempotencyScope(tenant, req.idempotencyKey);
      const keyOwner = ownerOf(scope, this.shards);
      if (keyOwner === this.self) return this.publishOnce(scope, tenant, req);
      return this.request(keyOwner, PUBLISH_REQUEST, (rid) => ({ op: 'once', rid, tenant, req }));
    }
    return this.publishToOwner(tenant, req);
  }

  /**
   * `publish` for the hot path: when this shard owns the topic (and no key
   * needs checking elsewhere), `done` runs before this returns; when
   * another shard does, as its answer arrives; neither with a promise.
   */
  publishThen(tenant: string, req: PublishFields, done: (res: PublishResult) => void, key: string = topicKey(tenant, req.topic)): void {
    if (req.idempotencyKey === undefined || req.cls !== EventClass.Durable) {
      const owner = this.owner(key);
      if (owner === this.self) {
        done(this.hub.publish(tenant, req, key));
        return;
      }
      // Another shard's topic: `done` runs as its answer is read, with no
      // promise in between (UNAVAILABLE if that shard is or goes away).
      const link = this.peers.get(owner);
      if (link === undefined) done(UNAVAILABLE);
      else link.requests.call((rid) => link.send({ op: 'pub', rid, tenant, req }), PUBLISH_REQUEST, done);
      return;
    }
    // publish never rejects (Broker's convention); a bug that made it would still answer.
    this.publish(tenant, req).then(done, (err: unknown) => {
      this.log.error({ err }, 'publish failed');
      done(UNAVAILABLE);
    });
  }

  /** Trims expired history and idempotency records. */
  sweep(now: number): void {
    this.hub.sweep(now);
    this.idempotency.sweep(now);
  }

  /** At the key's owner: a repeat is answered with the first id; a first publish goes on to the topic's owner. */
  private publishOnce(scope: string, tenant: string, req: PublishFields): Promise<PublishResult> {
    const first = this.idempotency.get(scope, Date.now());
    if (first !== undefined) {
      this.duplicates++;
      return Promise.resolve({ ok: true, id: first, duplicate: true });
    }
    const waiting = this.firstPublish.get(scope);
    if (waiting !== undefined) {
      this.duplicates++;
      return new Promise((resolve) => waiting.push(resolve));
    }
    this.firstPublish.set(scope, []);
    return this.publishToOwner(tenant, req).then((res) => {
      const waiters = this.firstPublish.get(scope) ?? [];
      this.firstPublish.delete(scope);
      if (res.ok && res.id !== undefined) this.idempotency.set(scope, res.id, Date.now());
      const repeat: PublishResult = res.ok ? { ok: true, id: res.id, duplicate: true } : res;
      for (const w of waiters) w(repeat);
      return res;
    });
  }

  private publishToOwner(tenant: string, req: PublishFields): Promise<PublishResult> {
    const owner = this.owner(topicKey(tenant, req.topic));
    if (owner === this.self) return Promise.resolve(this.hub.publish(tenant, req));
    return this.request(owner, PUBLISH_REQUEST, (rid) => ({ op: 'pub', rid, tenant, req }));
  }

  subscribe(topic: string): Promise<string | undefined> {
    this.subscribed.add(topic);
    const owner = this.owner(topic);
    if (owner === this.self) {
      const position = this.hub.subscribe(this.self, topic);
      if (this.presence !== null && this.keepsPresence(topic)) {
        const presence = this.presence;
        return new Promise((resolve) => presence.subscribe(this.self, topic, () => resolve(position)));
      }
      return Promise.resolve(position);
    }
    return this.request<string>(owner, { fail: ownerGone(owner) }, (rid) => ({ op: 'sub', rid, topic }));
  }

  unsubscribe(topic: string): void {
    this.subscribed.delete(topic);
    const owner = this.owner(topic);
    if (owner === this.self) {
      this.hub.unsubscribe(this.self, topic);
      this.presence?.unsubscribe(this.self, topic);
    } else this.peers.get(owner)?.send({ op: 'unsub', topic });
  }

  history(topic: string, since: string | undefined, limit?: number): Promise<HistoryRead> {
    const owner = this.owner(topic);
    if (owner === this.self) return Promise.resolve(this.hub.history(topic, since, limit));
    return this.request<HistoryRead>(owner, { fail: ownerGone(owner) }, (rid) => ({ op: 'hist', rid, topic, since, limit }));
  }

  onDelivery(handler: (ev: Delivery) => void): void {
    this.deliver = handler;
  }

  /** Closes the ports to the other shards: they see this shard gone at once. */
  close(): void {
    this.presence?.stop();
    for (const shard of [...this.peers.keys()]) this.peerGone(shard);
  }

  /** Sends what is batched now (before the thread stops). */
  flush(): void {
    for (const link of this.peers.values()) link.out.flush();
  }

  /** `opts.fail` is what the request settles with if the owner is or becomes unavailable. */
  private request<T>(owner: number, opts: { readonly fail: RequestFailure<T> }, make: (rid: number) => ToOwner): Promise<T> {
    const link = this.peers.get(owner);
    const fail = opts.fail;
    if (link === undefined) return 'value' in fail ? Promise.resolve(fail.value) : Promise.reject(fail.error);
    return link.requests.request<T>((rid) => link.send(make(rid)), opts);
  }

  private fromOwner(link: PeerLink, m: FromOwner): void {
    switch (m.op) {
      case 'ev':
        this.deliver(m.ev);
        return;
      case 'pubok':
        link.requests.answer(m.rid, m.res);
        return;
      case 'subok':
        link.requests.answer(m.rid, m.position);
        return;
      case 'histok':
        link.requests.answer(m.rid, m.read);
        return;
      case 'pflush':
        this.presenceFlush(m.topic, m.snapshot, m.flush);
        return;
      case 'pdata':
        link.requests.answer(m.rid, m.data);
        return;
    }
  }

  private fromPeer(shard: number, link: PeerLink, m: PeerMessage): void {
    switch (m.op) {
      case 'pub':
        // The hub sends the event to the subscribed shards first, the ack after it on the same port.
        link.send({ op: 'pubok', rid: m.rid, res: this.hub.publish(m.tenant, m.req) });
        return;
      case 'once':
        this.publishOnce(idempotencyScope(m.tenant, m.req.idempotencyKey!), m.tenant, m.req).then(
          (res) => link.send({ op: 'pubok', rid: m.rid, res }),
          (err: unknown) => {
            this.log.error({ err }, 'publish for a peer failed');
            link.send({ op: 'pubok', rid: m.rid, res: UNAVAILABLE });
          },
        );
        return;
      case 'sub': {
        const position = this.hub.subscribe(shard, m.topic);
        // The starting replica goes before the answer: the subscriber has it when its joins complete.
        if (this.presence !== null && this.keepsPresence(m.topic)) {
          this.presence.subscribe(shard, m.topic, () => {
            if (m.rid !== 0) link.send({ op: 'subok', rid: m.rid, position });
          });
        } else if (m.rid !== 0) link.send({ op: 'subok', rid: m.rid, position });
        return;
      }
      case 'unsub':
        this.hub.unsubscribe(shard, m.topic);
        this.presence?.unsubscribe(shard, m.topic);
        return;
      case 'pset':
        this.presence?.set(`s${shard}`, m.topic, m.user, m.n);
        return;
      case 'pread':
        // '' says it could not be read (JSON data is never empty).
        this.readPresence(m.topic).then((data) => link.send({ op: 'pdata', rid: m.rid, data }), () => link.send({ op: 'pdata', rid: m.rid, data: '' }));
        return;
      case 'hist':
        link.send({ op: 'histok', rid: m.rid, read: this.hub.history(m.topic, m.since, m.limit) });
        return;
      default:
        this.fromOwner(link, m);
    }
  }

  private peerGone(shard: number): void {
    const link = this.peers.get(shard);
    this.peers.delete(shard);
    this.hub.detach(shard);
    this.presence?.shardGone(shard);
    link?.port.close();
    const failed = link?.requests.close(`shard ${shard} is gone`) ?? 0;
    this.log.warn({ peer: shard, failedRequests: failed }, 'peer shard gone');
  }
}

/** How subscribe and history fail when the topic's owner shard is away (Broker's convention). */
function ownerGone(owner: number): RequestFailure<never> {
  return { error: new BrokerUnavailable(`shard ${owner}, owner of the topic, is unavailable`) };
}
