"""t_torch_xcheck.py — zerotrain's forward and backward against an independent PyTorch GPT-2.

Builds a tiny GPT-2 (vocab 97, not a multiple of 128, so the padded logits rows are exercised) with
random weights (std 0.1, LayerNorm weights 1 + N(0, 0.1), biases non-zero), writes it as a Hugging
Face directory (safetensors + config.json) and a token shard, runs

    ./zerotrain eval DIR --data SHARD --batch-size B --seq-len T --batches N --grads GRADFILE

and compares its `val_loss:` line and its gradient file (raw little-endian fp32, flat in table
order) with test/gpt2_ref.py computed in float64. The same reference in float32 is checked against
float64 too, which shows that the tolerances below are met by a correct fp32 implementation.

Run from anywhere with /usr/bin/python3 (the binary is REPO/zerotrain). Prints PASS/FAIL lines.

Tolerances. zerotrain computes in fp32 (unit roundoff u = 2^-24 ~ 6e-8). Every value is a chain of
dot products and sums of K terms (K = C, 3C, 4C, T, or the vocabulary in the softmax), whose rounding
error is at most ~K u in the worst case and ~sqrt(K) u typically, relative to the sum of
magnitudes; through L blocks and LayerNorm these compound to roughly 1e-6 relative for the loss
here (K <= 128). The loss is a mean of N*B*T positive terms with no cancellation, so
    loss: |zt - ref| / |ref| <= 1e-5      (about 10x the expected fp32 error).
Gradients additionally sum over all N*B*T positions (the weight gradients are [in, out] products
accumulated over 48 rows) and contain cancellations (gradients of LayerNorm biases and of the
attention are differences of similar terms), so per tensor we bound the relative norm error
    ||g_zt - g_ref|| / ||g_ref|| <= 1e-4 (norms over the whole tensor, so a few cancelling entries
with large relative error but small absolute error do not fail it).
The float32 torch run typically lands at ~1e-7 (loss) and ~1e-6 (gradients).
Sensitivity: the gradient check is the sharp one. Replacing the tanh GELU by the erf GELU moves the
loss by only ~1e-6 relative at these activation sizes (inside the loss tolerance) but the gradients
by ~3e-4 (a FAIL); the loss-only cases catch structural errors (masking, positions, weights read
wrongly), not subtle ones."""

import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gpt2_ref  # noqa: E402

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4

failures = 0


def check(ok, name, why=""):
    global failures
    if ok:
        print(f"PASS {name}", flush=True)
    else:
        failures += 1
        print(f"FAIL {name}: {why}", flush=True)
    return ok


def run_eval(model_dir, shard, B, T, n_batches, grads_path=None):
    """Runs the zerotrain eval CLI; returns (loss or None, message)."""
    exe = os.path.join(ROOT, "zerotrain")
    if not os.access(exe, os.X_OK):
        return None, f"{exe} not found (build it with make)"
    cmd = [exe, "eval", model_dir, "--data", shard, "--batch-size", str(B), "--seq-len", str(T),
           "--batches", str(n_batches)]
    if grads_path:
        cmd += ["--grads", grads_path]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(cmd)} timed out"
    m = re.search(r"^val_loss:\s*(\S+)", r.stdout, re.M)
    if r.returncode != 0 or not m:
        tail = (r.stdout + r.stderr).strip().splitlines()[-6:]
        return None, f"`{' '.join(cmd)}` exited {r.returncode} without a val_loss line: " + " | ".join(tail)
    return float(m.group(1)), ""


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / den) if den > 0 else float(np.linalg.norm(a))


def compare_grads(tag, got_flat, ref_grads, rtol):
    """Per-tensor relative norm error of a flat fp32 gradient vector against REF_GRADS."""
    total = sum(g.size for g in ref_grads.values())
    if got_flat.size != total:
        check(False, f"{tag} gradient file size", f"{got_flat.size} floats, the param table has {total}")
        return
    off, worst, worst_name, bad = 0, 0.0, "", []
    for name, g in ref_grads.items():
        part = got_flat[off:off + g.size].reshape(g.shape)
        off += g.size
        e = rel_err(part, g)
        if not np.all(np.isfinite(part)) or e > rtol:
            bad.append(f"{name} rel err {e:.3g}")
        if e > worst:
            worst, worst_name = e, name
    check(not bad, f"{tag} gradients of all {len(ref_grads)} tensors within {rtol:g} (worst {worst:.2g} {worst_name})",
          "; ".join(bad[:8]))


def main():
    torch.manual_seed(0)
    cfg = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=16)
    B, T, NB = 3, 8, 2
    params = gpt2_ref.random_params(cfg, std=0.1, seed=1234)
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, cfg["vocab_size"], size=NB * B * T + 1 + 7)

    with tempfile.TemporaryDirectory(prefix="zt_xcheck.") as tmp:
        model_dir = os.path.join(tmp, "model")
        shard = os.path.join(tmp, "tokens.bin")
        gpt2_ref.write_hf_dir(model_dir, cfg, params)
        gpt2_ref.write_shard(shard, tokens)

        # the Python file helpers themselves: what was written reads back exactly
        back, meta = gpt2_ref.read_safetensors(os.path.join(model_dir, "model.safetensors"))
        check(meta == {"format": "pt"} and list(back) == list(params) and
              all(np.array_equal(back[k], params[k]) for k in params), "python safetensors writer/reader round trip")

        # float64 reference, and float32 to show the tolerances are what a correct fp32 code meets
        loss64, g64 = gpt2_ref.eval_batches(params, cfg, tokens, B, T, NB, torch.float64)
        loss32, g32 = gpt2_ref.eval_batches(params, cfg, tokens, B, T, NB, torch.float32)
        check(abs(loss32 - loss64) / abs(loss64) <= LOSS_RTOL,
              f"torch fp32 loss within {LOSS_RTOL:g} of fp64 (rel {abs(loss32 - loss64) / abs(loss64):.2g})",
              f"fp32 {loss32!r} fp64 {loss64!r}")
        worst32 = max(rel_err(g32[k], g64[k]) for k in g64)
        check(worst32 <= GRAD_RTOL, f"torch fp32 gradients within {GRAD_RTOL:g} of fp64 (worst {worst32:.2g})",
              f"worst {worst32:.3g}")
        # sanity: the loss is not trivial (random weights of std 0.1 put it near but not at ln V)
        check(np.isfinite(loss64) and abs(loss64 - np.log(cfg["vocab_size"])) > 1e-3, f"reference loss {loss64:.6f} is non-trivial",
              f"loss {loss64}")

        # case 1: B=3, T=8, 2 batches, loss and gradients
        grads_path = os.path.join(tmp, "grads.bin")
        loss, msg = run_eval(model_dir, shard, B, T, NB, grads_path)
        if check(loss is not None, "zerotrain eval runs (B=3 T=8, 2 batches, --grads)", msg):
            rel = abs(loss - loss64) / abs(loss64)
            check(rel <= LOSS_RTOL, f"B=3 T=8 loss matches torch fp64 (zt {loss:.8f} ref {loss64:.8f} rel {rel:.2g})",
                  f"zt {loss!r} ref {loss64!r} rel err {rel:.3g} > {LOSS_RTOL:g}")
            if check(os.path.exists(grads_path), "gradient file written", f"{grads_path} missing"):
                got = np.fromfile(grads_path, dtype="<f4")
                compare_grads("B=3 T=8", got, g64, GRAD_RTOL)

        # case 2: same weights, the full context T=16 with B=1, 3 batches, loss only
        B2, T2, NB2 = 1, 16, 3
        loss64b, _ = gpt2_ref.eval_batches(params, cfg, tokens, B2, T2, NB2, torch.float64, grads=False)
        loss, msg = run_eval(model_dir, shard, B2, T2, NB2)
        if check(loss is not None, "zerotrain eval runs (B=1 T=16, 3 batches)", msg):
            rel = abs(loss - loss64b) / abs(loss64b)
            check(rel <= LOSS_RTOL, f"B=1 T=16 loss matches torch fp64 (zt {loss:.8f} ref {loss64b:.8f} rel {rel:.2g})",
                  f"zt {loss!r} ref {loss64b!r} rel err {rel:.3g} > {LOSS_RTOL:g}")

        # case 3: the same weights stored as BF16: zerotrain must see exactly the bf16-rounded weights
        bf_dir = os.path.join(tmp, "model_bf16")
        gpt2_ref.write_hf_dir(bf_dir, cfg, params, dtype="BF16")
        bf_params, _ = gpt2_ref.read_safetensors(os.path.join(bf_dir, "model.safetensors"))
        loss64c, _ = gpt2_ref.eval_batches(bf_params, cfg, tokens, B, T, NB, torch.float64, grads=False)
        loss, msg = run_eval(bf_dir, shard, B, T, NB)
        if check(loss is not None, "zerotrain eval runs on a BF16 safetensors model", msg):
            rel = abs(loss - loss64c) / abs(loss64c)
            check(rel <= LOSS_RTOL, f"BF16 weights: loss matches torch fp64 on the rounded weights (rel {rel:.2g})",
                  f"zt {loss!r} ref {loss64c!r} rel err {rel:.3g}")

    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
