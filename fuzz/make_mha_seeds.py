#!/usr/bin/env python3
"""Writes the seed corpus of mha_fuzzer (fuzz/corpus/mha/), deterministically.

    python3 fuzz/make_mha_seeds.py

mha_fuzzer decodes its input with FuzzedDataProvider, which takes the structure (config, shapes,
options, which argument to break) from the end of the input, one or a few bytes per choice, and
the values from the same stream. Any bytes are a valid input, so the seeds are byte patterns
that start the fuzzer in different regions: all zeros (the smallest config, every choice 0),
all ones, ramps, and seeded random inputs of several lengths. Running the script again rewrites
the same files.
"""
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "mha")


def seeds():
    yield "zeros-64", bytes(64)
    yield "ones-256", b"\xff" * 256
    yield "ramp-256", bytes(range(256))
    yield "ramp-down-512", bytes(255 - (i % 256) for i in range(512))
    yield "alternating-512", bytes(0x55 if i % 2 else 0xAA for i in range(512))
    # 0x80 bytes: the special values (NaN, inf, huge) when the input enables them.
    yield "specials-256", bytes(0x80 if i % 3 == 0 else (i * 37) % 256 for i in range(256))
    rng = random.Random(20260)
    for length in (32, 96, 200, 400, 800, 1500, 3000):
        yield f"random-{length}", bytes(rng.randrange(256) for _ in range(length))


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(list(seeds()))} seeds to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
