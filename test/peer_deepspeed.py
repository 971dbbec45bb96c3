"""peer_deepspeed.py — DeepSpeed beside zerotrain on the same GPU, from the same config (gpu-check's
`peer` part; it runs where DeepSpeed, torch and transformers are, the GPU machine).

  python3 test/peer_deepspeed.py translate EFFECTIVE.yaml      DeepSpeed's JSON config, on stdout
  python3 test/peer_deepspeed.py train EFFECTIVE.yaml --metrics FILE [--steps N]

EFFECTIVE.yaml is what `zerotrain config CONFIG --set ...` prints: the config zerotrain trains with,
every default filled in. It is the one source of truth: `translate` keeps the keys DeepSpeed has
(zerotrain's names are DeepSpeed's, so the translation is a choice of keys, not a renaming) and
drops zerotrain's own (model, data, train_iters, overlap_step, ...); test/t_gpu_check.sh feeds the
JSON back to `zerotrain config` and checks that every kept key comes back with the same value.

`train` builds the same GPT-2 in transformers (GPT2LMHeadModel: tanh GELU, tied embeddings, no
dropout, SDPA attention; gradient checkpointing when activation_checkpointing.enabled), reads the
same llm.c token shards in the same order, and times each optimizer step (every micro-step's
forward and backward and DeepSpeed's step, between CUDA synchronizations). One JSON line per step
goes to --metrics, with the fields zerotrain's metrics_file uses (step, loss, step_ms,
tokens_per_s), so the two files are read by the same code."""
import glob
import json
import os
import sys
import time

# zerotrain keys that DeepSpeed also has, by section; every other key is zerotrain's own
DS_TOP = ["train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping"]
DS_OPT_PARAMS = ["lr", "betas", "eps", "weight_decay", "bias_correction"]
DS_FP16 = ["enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"]
DS_ZERO = ["stage", "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size",
           "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
           "stage3_max_reuse_distance", "sub_group_size"]
DS_OFFLOAD_OPT = ["device", "pin_memory", "ratio", "nvme_path", "buffer_count", "pipeline_read", "pipeline_write",
                  "fast_init"]
DS_OFFLOAD_PARAM = ["device", "pin_memory", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu"]


def pick(d, keys):
    return {k: d[k] for k in keys if k in d and d[k] is not None}


def translate(cfg):
    """DeepSpeed's config dict for zerotrain's effective config dict cfg."""
    ds = pick(cfg, DS_TOP)
    opt = cfg["optimizer"]
    ds["optimizer"] = {"type": opt["type"], "params": pick(opt["params"], DS_OPT_PARAMS)}
    sched = cfg.get("scheduler")
    if sched and sched.get("type"):
        params = {k: v for k, v in sched["params"].items() if v is not None and not (k == "total_num_steps" and v == 0)}
        ds["scheduler"] = {"type": sched["type"], "params": params}
    ds["bf16"] = {"enabled": bool(cfg["bf16"]["enabled"])}
    ds["fp16"] = pick(cfg["fp16"], DS_FP16)
    z = cfg["zero_optimization"]
    zd = pick(z, DS_ZERO)
    for key, keys in (("offload_optimizer", DS_OFFLOAD_OPT), ("offload_param", DS_OFFLOAD_PARAM)):
        off = z.get(key) or {}
        if off.get("device", "none") != "none":
            zd[key] = pick(off, keys)
    ds["zero_optimization"] = zd
    ds["steps_per_print"] = 10 ** 9
    return ds


def numbers(v):
    """v with the strings YAML 1.1 leaves unread ("1e-08": no dot) turned into the numbers they are"""
    if isinstance(v, dict):
        return {k: numbers(x) for k, x in v.items()}
    if isinstance(v, list):
        return [numbers(x) for x in v]
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def load_effective(path):
    import yaml
    with open(path) as f:
        return numbers(yaml.safe_load(f))


def flops_per_token(L, C, V, T):
    """model FLOPs per trained token: 6 per parameter of the matmuls (forward 2, backward 4) and the
    attention's QK^T and AV, as in test/bench_gpu.sh and bench_train.py; recompute not counted"""
    return 6.0 * (L * 12.0 * C * C + V * C) + 6.0 * L * T * C


def shard_tokens(pattern):
    """the tokens of the llm.c shards matching pattern, in name order (uint16 after a 256-int32 header)"""
    import numpy as np
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"peer_deepspeed: error: no token shard matches {pattern}")
    parts = []
    for f in files:
        head = np.fromfile(f, dtype=np.int32, count=256)
        parts.append(np.fromfile(f, dtype=np.uint16, offset=256 * 4, count=int(head[2])))
    return np.concatenate(parts)


def train(cfg, metrics_path, steps):
    import numpy as np
    import torch
    import deepspeed
    from transformers import GPT2Config, GPT2LMHeadModel

    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", "29517")):
        os.environ.setdefault(k, v)
    torch.backends.cuda.matmul.allow_tf32 = True
    deepspeed.init_distributed(dist_backend="nccl")
    m = cfg["model"]
    L, H, C, V, P = m["n_layer"], m["n_head"], m["n_embd"], m["vocab_size"], m["n_positions"]
    T = cfg["data"]["seq_len"]
    B = cfg["train_micro_batch_size_per_gpu"]
    GA = cfg["gradient_accumulation_steps"]
    conf = GPT2Config(vocab_size=V, n_positions=P, n_embd=C, n_layer=L, n_head=H, activation_function="gelu_new",
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                      tie_word_embeddings=True, use_cache=False, attn_implementation="sdpa")
    ds = translate(cfg)
    torch.manual_seed(cfg.get("seed", 1234))
    t0 = time.time()
    print(f"peer_deepspeed: building GPT-2 L{L} H{H} C{C} (ZeRO stage {ds['zero_optimization'].get('stage', 0)})",
          flush=True)
    if ds["zero_optimization"].get("stage", 0) == 3:
        with deepspeed.zero.Init(config_dict_or_path=ds):
            model = GPT2LMHeadModel(conf)
    else:
        # initialized on the GPU: on the first H100 run, built on the CPU (1.5B fp32 parameters) and
        # initialized, the model was not ready after 69 s
        with torch.device("cuda"):
            model = GPT2LMHeadModel(conf)
    print(f"peer_deepspeed: model built in {time.time() - t0:.1f}s; deepspeed.initialize", flush=True)
    if cfg.get("activation_checkpointing", {}).get("enabled"):
        model.gradient_checkpointing_enable()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
    print(f"peer_deepspeed: DeepSpeed {deepspeed.__version__}, torch {torch.__version__}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters (transformers' count), "
          f"ready in {time.time() - t0:.1f}s", flush=True)
    tokens = shard_tokens(cfg["data"]["train"])
    per_micro = B * T
    pos = 0
    fpt = flops_per_token(L, C, V, T)
    with open(metrics_path, "w") as out:
        for step in range(1, steps + 1):
            torch.cuda.synchronize()
            t = time.time()
            loss_sum = 0.0
            for _ in range(GA):
                if pos + per_micro + 1 > len(tokens):
                    pos = 0
                x = torch.from_numpy(tokens[pos:pos + per_micro].astype(np.int64)).view(B, T).cuda()
                pos += per_micro
                loss = engine(input_ids=x, labels=x).loss
                engine.backward(loss)
                engine.step()
                loss_sum += loss.item()
            torch.cuda.synchronize()
            dt = time.time() - t
            tps = per_micro * GA / dt
            rec = {"step": step, "loss": loss_sum / GA, "step_ms": dt * 1e3, "tokens_per_s": tps,
                   "tflops": fpt * tps / 1e12}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(f"step {step}: loss {rec['loss']:.4f}, {rec['step_ms']:.0f} ms, {tps:.0f} tok/s, "
                  f"{rec['tflops']:.1f} TFLOP/s", flush=True)


def main(argv):
    if len(argv) >= 2 and argv[0] == "translate":
        json.dump(translate(load_effective(argv[1])), sys.stdout, indent=1)
        print()
        return 0
    if len(argv) >= 2 and argv[0] == "train":
        metrics, steps, i = None, 4, 2
        while i < len(argv):
            if argv[i] == "--metrics" and i + 1 < len(argv):
                metrics = argv[i + 1]
            elif argv[i] == "--steps" and i + 1 < len(argv):
                steps = int(argv[i + 1])
            else:
                sys.exit(f"peer_deepspeed: error: unknown argument '{argv[i]}'")
            i += 2
        if not metrics:
            sys.exit("peer_deepspeed: error: train needs --metrics FILE")
        train(load_effective(argv[1]), metrics, steps)
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
