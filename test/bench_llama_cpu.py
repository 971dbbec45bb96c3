"""bench_llama_cpu.py — a Llama-shaped model's CPU training step (configs/bench_llama_124m.yaml: 121M
parameters, B4 T64) in zerotrain against PyTorch's LlamaForCausalLM (transformers, pinned) doing the
same step — forward, cross-entropy, backward, gradient clipping at 1.0, AdamW — on the same threads
(torch.set_num_threads = OMP_NUM_THREADS = the cores), fp32 both. Rounds alternate the two (each a
fresh process: 6 steps, the first dropped as warm-up); the figure is the ratio of the medians.
Issue 50's goal: zerotrain >= 2x PyTorch's tokens/s. Prints one line per round and a summary line."""
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ztlib  # noqa: E402

ztlib.use_pypi_env("transformers")
ztlib.ensure_shakespeare()
threads = os.cpu_count() or 2
B, T, STEPS, ROUNDS = 4, 64, 6, 3
CONFIG = "configs/bench_llama_124m.yaml"

TORCH_STEP = r"""
import statistics, sys, time, numpy as np, torch, transformers
from transformers import LlamaConfig, LlamaForCausalLM
transformers.logging.set_verbosity_error()
torch.set_num_threads(int(sys.argv[1]))
B, T, steps = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=768, intermediate_size=2304, num_hidden_layers=12, num_attention_heads=12,
                  num_key_value_heads=4, vocab_size=50257, max_position_embeddings=1024, rms_norm_eps=1e-5,
                  tie_word_embeddings=True)
model = LlamaForCausalLM(cfg)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
tokens = np.fromfile(sys.argv[5], dtype="<u2", offset=1024).astype(np.int64)
times = []
for s in range(steps):
    chunk = torch.from_numpy(tokens[s * B * T: (s + 1) * B * T + 1])
    x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
    t0 = time.perf_counter()
    logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
print("params", sum(p.numel() for p in model.parameters()), "median_ms", 1e3 * statistics.median(times[1:]))
"""


def torch_round():
    shard = os.path.join(ztlib.ROOT, "build/testdata/shakespeare_train_000000.bin")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run([sys.executable, "-c", TORCH_STEP, str(threads), str(B), str(T), str(STEPS), shard],
                       capture_output=True, text=True, env=env, timeout=1800)
    words = p.stdout.split()
    if p.returncode != 0 or "median_ms" not in words:
        print(p.stderr[-1500:])
        return None, None
    return float(words[words.index("median_ms") + 1]), int(words[words.index("params") + 1])


def zerotrain_round():
    ztlib.ENV["OMP_NUM_THREADS"] = str(threads)
    p, rows = ztlib.train(CONFIG, [f"train_iters={STEPS}"], timeout=1800)
    if p.returncode != 0 or len(rows) < 2:
        print(p.stderr[-1500:])
        return None
    return statistics.median(r["step_ms"] for r in rows[1:])


ours, theirs = [], []
params = None
for r in range(ROUNDS):
    z = zerotrain_round()
    t, params = torch_round()
    print(f"round {r + 1}: zerotrain {z if z else float('nan'):.0f} ms/step, PyTorch LlamaForCausalLM "
          f"{t if t else float('nan'):.0f} ms/step ({threads} threads)")
    if z and t:
        ours.append(z)
        theirs.append(t)
if ours:
    zo, to = statistics.median(ours), statistics.median(theirs)
    tok = B * T
    print(f"llama {params} parameters B{B} T{T}, {threads} threads: zerotrain {zo:.0f} ms/step ({tok / zo * 1e3:.0f} "
          f"tokens/s), PyTorch {to:.0f} ms/step ({tok / to * 1e3:.0f} tokens/s): {to / zo:.2f}x (goal >= 2x)")
else:
    print("llama bench: failed")
