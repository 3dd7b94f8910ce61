#!/usr/bin/env python3
"""Write a random-weight llama GGUF of about a given size, for a GPU check.

Usage: python random_gguf.py OUT.gguf SIZE_GB [CTX]   (needs `gguf` and `numpy` from PyPI)

The test model's recipe (tests/fixtures/tiny_gguf.py: byte-fallback vocabulary, ChatML,
generation that always runs to max_tokens) with wider layers (2048 wide, 16 heads of
which 8 for K/V, 5632 feed-forward: 94.4 MB of F16 per layer) and as many of them as
make SIZE_GB. Decoding reads every weight once per token, so the file's size is the
bytes per token the roofline counts. CTX (default 8192) is the training context the
metadata states: a server may be given that much without a warning.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "fixtures"))
import tiny_gguf  # noqa: E402

EMBD, HEAD, HEAD_KV, FF = 2048, 16, 8, 5632


def layers_for(size_gb):
    kv = HEAD_KV * (EMBD // HEAD)
    per_layer = 2 * (2 * EMBD * EMBD + 2 * kv * EMBD + 3 * EMBD * FF)
    return max(1, round(size_gb * 1e9 / per_layer))


def main(out, size_gb, ctx=None):
    if ctx:
        tiny_gguf.N_CTX = ctx
    tiny_gguf.N_EMBD, tiny_gguf.N_HEAD = EMBD, HEAD
    tiny_gguf.N_HEAD_KV, tiny_gguf.N_FF = HEAD_KV, FF
    tiny_gguf.N_LAYER = layers_for(size_gb)
    tiny_gguf.main(out)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: random_gguf.py OUT.gguf SIZE_GB [CTX]")
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) == 4 else None)
