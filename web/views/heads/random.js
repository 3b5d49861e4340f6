// Seeded random numbers and string hashing for the Heads view's transforms: the same numbers in
// every browser and in Node.

/**
 * mulberry32: a small seeded generator, the same sequence in every browser and in Node.
 * @param {number} seed any number (its low 32 bits are used)
 * @returns {() => number} uniform in [0, 1)
 */
export function seededRandom(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A standard normal sample from a uniform generator (Box-Muller). */
export function gaussian(random) {
  const u = 1 - random();  // (0, 1]: log(u) is finite
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

/** FNV-1a over the UTF-16 code units of `text`, started from `seed`: a 32-bit unsigned hash. */
export function hashString(text, seed = 0) {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}
