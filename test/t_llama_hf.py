"""t_llama_hf.py — the Llama family against transformers (issue 50, part 2): import, numerics, export,
checkpoints and the errors of a malformed folder.

For tiny random LlamaForCausalLM (grouped-query, untied, sharded by save_pretrained), Llama with q/k/v/o
biases and Llama 3's rope_scaling, Qwen2ForCausalLM (q/k/v biases, tied) and MistralForCausalLM
(multi-query) folders, with weights far from their init (every tensor + N(0, 0.1)) and a vocabulary of
97 (not a multiple of 128):
  - `zerotrain eval DIR` gives transformers' loss (relative 1e-5) and `--grads` its gradients (relative
    norm 1e-4 per tensor), both against the model run by torch in float64. transformers 4.40.2 (pinned:
    the newest that works with Debian's torch 1.13) predates Llama 3's rope_scaling, so that case's
    torch model gets its rotary frequencies from a float64 implementation of the published formula;
  - a config with only model.init_from (the architecture comes from the folder) trains 20 steps,
    `zerotrain export` writes a folder that AutoModelForCausalLM loads with no missing or unexpected
    weight, and whose loss in transformers equals `zerotrain eval` of the checkpoint; a model key that
    disagrees with the folder is refused in one line naming it;
  - the checkpoint records the family: a run resumed from step 10 continues the uninterrupted run's
    losses exactly, a checkpoint written by 2 ranks at ZeRO stage 2 resumes on 1 rank (relative 1e-5),
    and an edited model_config attribute is refused by the metadata checksum;
  - a malformed config.json or index (unknown model_type, num_key_value_heads not dividing, a missing
    intermediate_size, a rope_scaling type zerotrain lacks, another hidden_act, weights of another
    shape, a missing shard) is one error line naming the file and the key or tensor."""
import json
import math
import os
import shutil
import tempfile

import ztlib

ztlib.use_pypi_env("transformers", "safetensors")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,  # noqa: E402
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

transformers.logging.set_verbosity_error()
check = ztlib.check
tmp = tempfile.mkdtemp(prefix="zt_llama_hf_")
V, B, T, NB = 97, 2, 16, 2
shard = os.path.join(tmp, "tokens.bin")
ztlib.write_synthetic_shard(shard, 1 << 14, vocab=V)
tokens = ztlib.read_shard(shard)
ROPE = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64,
            rope_type="llama3")


def llama3_inv_freq(theta, dim, rs):
    """Llama 3's rotary frequencies (the published formula) in float64."""
    inv = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    orig, lo, hi, factor = rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"], rs["factor"]
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > orig / lo, inv / factor, inv)
    smooth = (orig / wavelen - lo) / (hi - lo)
    medium = (wavelen >= orig / hi) & (wavelen <= orig / lo)
    return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


def set_rope(model, inv):
    for layer in model.model.layers:
        layer.self_attn.rotary_emb.inv_freq = torch.tensor(inv, dtype=layer.self_attn.rotary_emb.inv_freq.dtype)


def ref_loss(model, n_batches, grads=False):
    """eval's contract: batch k = tokens[k B T : (k+1) B T + 1] as B rows of T, the mean of the batches'
    mean cross-entropies (float64)"""
    total = 0.0
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(next(model.parameters()).dtype)  # Qwen2's and Mistral's masks are made in it
    for k in range(n_batches):
        chunk = torch.tensor(tokens[k * B * T: (k + 1) * B * T + 1])
        x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)) / n_batches
        if grads:
            loss.backward()
        total += float(loss)
    torch.set_default_dtype(dtype)
    return total


def table_order(model):
    """zerotrain's parameter table order (src/model/gpt2_params.c): the embedding, each block's tensors,
    the final norm, an untied head"""
    names = [n for n, _ in model.named_parameters()]
    parts = ["input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias", "self_attn.o_proj.weight",
             "self_attn.o_proj.bias", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
             "mlp.down_proj.weight"]
    order = ["model.embed_tokens.weight"]
    for l in range(model.config.num_hidden_layers):
        order += [f"model.layers.{l}.{p}" for p in parts if f"model.layers.{l}.{p}" in names]
    order.append("model.norm.weight")
    if not model.config.tie_word_embeddings:
        order.append("lm_head.weight")
    return order


def val_loss(p):
    for line in p.stdout.splitlines():
        if line.startswith("val_loss:"):
            return float(line.split()[1])
    return None


def one_error_line(p, *needles):
    errs = [x for x in p.stderr.splitlines() if x.startswith("zerotrain: error:")]
    return p.returncode != 0 and len(errs) == 1 and all(n in errs[0] for n in needles)


def zt_eval(folder, n_batches=NB, grads=None):
    args = ["eval", folder, "--data", shard, "--batch-size", str(B), "--seq-len", str(T), "--batches", str(n_batches)]
    return ztlib.run(args + (["--grads", grads] if grads else []), timeout=120)


common = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=V, max_position_embeddings=64, rms_norm_eps=1e-5)
cases = [
    ("llama_gqa", LlamaForCausalLM, LlamaConfig(**common, tie_word_embeddings=False), None),
    ("llama3_rope_bias", LlamaForCausalLM,
     LlamaConfig(**common, attention_bias=True, rope_theta=500000.0, tie_word_embeddings=False), ROPE),
    ("qwen2_tied", Qwen2ForCausalLM, Qwen2Config(**common, tie_word_embeddings=True), None),
    ("mistral_mqa", MistralForCausalLM, MistralConfig(**dict(common, num_key_value_heads=1), tie_word_embeddings=False),
     None),
]
folders = {}
for name, cls, config, rope in cases:
    torch.manual_seed(len(name))
    model = cls(config)
    with torch.no_grad():
        for _, t in model.named_parameters():
            t.add_(torch.randn_like(t) * 0.1)
    folder = os.path.join(tmp, name)
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="60KB" if name == "llama_gqa" else "10GB")
    if rope:  # transformers 4.40.2 cannot write (or read) rope_type llama3: the folder gets it as a newer one would
        with open(os.path.join(folder, "config.json")) as f:
            cj = json.load(f)
        cj["rope_scaling"] = rope
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(cj, f, indent=2)
        set_rope(model, llama3_inv_freq(config.rope_theta, config.hidden_size // config.num_attention_heads, rope))
    folders[name] = (folder, model)
    ref = model.double()
    ref.zero_grad()
    want = ref_loss(ref, 1, grads=True)
    gfile = os.path.join(tmp, name + ".grads")
    p = zt_eval(folder, 1, gfile)
    got = val_loss(p)
    check(got is not None and abs(got - want) <= 1e-5 * abs(want), f"{name}: eval's loss is transformers' (float64)",
          f"zerotrain {got} torch {want}; {p.stderr[-600:]}")
    named = dict(ref.named_parameters())
    order = table_order(ref)
    flat = np.fromfile(gfile, dtype="<f4") if os.path.exists(gfile) else np.zeros(0, np.float32)
    total = sum(named[n].numel() for n in order)
    worst, at, off = 0.0, None, 0
    if flat.size == total:
        for n in order:
            g = named[n].grad.detach().numpy().reshape(-1)
            ours = flat[off: off + g.size].astype(np.float64)
            off += g.size
            rel = np.linalg.norm(ours - g) / max(np.linalg.norm(g), 1e-30)
            if rel > worst:
                worst, at = rel, n
    check(flat.size == total and worst <= 1e-4, f"{name}: --grads are torch's autograd (worst {worst:.1e} at {at})",
          f"{flat.size} values, want {total}")
    p = zt_eval(folder)
    got, want = val_loss(p), ref_loss(ref, NB)
    check(got is not None and abs(got - want) <= 1e-5 * abs(want), f"{name}: {NB}-batch loss is transformers'",
          f"zerotrain {got} torch {want}")
    folders[name] = (folder, ref)


# ---------------------------------------------------------------- fine-tune, export, load back
def fine_tune_config(name, folder, extra=""):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"model: {{init_from: {folder}{extra}}}\n"
                f"data: {{train: {shard}, seq_len: {T}}}\n"
                "train_batch_size: 4\ntrain_micro_batch_size_per_gpu: 2\ntrain_iters: 20\n"
                "optimizer: {type: AdamW, params: {lr: 1.0e-3, weight_decay: 0.1}}\ngradient_clipping: 1.0\n"
                "steps_per_print: 5\nsample_tokens: 0\nseed: 7\ndevice: cpu\n")
    return path


for name, cls, config, rope in cases:
    folder, _ = folders[name]
    ck, exp = os.path.join(tmp, name + "_ck"), os.path.join(tmp, name + "_export")
    p, rows = ztlib.train(fine_tune_config(name, folder), [f"checkpoint.dir={ck}", "checkpoint.save_interval=10"])
    ls = ztlib.losses(rows)
    if not check(p.returncode == 0 and len(ls) == 20 and all(map(math.isfinite, ls)),
                 f"{name}: fine-tunes 20 steps from the folder alone",
                 f"losses {ls[:2]} .. {ls[-2:]} {p.stderr[-800:]}"):
        continue
    p = ztlib.run(["export", ck, "-o", exp])
    with open(os.path.join(exp, "config.json")) as f:
        cj = json.load(f)
    check(p.returncode == 0 and cj["model_type"] == config.model_type and
          cj["architectures"] == [cls.__name__] and cj.get("rope_scaling") == rope,
          f"{name}: export writes its family's config.json", p.stderr[-400:] + json.dumps(cj)[:300])
    if rope:  # see above: load it as transformers 4.40.2 can, then the frequencies of the formula
        cj["rope_scaling"] = None
        with open(os.path.join(exp, "config.json"), "w") as f:
            json.dump(cj, f)
    model, info = AutoModelForCausalLM.from_pretrained(exp, output_loading_info=True)
    if rope:
        set_rope(model, llama3_inv_freq(cj["rope_theta"], cj["hidden_size"] // cj["num_attention_heads"], rope))
    check(type(model) is cls and not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"],
          f"{name}: AutoModelForCausalLM loads the export, every weight", f"{type(model).__name__} {info}")
    with torch.no_grad():
        want = ref_loss(model.double().eval(), NB)
    got = val_loss(zt_eval(ck))
    check(got is not None and abs(got - want) <= 1e-5 * abs(want), f"{name}: the export's loss in transformers is eval's",
          f"zerotrain {got} transformers {want}")

# a model key that disagrees with the folder
folder = folders["llama_gqa"][0]
p = ztlib.run(["train", fine_tune_config("disagree", folder, ", num_key_value_heads: 4")])
check(one_error_line(p, "disagree.yaml:1:", "model.num_key_value_heads", "4 differs from", "config.json's 2"),
      "a model key that disagrees with model.init_from: one line naming it", p.stderr[-400:])
p = ztlib.run(["train", fine_tune_config("shorter", folder, ", n_positions: 32"), "--set", "train_iters=2"])
check(p.returncode == 0, "a Llama may be given a shorter context than its folder's", p.stderr[-400:])

# ---------------------------------------------------------------- checkpoints record the family
cfg = fine_tune_config("resume", folder)
whole, half = os.path.join(tmp, "ck_whole"), os.path.join(tmp, "ck_half")
p, rows = ztlib.train(cfg, [f"checkpoint.dir={whole}", "checkpoint.save_interval=10"])
want = ztlib.losses(rows)
p1, _ = ztlib.train(cfg, [f"checkpoint.dir={half}", "checkpoint.save_interval=10", "train_iters=10"])
p2, rows = ztlib.train(cfg, [f"checkpoint.dir={half}", "checkpoint.save_interval=10"])
got = ztlib.losses(rows)
check(p1.returncode == 0 and p2.returncode == 0 and got == want[10:],
      "llama: resumed from step 10, the uninterrupted run's losses exactly", f"{got[:3]} vs {want[10:13]} {p2.stderr[-400:]}")
wide = os.path.join(tmp, "ck_wide")
p1, _ = ztlib.train(cfg, [f"checkpoint.dir={wide}", "checkpoint.save_interval=10", "train_iters=10",
                          "zero_optimization.stage=2"], ranks=2)
p2, rows = ztlib.train(cfg, [f"checkpoint.dir={wide}", "checkpoint.save_interval=10"])
d = ztlib.max_rel_diff(ztlib.losses(rows), want[10:])
check(p1.returncode == 0 and p2.returncode == 0 and d <= 1e-5,
      f"llama: saved by 2 ranks at stage 2, resumed on 1 (max rel diff {d:.1e})", p1.stderr[-400:] + p2.stderr[-400:])
edited = os.path.join(tmp, "ck_edited")
shutil.copytree(whole, edited)
index = os.path.join(edited, "step_00000020", "index.h5")
with h5py.File(index, "r+") as f:
    text = f.attrs["model_config"]
    text = text.decode() if isinstance(text, bytes) else text
    f.attrs["model_config"] = text.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-06')
p = ztlib.run(["export", edited, "-o", os.path.join(tmp, "edited_export")])
check(one_error_line(p, "index.h5"), "an edited model_config attribute is refused in one line", p.stderr[-400:])

# ---------------------------------------------------------------- malformed folders
def broken(name, edit=None, drop=None):
    d = os.path.join(tmp, "broken_" + name)
    shutil.copytree(folder, d)
    if edit:
        path = os.path.join(d, "config.json")
        with open(path) as f:
            cj = json.load(f)
        edit(cj)
        with open(path, "w") as f:
            json.dump(cj, f, indent=2)
    if drop:
        os.unlink(os.path.join(d, drop))
    return d


shards = sorted(set(json.load(open(os.path.join(folder, "model.safetensors.index.json")))["weight_map"].values()))
bad = [
    ("unknown_model_type", lambda c: c.update(model_type="gpt_neox"), None, ("config.json:", "model_type", "gpt_neox")),
    ("kv_not_dividing", lambda c: c.update(num_key_value_heads=3), None, ("config.json:", "num_key_value_heads")),
    ("no_intermediate", lambda c: c.pop("intermediate_size"), None, ("config.json", "intermediate_size")),
    ("rope_linear", lambda c: c.update(rope_scaling={"type": "linear", "factor": 2.0}), None,
     ("config.json:", "rope_scaling.type", "linear")),
    ("gelu", lambda c: c.update(hidden_act="gelu"), None, ("config.json:", "hidden_act")),
    ("wrong_shape", lambda c: c.update(intermediate_size=160), None, ("mlp.gate_proj.weight", "[176, 64]", "[160, 64]")),
    ("missing_shard", None, shards[1], (shards[1],)),
]
for name, edit, drop, needles in bad:
    d = broken(name, edit, drop)
    p = zt_eval(d, 1)
    check(one_error_line(p, d, *needles), f"malformed folder, {name}: one line naming the file and {needles[-1]}",
          p.stderr[-400:])
ztlib.finish()
