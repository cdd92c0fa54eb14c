/**
 * What a socket's uWS user data is: one property, `d`, the socket's state.
 *
 * uWebSockets.js copies every own property of the object given to
 * `res.upgrade()` onto its WebSocket object, one V8 API store each, and
 * `getUserData()` returns that WebSocket object. With the thirty fields of
 * the gateway's socket state the WebSocket object went to dictionary mode:
 * a hash table of about 1.6 KB per socket (measured with a heap snapshot of a
 * shard, benchmarks/src/tools/socket-memory.ts), and thirty stores per
 * upgrade. Given one property, the WebSocket object stays a fast object and
 * the state stays the plain object literal it was made as, of one shape.
 */
export interface UserSlot<D> {
  readonly d: D;
}
