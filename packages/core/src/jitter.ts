/** A value uniformly drawn from [min, max], with the random source handed in. */
export function jitter(min: number, max: number, random: () => number): number {
  return Math.round(min + (max - min) * random());
}
