// What tools/bench/ab-bits.mjs and ab-time.mjs share: their command line, the two builds of the
// package loaded side by side in one process, and seeded inputs (the same for both builds).
import { pathToFileURL } from 'node:url';
import path from 'node:path';

/** `--name value` from the command line, or the fallback. */
export function option(name, fallback) {
  const args = process.argv.slice(2);
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : fallback;
}

/**
 * Builds A (--a, required) and B (--b, default web/lib): each directory's index.js imported as
 * its own module and initialised with --simd (default simd128) and --threads (default 1: the
 * single-threaded module; more: the threaded one). Exits with `usage` without --a.
 */
export async function loadBuilds(usage) {
  const dirA = option('a');
  const dirB = option('b', 'web/lib');
  const simd = option('simd', 'simd128');
  const threads = Number(option('threads', '1'));
  if (!dirA) {
    console.error(`usage: ${usage}`);
    process.exit(2);
  }
  const load = async (dir) => (await import(pathToFileURL(path.resolve(dir, 'index.js')).href)).init({ simd, threads });
  const [A, B] = await Promise.all([load(dirA), load(dirB)]);
  return { A, B, dirA: path.resolve(dirA), dirB: path.resolve(dirB), simd: threads > 1 ? `${simd}, ${threads} threads` : simd };
}

/** A seeded uniform [0, 1) generator (mulberry32). */
export function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n uniform floats in [-scale, scale). */
export const floats = (rand, n, scale = 1) => Float32Array.from({ length: n }, () => (2 * rand() - 1) * scale);
