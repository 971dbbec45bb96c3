"""t_hf_transformers.py — zerotrain against the real Hugging Face libraries (transformers,
tokenizers, safetensors from PyPI, pinned by scripts/install-deps.sh), in both directions.

Out: a tiny model trained by zerotrain is exported; the folder loads as is with
GPT2LMHeadModel.from_pretrained (no missing or unexpected weights), AutoTokenizer.from_pretrained
(slow and fast) and pipeline("text-generation"); transformers' loss on the same tokens equals
`zerotrain eval` (relative 1e-5, both fp32), greedy generation of 24 tokens is the same ids and the
same text as `zerotrain sample --top-k 1`, and the tokenizer encodes and decodes like zerotrain.
In: a random GPT-2 saved by save_pretrained with a small max_shard_size (an index and several
shards) gives the same loss and the same greedy ids in `zerotrain eval` / `sample`, and
model.init_from of it starts training from those weights (lr 0: the checkpoint then holds them,
its eval loss equals transformers'). A missing shard, a tensor the index puts in a shard that lacks
it, and a truncated shard each fail with one line naming the file. Export without a vocabulary
writes the weights and says in one line why there is no tokenizer. `sample` streams: its first
text arrives while it still runs, and the streamed text is the decode of its ids. `eval` refuses
to read past the end of its data."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import ztlib

ztlib.use_pypi_env("transformers", "safetensors", "tokenizers")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel  # noqa: E402

transformers.logging.set_verbosity_error()
torch.manual_seed(0)
check = ztlib.check
tmp = tempfile.mkdtemp(prefix="zt_hf_")
B, T, N = 2, 32, 3
PROMPT = "First Citizen:\nBefore we"


def val_loss(p):
    for line in p.stdout.splitlines():
        if "val_loss:" in line:
            return float(line.split("val_loss:")[1])
    return None


def hf_loss(model, tokens):
    """zerotrain eval's contract: batch k = tokens[k*B*T : (k+1)*B*T + 1] as B rows of T, mean of
    the per-batch mean cross-entropies."""
    total = 0.0
    with torch.no_grad():
        for k in range(N):
            chunk = torch.tensor(tokens[k * B * T: (k + 1) * B * T + 1])
            x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
            logits = model(x).logits.double()
            total += float(torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1)))
    return total / N


def hf_greedy(model, ids, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=50256)
    return out[0, len(ids):].tolist()


def zt_greedy_ids(model_dir, n, prompt=PROMPT):
    p = ztlib.run(["sample", model_dir, "--prompt", prompt, "--max-tokens", str(n), "--top-k", "1", "--print-ids"])
    return [int(x) for x in p.stdout.split()] if p.returncode == 0 else p.stderr[-400:]


def one_error_line(p, path, what=""):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    errs = [l for l in lines if l.startswith("zerotrain: error:")]
    return p.returncode != 0 and len(errs) == 1 and path in errs[0] and what in errs[0]


# ---------------------------------------------------------------- out: zerotrain -> transformers
prefix = ztlib.ensure_shakespeare()
val_shard = prefix + "_val.bin"
val_tokens = ztlib.read_shard(val_shard)
ckpt, exp = os.path.join(tmp, "ckpt"), os.path.join(tmp, "export")
p, _ = ztlib.train(os.path.join(ztlib.ROOT, "configs/tiny.yaml"), [f"checkpoint.dir={ckpt}"])
check(p.returncode == 0, "train_tiny", p.stderr[-500:])
p = ztlib.run(["export", ckpt, "-o", exp])
want = ["config.json", "generation_config.json", "merges.txt", "model.safetensors", "special_tokens_map.json",
        "tokenizer_config.json", "vocab.json"]
check(p.returncode == 0 and sorted(os.listdir(exp)) == want, "export_writes_weights_configs_tokenizer",
      f"{sorted(os.listdir(exp)) if os.path.isdir(exp) else None} {p.stderr[-400:]}")

with safe_open(os.path.join(exp, "model.safetensors"), "pt") as f:
    names, meta = list(f.keys()), f.metadata()
check(meta == {"format": "pt"} and "transformer.h.1.mlp.c_fc.weight" in names and len(names) == 2 + 12 * 2 + 2,
      "safetensors_library_reads_export", f"{meta} {names[:4]}")

model, info = GPT2LMHeadModel.from_pretrained(exp, output_loading_info=True)
model.eval()
check(not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"],
      "from_pretrained_loads_every_weight", str(info))

e = ztlib.run(["eval", exp, "--data", val_shard, "--batch-size", str(B), "--seq-len", str(T), "--batches", str(N)])
zl, hl = val_loss(e), hf_loss(model, val_tokens)
check(zl is not None and abs(zl - hl) <= 1e-5 * abs(hl), "export_loss_equals_transformers",
      f"zerotrain {zl} transformers {hl}; {e.stderr[-300:]}")

slow = AutoTokenizer.from_pretrained(exp, use_fast=False)
fast = AutoTokenizer.from_pretrained(exp)
mixed = ("Hello world! It's 2024 — naïve café, 東京タワー, Здравствуйте, مرحبا 🎉🚀\n\n"
         "  indented\tline's end   \r\n done. ")  # no "<|endoftext|>": zerotrain reads it as text, transformers as EOT
textfile = os.path.join(tmp, "mixed.txt")
with open(textfile, "w", encoding="utf-8") as f:
    f.write(mixed)
p = ztlib.run(["tokenize", "--vocab", os.path.join(ztlib.ROOT, "data/gpt2"), textfile, "-o", os.path.join(tmp, "mixed"),
               "--val-fraction", "0"])
zt_ids = ztlib.read_shard(os.path.join(tmp, "mixed_train_000000.bin")).tolist() if p.returncode == 0 else p.stderr
ids_slow = slow(mixed, add_special_tokens=False)["input_ids"]
ids_fast = fast(mixed, add_special_tokens=False)["input_ids"]
check(zt_ids == ids_slow == ids_fast, "auto_tokenizer_encodes_like_zerotrain",
      f"zerotrain {zt_ids[:12]} slow {ids_slow[:12]} fast {ids_fast[:12]}")
check(fast.decode(zt_ids) == mixed and slow.decode(zt_ids) == mixed, "auto_tokenizer_decodes_zerotrain_ids",
      repr(fast.decode(zt_ids)[:80]))
check(fast.eos_token_id == 50256 and fast.model_max_length == 64, "tokenizer_config_values",
      f"eos {fast.eos_token_id} max {fast.model_max_length}")

prompt_ids = fast(PROMPT)["input_ids"]
zg, hg = zt_greedy_ids(exp, 24), hf_greedy(model, prompt_ids, 24)
check(zg == hg, "greedy_ids_equal_transformers_generate", f"zerotrain {zg} transformers {hg}")

# export without a vocabulary: the weights, and one line saying why there is no tokenizer
exp2 = os.path.join(tmp, "export_novocab")
p = ztlib.run(["export", ckpt, "-o", exp2], env={"ZEROTRAIN_VOCAB": os.path.join(tmp, "no_vocab_here")})
notes = [l for l in p.stderr.splitlines() if "tokenizer not written" in l]
check(p.returncode == 0 and os.path.exists(os.path.join(exp2, "model.safetensors")) and
      not os.path.exists(os.path.join(exp2, "vocab.json")) and len(notes) == 1 and "no_vocab_here" in notes[0],
      "export_without_vocab_says_why", p.stderr[-400:])

# ---------------------------------------------------------------- in: transformers -> zerotrain
cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=50257, resid_pdrop=0, embd_pdrop=0,
                 attn_pdrop=0)
torch.manual_seed(5)
theirs = GPT2LMHeadModel(cfg)
with torch.no_grad():  # larger than the default init, so the logits are far from uniform
    for name, t in theirs.named_parameters():
        t.add_(torch.randn_like(t) * 0.2)
theirs.eval()
sharded = os.path.join(tmp, "sharded")
theirs.save_pretrained(sharded, max_shard_size="20KB", safe_serialization=True)
index_path = os.path.join(sharded, "model.safetensors.index.json")
with open(index_path) as f:
    index = json.load(f)
shards = sorted(set(index["weight_map"].values()))
check(len(shards) >= 3 and not os.path.exists(os.path.join(sharded, "model.safetensors")), "save_pretrained_sharded",
      f"{len(shards)} shards")
e = ztlib.run(["eval", sharded, "--data", val_shard, "--batch-size", str(B), "--seq-len", str(T), "--batches", str(N)])
zl, hl = val_loss(e), hf_loss(theirs, val_tokens)
check(zl is not None and abs(zl - hl) <= 1e-5 * abs(hl), "sharded_import_loss_equals_transformers",
      f"zerotrain {zl} transformers {hl}; {e.stderr[-300:]}")
zg, hg = zt_greedy_ids(sharded, 16), hf_greedy(theirs, prompt_ids, 16)
check(zg == hg, "sharded_import_greedy_equals_transformers", f"zerotrain {zg} transformers {hg}")

ft = os.path.join(tmp, "finetune")
p, _ = ztlib.train(os.path.join(ztlib.ROOT, "configs/tiny.yaml"),
                   [f"model.init_from={sharded}", "train_iters=1", "optimizer.params.lr=0", "optimizer.params.weight_decay=0",
                    "scheduler=null", f"checkpoint.dir={ft}"])
e = ztlib.run(["eval", ft, "--data", val_shard, "--batch-size", str(B), "--seq-len", str(T), "--batches", str(N)])
zl = val_loss(e)
check(p.returncode == 0 and zl is not None and abs(zl - hl) <= 1e-5 * abs(hl), "init_from_sharded_starts_from_its_weights",
      f"zerotrain {zl} transformers {hl}; {p.stderr[-300:]} {e.stderr[-300:]}")


# a zerotrain export of those (random, far from uniform) weights: varied greedy text, so the
# comparison with pipeline("text-generation") on the folder as is means something
exp_ft = os.path.join(tmp, "export_ft")
p = ztlib.run(["export", ft, "-o", exp_ft])
s = ztlib.run(["sample", exp_ft, "--prompt", PROMPT, "--max-tokens", "24", "--top-k", "1"])
zg = zt_greedy_ids(exp_ft, 24)
pipe = transformers.pipeline("text-generation", model=exp_ft)
out = pipe(PROMPT, max_new_tokens=24, do_sample=False)[0]["generated_text"]
check(p.returncode == 0 and s.returncode == 0 and s.stdout == out + "\n" and len(set(zg)) > 4,
      "pipeline_text_equals_zerotrain_sample", f"zerotrain {s.stdout!r} pipeline {out!r} ids {zg} {p.stderr[-300:]}")
check(zg == hf_greedy(theirs, prompt_ids, 24), "round_trip_greedy_equals_transformers", f"{zg}")


def broken_copy(name):
    d = os.path.join(tmp, name)
    shutil.copytree(sharded, d)
    return d


d = broken_copy("missing_shard")
os.unlink(os.path.join(d, shards[1]))
p = ztlib.run(["eval", d, "--data", val_shard, "--seq-len", str(T), "--batches", "1"])
check(one_error_line(p, os.path.join(d, shards[1]), "cannot open"), "error_missing_shard", p.stderr[-400:])

d = broken_copy("wrong_shard")
with open(os.path.join(d, "model.safetensors.index.json")) as f:
    idx = json.load(f)
moved = "transformer.ln_f.weight"
other = next(s for s in shards if s != idx["weight_map"][moved])
idx["weight_map"][moved] = other
with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
    json.dump(idx, f, indent=2)
p = ztlib.run(["eval", d, "--data", val_shard, "--seq-len", str(T), "--batches", "1"])
check(one_error_line(p, os.path.join(d, other), moved), "error_tensor_absent_from_its_shard", p.stderr[-400:])

d = broken_copy("truncated_shard")
victim = os.path.join(d, index["weight_map"]["transformer.wte.weight"])
os.truncate(victim, os.path.getsize(victim) - 100)
p = ztlib.run(["eval", d, "--data", val_shard, "--seq-len", str(T), "--batches", "1"])
check(one_error_line(p, victim, "truncated"), "error_truncated_shard", p.stderr[-400:])

# ---------------------------------------------------------------- sample streams, eval stays inside its data
proc = subprocess.Popen([ztlib.BIN, "sample", exp, "--prompt", "To be", "--max-tokens", str(1 << 20), "--seed", "7"],
                        cwd=ztlib.ROOT, env=ztlib.ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
hang_guard = threading.Timer(120, proc.kill)  # only so that a sample that never streams cannot hang the suite
hang_guard.start()
first = b""
while len(first) < len(b"To be") + 1:  # the prompt, then at least one generated byte
    chunk = os.read(proc.stdout.fileno(), 4096)
    if not chunk:
        break
    first += chunk
running = proc.poll() is None  # a million tokens take far longer than it took to get here
proc.send_signal(signal.SIGKILL)
proc.wait()
hang_guard.cancel()
check(first.startswith(b"To be") and len(first) > 5 and running, "sample_streams_text_while_running",
      f"first {first[:60]!r}, running {running}")

ids = ztlib.run(["sample", exp, "--prompt", "To be", "--max-tokens", "200", "--seed", "3", "--temperature", "1.5",
                 "--top-k", "0", "--print-ids"])
txt = subprocess.run([ztlib.BIN, "sample", exp, "--prompt", "To be", "--max-tokens", "200", "--seed", "3", "--temperature",
                      "1.5", "--top-k", "0"], cwd=ztlib.ROOT, env=ztlib.ENV, capture_output=True, timeout=120)
id_list = [int(x) for x in ids.stdout.split()]
encoder = {v: k for k, v in json.load(open(os.path.join(ztlib.ROOT, "data/gpt2/encoder.json"))).items()}
raw = b"".join(bytes(slow.byte_decoder[c] for c in encoder[i]) for i in id_list)
check(len(id_list) == 200 and txt.stdout == b"To be" + raw + b"\n", "streamed_text_is_decode_of_ids",
      f"{len(id_list)} ids; {txt.stdout[:80]!r} vs {raw[:80]!r}")

short = os.path.join(tmp, "short.bin")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref  # noqa: E402

gpt2_ref.write_shard(short, np.arange(100))
p = ztlib.run(["eval", exp, "--data", short, "--batch-size", "2", "--seq-len", "16", "--batches", "4"])
check(one_error_line(p, short, "100 tokens") and "129" in p.stderr, "eval_refuses_to_read_past_the_end", p.stderr[-400:])
p = ztlib.run(["eval", exp, "--data", short, "--batch-size", "2", "--seq-len", "16", "--batches", "3"])
check(p.returncode == 0 and val_loss(p) is not None, "eval_reads_up_to_the_last_token", p.stderr[-400:])

shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
