/**
 * A pass over a Map a little at a time, for sweeps that must not walk
 * 100,000 entries in one go: each `next` visits up to `budget` entries from
 * where the last call stopped (a Map's iterator sees entries deleted and
 * added meanwhile, the one being visited included), and a pass that reached
 * the end starts again at the next call.
 */
export class MapPass<K, V> {
  private cursor: Iterator<[K, V]> | undefined;

  constructor(private readonly map: Map<K, V>) {}

  /** Visits up to `budget` entries; stops early at the end of a pass. */
  next(budget: number, visit: (key: K, value: V) => void): void {
    for (let n = 0; n < budget; n++) {
      this.cursor ??= this.map.entries();
      const step = this.cursor.next();
      if (step.done === true) {
        this.cursor = undefined;
        return;
      }
      visit(step.value[0], step.value[1]);
    }
  }
}
