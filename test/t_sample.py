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

# safetensors whose data_offsets overlap, alias or leave holes (issue 31): the reference library refuses
# them (InvalidOffset); so do sample, eval and train (model.init_from), with one line naming the tensor
# and nothing trained
import json as _json  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402


def edited_model(name, edit):
    """a copy of the model directory whose safetensors header EDIT(header, data) changed"""
    d = os.path.join(tmp, name)
    shutil.copytree(model, d)
    path = os.path.join(d, "model.safetensors")
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = _json.loads(raw[8:8 + n]), raw[8 + n:]
    data = edit(header, data)
    h = _json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
    return d


def wpe_inside_wte(h, data):
    b = h["transformer.wpe.weight"]["data_offsets"]
    h["transformer.wpe.weight"]["data_offsets"] = [0, b[1] - b[0]]  # inside wte's range (the issue: [0, 16384] at C 64)
    return data


def same_range(h, data):
    h["transformer.h.0.ln_2.bias"]["data_offsets"] = list(h["transformer.h.0.ln_1.bias"]["data_offsets"])
    return data


def hole(h, data):  # 64 bytes nothing claims before the first tensor
    for v in h.values():
        if isinstance(v, dict) and "data_offsets" in v:
            v["data_offsets"] = [v["data_offsets"][0] + 64, v["data_offsets"][1] + 64]
    return b"\0" * 64 + data


def tail(h, data):  # bytes past the last tensor
    return data + b"\0" * 8


for case, edit, want in (("overlap", wpe_inside_wte, "which overlap tensor transformer.wpe.weight's [0, 8192]"),
                         ("aliased", same_range, "overlap tensor transformer.h.0.ln_"),
                         ("hole", hole, "belong to no tensor (a hole"),
                         ("tail", tail, "bytes past the last tensor")):
    d = edited_model("st_" + case, edit)
    runs = {"sample": ztlib.run(["sample", d, "--max-tokens", "4"], timeout=120),
            "eval": ztlib.run(["eval", d, "--data", shard, "--seq-len", "16", "--batches", "1"], timeout=120),
            "train": ztlib.run(["train", "configs/tiny.yaml", "--set", f"model.init_from={d}", "--set", "data.train=" + shard,
                                "--set", "data.val=null", "--set", "data.seq_len=16", "--set", "train_iters=2"], timeout=120)}
    for cmd, r in runs.items():
        ztlib.check(r.returncode != 0 and r.stderr.count("zerotrain: error:") == 1 and want in r.stderr
                    and "model.safetensors" in r.stderr and "step " not in r.stdout,
                    f"safetensors_{case}_refused_by_{cmd}", r.stdout[-300:] + r.stderr[-600:])

# issue 48 item 1: a config.json whose numbers its weights contradict is one line naming the tensor (or the
# blocks) and both sides, exit 1, before anything is sized from it (these used to abort in an allocation)
def edited_config(name, key, value):
    d = os.path.join(tmp, name)
    shutil.copytree(model, d)
    c = _json.load(open(os.path.join(d, "config.json")))
    c[key] = value
    _json.dump(c, open(os.path.join(d, "config.json"), "w"))
    return d


for key, value, want in (("n_layer", 2147483647, "n_layer is 2147483647, the weights hold 2 blocks"),
                         ("vocab_size", 2147483600, "tensor transformer.wte.weight is [50257, 32] there"),
                         ("n_embd", 2147483646, "tensor transformer.wte.weight is [50257, 32] there"),
                         ("n_positions", 1000000000, "tensor transformer.wpe.weight is [64, 32] there"),
                         ("n_layer", 3, "n_layer is 3, the weights hold 2 blocks")):
    d = edited_config(f"cfg_{key}_{value}", key, value)
    if key == "n_embd":  # n_embd must stay a multiple of n_head to reach the weights' check
        c = _json.load(open(os.path.join(d, "config.json")))
        c["n_head"] = 2
        _json.dump(c, open(os.path.join(d, "config.json"), "w"))
    for cmd, r in (("sample", ztlib.run(["sample", d, "--max-tokens", "2"], timeout=60)),
                   ("eval", ztlib.run(["eval", d, "--data", shard, "--seq-len", "16", "--batches", "1"], timeout=60))):
        ztlib.check(r.returncode == 1 and r.stderr.count("zerotrain: error:") == 1 and want in r.stderr
                    and "does not match" in r.stderr and "model.safetensors" in r.stderr,
                    f"config_{key}_{value}_refused_by_{cmd}", r.stderr[-600:])

# a model shape whose sizes would overflow, from a YAML config: refused before any allocation
r = ztlib.run(["estimate", "configs/tiny.yaml", "--ranks", "1", "--set", "model.n_layer=2147483647"], timeout=60)
ztlib.check(r.returncode != 0 and r.stderr.count("zerotrain: error:") == 1 and "beyond what zerotrain sizes" in r.stderr,
            "huge_yaml_shape_refused", r.stdout[-300:] + r.stderr[-600:])

# issue 48 item 2: a NaN in the weights is refused at load, naming the file, the tensor and the element;
# a model whose logits overflow (finite weights) never gives eval/sample an exit status 0


def poke(name, tensor, index, value):
    d = os.path.join(tmp, name)
    shutil.copytree(model, d)
    path = os.path.join(d, "model.safetensors")
    raw = bytearray(open(path, "rb").read())
    n = struct.unpack("<Q", raw[:8])[0]
    h = _json.loads(raw[8:8 + n])
    at = 8 + n + h[tensor]["data_offsets"][0] + 4 * index
    raw[at:at + 4] = struct.pack("<f", value)
    open(path, "wb").write(bytes(raw))
    return d


d = poke("nan_ln_f", "transformer.ln_f.weight", 5, float("nan"))
runs = {"sample": ztlib.run(["sample", d, "--max-tokens", "2"], timeout=60),
        "eval": ztlib.run(["eval", d, "--data", shard, "--seq-len", "16", "--batches", "1"], timeout=60),
        "train": ztlib.run(["train", "configs/tiny.yaml", "--set", f"model.init_from={d}", "--set", "data.train=" + shard,
                            "--set", "data.val=null", "--set", "data.seq_len=16", "--set", "train_iters=2"], timeout=120)}
for cmd, r in runs.items():
    ztlib.check(r.returncode == 1 and r.stderr.count("zerotrain: error:") == 1 and "step " not in r.stdout
                and "tensor transformer.ln_f.weight holds nan at element 5" in r.stderr,
                f"nan_weight_refused_by_{cmd}", r.stdout[-300:] + r.stderr[-600:])
# a tensor name a file supplies is printed escaped: a terminal's control sequences never pass through


def evil_name(h, data):
    h["evil\x1b[2J\x07"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
    return data + b"\0" * 4


r = ztlib.run(["sample", edited_model("st_evil_name", evil_name), "--max-tokens", "2"], timeout=60)
ztlib.check(r.returncode == 1 and "unexpected tensor evil\\x1B[2J\\x07" in r.stderr and "\x1b" not in r.stderr
            and "\x07" not in r.stderr, "tensor_names_printed_escaped", repr(r.stderr[-400:]))
d = poke("huge_ln_f", "transformer.ln_f.weight", 5, 3e38)
for cmd, r, want in (("sample", ztlib.run(["sample", d, "--max-tokens", "2"], timeout=60), "logits are not finite"),
                     ("eval", ztlib.run(["eval", d, "--data", shard, "--seq-len", "16", "--batches", "1"], timeout=60),
                      "val_loss is")):
    ztlib.check(r.returncode == 1 and r.stderr.count("zerotrain: error:") == 1 and want in r.stderr
                and "val_loss: " not in r.stdout, f"overflowing_model_fails_{cmd}", r.stdout[-300:] + r.stderr[-600:])
ztlib.finish()
