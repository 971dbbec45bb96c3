"""t_llama_table.py — the Llama family's parameter table (issue 50, part 1) against transformers'.

For tiny Llama (grouped-query, untied), Llama with attention_bias, Qwen2 (q/k/v biases, tied) and
Mistral configs, `zerotrain estimate` sizes exactly as many parameters as transformers'
LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM of the same config holds. Shapes zerotrain
cannot build are refused in one line naming the key: num_key_value_heads not dividing n_head, a
missing intermediate_size, a tensor-parallel size that does not divide the key/value heads. A Llama trains on the CPU and the simulated GPU, and every ZeRO stage on 2 and 4 ranks, tensor parallelism 2, optimizer offload (ratio 1 and Twin-Flow 0.5), ZeRO-Infinity (parameters
on the host or NVMe, the optimizer on NVMe) and activation checkpointing (plain, and partitioned to
the CPU) give the single-rank losses. Logits, gradients, import, export and checkpoints against
transformers are test/t_llama_hf.py."""
import os
import re
import tempfile

import ztlib

ztlib.use_pypi_env("transformers")

import transformers  # noqa: E402
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,  # noqa: E402
                          Qwen2Config, Qwen2ForCausalLM)

transformers.logging.set_verbosity_error()
check = ztlib.check
tmp = tempfile.mkdtemp(prefix="zt_llama_")
L, H, KV, C, I, V, P = 2, 4, 2, 64, 176, 320, 128


def yaml(name, model):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write("model: {%s}\ndata: {seq_len: 32}\ntrain_micro_batch_size_per_gpu: 2\n" % model)
    return path


def estimate(path, *extra):
    return ztlib.run(["estimate", path, "--ranks", "1"] + list(extra), timeout=60)


base = f"n_layer: {L}, n_head: {H}, num_key_value_heads: {KV}, n_embd: {C}, intermediate_size: {I}, " \
       f"vocab_size: {V}, n_positions: {P}"
common = dict(hidden_size=C, intermediate_size=I, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
              vocab_size=V, max_position_embeddings=P)
cases = [
    ("llama", "model_type: llama, " + base, LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=False))),
    ("llama_bias", "model_type: llama, attention_bias: true, " + base,
     LlamaForCausalLM(LlamaConfig(**common, attention_bias=True, tie_word_embeddings=False))),
    ("qwen2_tied", "model_type: qwen2, tie_word_embeddings: true, " + base,
     Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=True))),
    ("mistral_mqa", "model_type: mistral, " + base.replace(f"num_key_value_heads: {KV}", "num_key_value_heads: 1"),
     MistralForCausalLM(MistralConfig(**dict(common, num_key_value_heads=1), tie_word_embeddings=False))),
]
for name, model, ref in cases:
    r = estimate(yaml(name, model))
    m = re.search(r"parameters \((\d+)\)", r.stdout)
    want = sum(p.numel() for p in ref.parameters())
    check(r.returncode == 0 and m and int(m.group(1)) == want, f"{name}: estimate sizes transformers' {want} parameters",
          (r.stdout + r.stderr)[-400:])
    check(f"{name.split('_')[0]} KV" in r.stdout, f"{name}: estimate names the family", r.stdout[:300])

refusals = [
    ("kv_not_dividing", "model_type: llama, " + base.replace(f"num_key_value_heads: {KV}", "num_key_value_heads: 3"),
     (), "model.num_key_value_heads 3 must divide model.n_head 4"),
    ("no_intermediate", "model_type: llama, " + base.replace(f"intermediate_size: {I}", "intermediate_size: 0"),
     (), "model.intermediate_size 0 must be positive"),
    ("tp_not_dividing_kv", "model_type: llama, " + base, ("--tp", "4"), "must divide model.num_key_value_heads 2"),
]
for name, model, extra, want in refusals:
    r = ztlib.run(["estimate", yaml(name, model), "--ranks", "4"] + list(extra), timeout=60)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    check(r.returncode != 0 and want in r.stderr and len(lines) <= 3, f"refusal {name}: one line naming the key",
          f"rc {r.returncode}: {r.stderr[-400:]}")

# Training: the tiny config as a Llama (grouped-query, multi-query) learns, and every ZeRO stage on 2
# ranks, and tensor parallelism 2 (one key/value head a rank), give the single-rank losses (relative
# 1e-5, as test/t_zero.py holds GPT-2); the simulated GPU's bf16 run learns too.
ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
llama = ["model.model_type=llama", "model.intermediate_size=88", "train_iters=8", "checkpoint.dir="]
for kv, extra in ((1, []), (2, [])):
    sets = llama + [f"model.num_key_value_heads={kv}"]
    p, rows = ztlib.train(cfg, sets)
    base = ztlib.losses(rows)
    if not check(p.returncode == 0 and len(base) == 8, f"llama kv{kv}: trains on the CPU", p.stderr[-1500:]):
        continue
    check(base[-1] < base[0] - 0.2, f"llama kv{kv}: learns", f"losses {base[:1]} -> {base[-1:]}")
    runs = [(f"stage{st}_ranks2", [f"zero_optimization.stage={st}"], 2) for st in (1, 2, 3)]
    if kv == 2:  # the other engine settings once, on the grouped-query model
        nvme = os.path.join(tmp, "nvme")
        os.makedirs(nvme, exist_ok=True)
        runs += [("tp2", ["tensor_parallel.tp_size=2"], 2),
                 ("stage0_ranks2", ["zero_optimization.stage=0"], 2)] + \
                [(f"stage{st}_ranks4", [f"zero_optimization.stage={st}"], 4) for st in (0, 1, 2, 3)] + [
                 ("stage2_offload_cpu", ["zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"], 2),
                 ("stage2_twin_flow_0.5", ["zero_optimization.stage=2",
                                           "zero_optimization.offload_optimizer={device: cpu, ratio: 0.5}"], 2),
                 ("stage3_param_cpu_optimizer_nvme", ["zero_optimization.stage=3", "zero_optimization.offload_param.device=cpu",
                                                      f"zero_optimization.offload_optimizer={{device: nvme, nvme_path: {nvme}}}"],
                  2),
                 ("stage3_param_nvme", ["zero_optimization.stage=3",
                                        f"zero_optimization.offload_param={{device: nvme, nvme_path: {nvme}}}"], 1),
                 ("act_ckpt", ["activation_checkpointing.enabled=true"], 0),
                 ("act_ckpt_partitioned_cpu", ["zero_optimization.stage=3", "activation_checkpointing={enabled: true, "
                                               "partition_activations: true, cpu_checkpointing: true}"], 2)]
    for name, more, ranks in runs:
        p, rows = ztlib.train(cfg, sets + more, ranks=ranks)
        got = ztlib.losses(rows)
        d = ztlib.max_rel_diff(got, base)
        check(p.returncode == 0 and d <= 1e-5, f"llama kv{kv} {name}: the single-rank losses (max rel diff {d:.1e})",
              p.stderr[-1500:])
p, rows = ztlib.train(cfg, llama + ["model.num_key_value_heads=1", "device=sim", "bf16.enabled=true"])
got = ztlib.losses(rows)
check(p.returncode == 0 and len(got) == 8 and got[-1] < got[0] - 0.2, "llama on the simulated GPU (bf16) learns",
      p.stderr[-1500:])
ztlib.finish()
