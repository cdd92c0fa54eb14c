/**
 * The contract between the coordinator and a shard thread: what a shard is
 * started with and what it ends with. The coordinator imports this file,
 * never the worker module.
 */
import type { MessagePort } from 'node:worker_threads';
import type { Config, Revocation } from '@sluice/core';
import type { SharedWindowBuffers } from '../shared-limits.ts';

export interface ShardTask {
  readonly shard: number;
  /** Restart count of this shard, part of connection ids so they never repeat. */
  readonly generation: number;
  readonly nodeId: string;
  readonly config: Config;
  readonly shared: SharedArrayBuffer;
  /** Embedded mode: the node's upgrade windows in shared memory; undefined in cluster mode (Redis counts them). */
  readonly windows: SharedWindowBuffers | undefined;
  /** The node's table of topic owners (`TopicOwners`), the same buffer for every shard and its restarts. */
  readonly owners: SharedArrayBuffer;
  /** To and from the coordinator. */
  readonly control: MessagePort;
  /** One port to every other shard. */
  readonly peers: readonly { readonly shard: number; readonly port: MessagePort }[];
  /** The concrete public port (the first shard may get 0 and report what it bound). */
  readonly listenPort: number;
  /** Enables the `debug.crash` frame that tests use to crash a shard on purpose. */
  readonly testHooks: boolean;
  /** The uWS build the coordinator loaded (its upstream version): every shard loads the same. */
  readonly uws: string;
  /** The coordinator's cork probe: whether an upgrade keeps the socket's address (see @sluice/uws's cork.ts). */
  readonly corkInPlace: boolean;
  /** The revocations the node holds when the shard starts; later ones come as control commands. */
  readonly revocations: readonly Revocation[];
  /** Cluster mode: the nodes alive when the shard starts (their leases); changes come as control messages. */
  readonly nodes: readonly string[];
}

export interface ShardExit {
  readonly shard: number;
}
