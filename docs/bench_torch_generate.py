"""transformers beside `./bench --generate`: a measuring tool, not part of the build or the tests.

The same shapes as bench.c's generation table: a random Qwen3 of the demo's shape (vocab 2048, hidden 256,
intermediate 768, 4 layers, 8 heads and 4 kv heads of 64, tied embeddings), fp32, eager attention; 8 conversations
of 3 turns. Turn 1 is a shared 32-token system prompt and 16 tokens of the conversation's own; turns 2 and 3 are the
conversation so far (prompts and generated tokens) and 8 new tokens. Each turn generates 16 tokens, greedy, no eos.
The weights and token ids are random here and in bench (not the same numbers): what is compared is time.

transformers runs each turn as one generate call on the 8 conversations at once (their prompts are the same length
in every turn, so no padding), with its KV cache inside the call and none across calls: every turn prefills its
whole history, as bench's "off" row does. One warm-up, then the median of --reps runs of the 3 turns; wall ms and
this process's CPU ms (all threads); prompt tok/s and generated tok/s over the whole run, as bench prints them.
Run with the thread count bench used:

    OMP_NUM_THREADS=1 python docs/bench_torch_generate.py --threads 1      # a Python with torch and transformers
"""
import argparse
import statistics
import time

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

CONV, TURNS, NEW, SYSTEM, OWN, ADDED = 8, 3, 16, 32, 16, 8


def model_of_bench():
    cfg = Qwen3Config(vocab_size=2048, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=4096,
                      rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
                      attn_implementation="eager")
    torch.manual_seed(0)
    m = Qwen3ForCausalLM(cfg).to(torch.float32).eval()
    m.generation_config.eos_token_id = None
    return m


def chat(m, g):
    """The 3 turns once: (prompt tokens, generated tokens)."""
    history = torch.cat([torch.arange(100, 100 + SYSTEM).repeat(CONV, 1),
                         torch.randint(1, 2048, (CONV, OWN), generator=g)], 1)
    n_prompt = n_gen = 0
    for turn in range(TURNS):
        if turn:
            history = torch.cat([history, torch.randint(1, 2048, (CONV, ADDED), generator=g)], 1)
        with torch.no_grad():
            out = m.generate(history, attention_mask=torch.ones_like(history), do_sample=False,
                             max_new_tokens=NEW, min_new_tokens=NEW, use_cache=True, pad_token_id=0)
        n_prompt += history.numel()
        n_gen += (out.shape[1] - history.shape[1]) * CONV
        history = out
    return n_prompt, n_gen


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    transformers.logging.set_verbosity_error()
    m = model_of_bench()
    chat(m, torch.Generator().manual_seed(1))
    wall, cpu, counts = [], [], None
    for r in range(a.reps):
        t, c = time.perf_counter(), time.process_time()
        counts = chat(m, torch.Generator().manual_seed(2 + r))
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    w, c = statistics.median(wall), statistics.median(cpu)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {a.threads} thread(s), "
          f"median of {a.reps}")
    print("| run | prompt tok | generated tok | ms | CPU ms | prompt tok/s | generated tok/s |")
    print("|---|---|---|---|---|---|---|")
    print(f"| transformers generate, KV cache per call | {counts[0]} | {counts[1]} | {w:.1f} | {c:.1f} | "
          f"{counts[0] / w * 1e3:.0f} | {counts[1] / w * 1e3:.0f} |")


if __name__ == "__main__":
    main()
