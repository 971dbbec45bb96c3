"""t_sample.py — `zerotrain sample` and `zerotrain eval` on a Hugging Face GPT-2 directory:
the same seed gives the same text, another seed other text, top-k 1 is greedy and equals PyTorch's
greedy decode of the same weights (ids compared), and bad inputs fail with one clear line."""
import os
import tempfile

import numpy as np
import torch

import gpt2_ref
import ztlib

tmp = tempfile.mkdtemp()
cfg = {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 50257, "n_positions": 64}
params = gpt2_ref.random_params(cfg, std=0.3, seed=11)
model = os.path.join(tmp, "model")
gpt2_ref.write_hf_dir(model, cfg, params)


def sample(*args):
    return ztlib.run(["sample", model, "--prompt", "Hello", "--max-tokens", "20"] + list(args), timeout=120)


a, b, c = sample("--seed", "3"), sample("--seed", "3"), sample("--seed", "4")
ztlib.check(a.returncode == 0 and a.stdout.startswith("Hello") and len(a.stdout) > 6, "sample_runs",
            a.stdout[-300:] + a.stderr[-600:])
ztlib.check(a.stdout == b.stdout, "sample_same_seed_same_text", f"{a.stdout!r} vs {b.stdout!r}")
ztlib.check(a.stdout != c.stdout, "sample_other_seed_other_text", f"{a.stdout!r}")

g1 = sample("--top-k", "1", "--seed", "1", "--print-ids")
g2 = sample("--top-k", "1", "--seed", "2", "--print-ids")
ids = [int(x) for x in g1.stdout.split()] if g1.returncode == 0 else []
ztlib.check(len(ids) == 20 and g1.stdout == g2.stdout, "top_k_1_ignores_seed", g1.stdout + g1.stderr[-500:])
p = {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}
seq = [15496]  # "Hello"
with torch.no_grad():
    for _ in range(20):
        logits, _ = gpt2_ref.forward(p, cfg, torch.tensor([seq]))
        seq.append(int(torch.argmax(logits[0, -1])))
ztlib.check(ids == seq[1:], "top_k_1_is_torch_greedy", f"zerotrain {ids[:8]}... torch {seq[1:9]}...")

# eval on the same directory
shard = os.path.join(tmp, "tokens.bin")
rng = np.random.default_rng(0)
gpt2_ref.write_shard(shard, rng.integers(0, 50257, 2000))
e = ztlib.run(["eval", model, "--data", shard, "--batch-size", "2", "--seq-len", "16", "--batches", "3"])
ztlib.check(e.returncode == 0 and "val_loss:" in e.stdout, "eval_runs", e.stdout[-300:] + e.stderr[-500:])

# bad inputs
bad = ztlib.run(["sample", os.path.join(tmp, "nothing")])
ztlib.check(bad.returncode != 0 and "nothing" in bad.stderr and bad.stderr.count("zerotrain: error:") == 1,
            "sample_missing_model", bad.stderr[-400:])
bad = ztlib.run(["sample", model, "--top-k", "x"])
ztlib.check(bad.returncode == 2 and "--top-k" in bad.stderr, "sample_bad_option", bad.stderr[-400:])
bad = ztlib.run(["eval", model, "--data", os.path.join(tmp, "none.bin"), "--seq-len", "16"])
ztlib.check(bad.returncode != 0 and "none.bin" in bad.stderr, "eval_missing_data", bad.stderr[-400:])
bad = ztlib.run(["eval", model, "--data", shard, "--seq-len", "100"])
ztlib.check(bad.returncode != 0 and "n_positions" in bad.stderr, "eval_seq_len_too_long", bad.stderr[-400:])
ztlib.finish()
