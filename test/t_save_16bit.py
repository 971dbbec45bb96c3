"""t_save_16bit.py — zero_optimization.stage3_gather_16bit_weights_on_model_save (issue 13): each
checkpoint a run saves also gets its model as a 16-bit Hugging Face GPT-2 directory, step_N/hf.

A 2-rank ZeRO-3 run of configs/tiny.yaml (CPU backend: bf16) saves steps 2, 4, 6 with keep_last 2:
steps 4 and 6 each hold hf/ (config.json with torch_dtype bfloat16, model.safetensors with every
tensor BF16, the tokenizer), the pruned step 2 is gone with its export, and no temporary directory
is left. The weights are the checkpoint's fp32 master weights (index.h5's params/, read with h5py)
rounded to nearest even, bit for bit (numpy on the raw safetensors bytes). transformers loads the
directory as it is (torch_dtype "auto" gives bfloat16, no missing or unexpected weights) and its
logits equal those of `zerotrain export --dtype fp32` of the same step within bf16 rounding; the
greedy ids of `zerotrain sample` on it equal transformers'. With fp16.enabled (the older key name)
the export is F16 (torch_dtype float16), bit for bit numpy's float16 of the master weights, and a
run without the key writes no hf/. Faults (an export that cannot be written) are in
t_checkpoint_faults.py."""
import json
import os
import shutil
import struct
import tempfile

import ztlib

ztlib.use_pypi_env("transformers", "safetensors", "h5py")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2LMHeadModel  # noqa: E402

transformers.logging.set_verbosity_error()
check = ztlib.check
ztlib.ensure_shakespeare()
TINY = "configs/tiny.yaml"
KEY = "zero_optimization.stage3_gather_16bit_weights_on_model_save"
tmp = tempfile.mkdtemp(prefix="zt_save16_")


def train(ck, sets, ranks):
    args = ["train", TINY, "--set", f"checkpoint.dir={ck}"]
    for s in sets:
        args += ["--set", s]
    return ztlib.run(args, ranks=ranks)


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} straight from the file format (8-byte length, JSON, data)"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def bf16_bits(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (no NaNs in weights)"""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def compare_to_master(step_dir, want_dtype, name):
    """every tensor of step_dir/hf/model.safetensors is DTYPE and equals the fp32 master rounded"""
    tensors = read_safetensors(os.path.join(step_dir, "hf", "model.safetensors"))
    bad = []
    with h5py.File(os.path.join(step_dir, "index.h5"), "r") as f:
        params = f["params"]
        if sorted(params.keys()) != sorted(tensors.keys()):
            return check(False, name, f"tensor names differ: {sorted(set(params.keys()) ^ set(tensors.keys()))}")
        for k, (dtype, shape, raw) in tensors.items():
            master = params[k][()]
            got = np.frombuffer(raw, dtype="<u2").reshape(shape)
            want = bf16_bits(master) if want_dtype == "BF16" else master.astype(np.float16).view(np.uint16)
            if dtype != want_dtype or list(master.shape) != list(shape) or not np.array_equal(got, want.reshape(shape)):
                bad.append(f"{k}: {dtype} {shape}, {int(np.sum(got != want.reshape(shape)))} values differ")
    return check(not bad and len(tensors) > 0, name, "; ".join(bad[:4]))


def logits(model, ids):
    model.eval()
    with torch.no_grad():
        return model.float()(torch.tensor([ids])).logits[0].double()


try:
    # ---- 2 ranks, ZeRO-3, bf16 (CPU backend), saves at steps 2, 4, 6, keeping the last 2
    ck = os.path.join(tmp, "ck")
    p = train(ck, ["zero_optimization.stage=3", "train_iters=6", "checkpoint.save_interval=2", "checkpoint.keep_last=2",
                   f"{KEY}=true"], ranks=2)
    check(p.returncode == 0, "stage3_run_with_16bit_save", p.stderr[-1500:])
    steps = sorted(d for d in os.listdir(ck) if d.startswith("step_"))
    check(steps == ["step_00000004", "step_00000006"], "pruned_with_their_export", str(steps))
    want_files = {"config.json", "generation_config.json", "model.safetensors", "vocab.json", "merges.txt",
                  "tokenizer_config.json", "special_tokens_map.json"}
    for s in steps:
        sd = os.path.join(ck, s)
        have = set(os.listdir(os.path.join(sd, "hf"))) if os.path.isdir(os.path.join(sd, "hf")) else set()
        check(have == want_files, f"export_beside_{s}", f"hf/ holds {sorted(have)}")
        check(sorted(os.listdir(sd)) == ["hf", "index.h5", "manifest", "rank_00000.h5", "rank_00001.h5"], f"nothing_else_in_{s}",
              str(sorted(os.listdir(sd))))
        cfg = json.load(open(os.path.join(sd, "hf", "config.json"))) if have else {}
        check(cfg.get("torch_dtype") == "bfloat16", f"config_torch_dtype_bf16_{s}", str(cfg.get("torch_dtype")))
        compare_to_master(sd, "BF16", f"bf16_bit_exact_master_{s}")
    check(p.stdout.count("wrote the 16-bit model") == 3 and "/hf (BF16" in p.stdout, "save_logged", p.stdout[-800:])

    # ---- transformers: the 16-bit export against the fp32 export of the same checkpoint
    sd = os.path.join(ck, "step_00000006")
    fp32_dir = os.path.join(tmp, "fp32")
    e = ztlib.run(["export", sd, "-o", fp32_dir, "--dtype", "fp32"])
    check(e.returncode == 0, "fp32_export", e.stderr[-500:])
    ids = ztlib.read_shard(ztlib.ensure_shakespeare() + "_val.bin")[:48].tolist()
    m16 = GPT2LMHeadModel.from_pretrained(os.path.join(sd, "hf"), torch_dtype="auto")
    check(next(m16.parameters()).dtype == torch.bfloat16, "transformers_loads_bf16", str(next(m16.parameters()).dtype))
    l16 = logits(m16, ids)  # the bf16 weights, computed in fp32
    l32 = logits(GPT2LMHeadModel.from_pretrained(fp32_dir), ids)
    # bf16 keeps 8 significant bits: each weight moves by at most 2^-9 of itself
    diff, scale = float((l16 - l32).abs().max()), float(l32.abs().max())
    print(f"    max |logit diff| {diff:.4g} (max |logit| {scale:.3g})")
    check(diff <= 0.02 * scale and diff > 0, "logits_equal_fp32_within_bf16", f"max diff {diff} vs max logit {scale}")
    g = ztlib.run(["sample", os.path.join(sd, "hf"), "--prompt", "ROMEO:", "--max-tokens", "12", "--top-k", "1",
                   "--print-ids"])
    zt_ids = [int(x) for x in g.stdout.split()] if g.returncode == 0 else g.stderr[-300:]
    tok = transformers.AutoTokenizer.from_pretrained(os.path.join(sd, "hf"))
    with torch.no_grad():
        prompt = tok("ROMEO:")["input_ids"]
        out = m16.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=50256)
    check(zt_ids == out[0, len(prompt):].tolist(), "sample_reads_the_export", f"{zt_ids} vs {out[0, len(prompt):].tolist()}")

    # ---- fp16.enabled: F16, under the older key name; one rank, ZeRO-0
    ck16 = os.path.join(tmp, "ck16")
    p = train(ck16, ["train_iters=2", "fp16.enabled=true",
                     "zero_optimization.stage3_gather_fp16_weights_on_model_save=true"], ranks=0)
    check(p.returncode == 0, "fp16_run_with_old_key_name", p.stderr[-1000:])
    sd16 = os.path.join(ck16, "step_00000002")
    cfg = json.load(open(os.path.join(sd16, "hf", "config.json"))) if os.path.isdir(os.path.join(sd16, "hf")) else {}
    check(cfg.get("torch_dtype") == "float16", "config_torch_dtype_fp16", str(cfg))
    if cfg:
        compare_to_master(sd16, "F16", "fp16_bit_exact_master")
        m = GPT2LMHeadModel.from_pretrained(os.path.join(sd16, "hf"), torch_dtype="auto")
        check(next(m.parameters()).dtype == torch.float16, "transformers_loads_fp16")

    # ---- without the key: no export
    ck0 = os.path.join(tmp, "ck0")
    p = train(ck0, ["train_iters=1"], ranks=0)
    check(p.returncode == 0 and not os.path.exists(os.path.join(ck0, "step_00000001", "hf"))
          and os.path.exists(os.path.join(ck0, "step_00000001", "index.h5")), "no_export_without_key", p.stderr[-500:])
finally:
    shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
