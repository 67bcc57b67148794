"""transformers beside `./bench --table 4 --cpu`: a measuring tool, not part of the build or the tests.

The same model as bench.c's CPU Table 4: Qwen3-0.6B's width (hidden 1024, intermediate 3072, 16 heads, 8 kv heads,
head_dim 128), 1 layer, vocabulary 8192, random fp32 weights; B = 8 sequences of a shared prefix P and a unique
suffix S; logits of each sequence's last token (logits_to_keep=1). Three ways transformers can run it:
  padded   the batch at once, [B, P+S] (every sequence has the same length: no padding needed)
  serial   one sequence at a time, [1, P+S], B times
  prefix   the prefix once, [1, P], then its KV cache expanded to the batch and the suffixes [B, S] on it
Each is timed as bench times the C reference: one warm-up, then the median of --reps runs, wall ms and the process's
CPU ms (all threads). Also torch's F.linear at bench's matmul shape, [rows, 1024] @ [1024, 3072]^T, 64 and 256 rows,
GFLOP/s per core (FLOPs / process CPU seconds). Run with the thread count bench used:

    OMP_NUM_THREADS=1 python docs/bench_torch_cpu.py --threads 1      # a Python with torch and transformers
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

PREFIX = [16, 64, 256, 512]
SUFFIX = [16, 64]


def timed(once, reps):
    """(median wall ms, median process CPU ms) of reps calls of once(), after one warm-up call."""
    once()
    wall, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        once()
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def linear_rate(rows, reps):
    x = torch.rand(rows, 1024) * 2 - 1
    w = torch.rand(3072, 1024) * 0.06 - 0.03
    _, cpu_ms = timed(lambda: F.linear(x, w), reps)
    return 2.0 * rows * 1024 * 3072 / (cpu_ms * 1e-3) * 1e-9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=8192, hidden_size=1024, intermediate_size=3072, num_hidden_layers=1,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    model = Qwen3ForCausalLM(cfg).eval()
    B = a.batch
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}, {a.threads} thread(s)")
    for rows in (64, 256):
        print(f"F.linear [{rows}, 1024] @ [1024, 3072]^T: {linear_rate(rows, 20):.1f} GFLOP/s per core")
    print("| B | P | S | padded ms | padded CPU ms | serial ms | serial CPU ms | prefix ms | prefix CPU ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for S in SUFFIX:
            for P in PREFIX:
                g = torch.Generator().manual_seed(1000 * P + S)
                prefix = torch.randint(1, 8192, (1, P), generator=g)
                suffix = torch.randint(1, 8192, (B, S), generator=g)
                ids = torch.cat([prefix.expand(B, P), suffix], dim=1)           # [B, P+S]

                def padded():
                    return model(input_ids=ids, logits_to_keep=1).logits

                def serial():
                    return [model(input_ids=ids[b:b + 1], logits_to_keep=1).logits for b in range(B)]

                def prefix_once():
                    out = model(input_ids=prefix, use_cache=True, logits_to_keep=1)
                    kv = out.past_key_values
                    cache = DynamicCache()
                    for layer in range(cfg.num_hidden_layers):
                        k, v = kv.layers[layer].keys, kv.layers[layer].values     # [1, kv heads, P, head_dim]
                        cache.update(k.expand(B, -1, -1, -1).contiguous(), v.expand(B, -1, -1, -1).contiguous(), layer)
                    pos = torch.arange(P, P + S).expand(B, S)
                    return model(input_ids=suffix, past_key_values=cache, position_ids=pos, logits_to_keep=1).logits

                want = padded()[:, -1]
                got = prefix_once()[:, -1]
                assert torch.allclose(want, got, atol=1e-3), (want - got).abs().max()
                r = [timed(f, a.reps) for f in (padded, serial, prefix_once)]
                print(f"| {B} | {P} | {S} | " + " | ".join(f"{w:.0f} | {c:.0f}" for w, c in r) + " |", flush=True)


if __name__ == "__main__":
    main()
