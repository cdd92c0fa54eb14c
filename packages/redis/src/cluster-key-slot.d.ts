// cluster-key-slot (the slot function ioredis itself uses) ships no types.
declare module 'cluster-key-slot' {
  /** The Redis Cluster slot of a key or channel (CRC16 of its hash tag, mod 16384). */
  export default function calculateSlot(key: string): number;
}
