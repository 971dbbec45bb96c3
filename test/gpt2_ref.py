"""gpt2_ref.py — a plain-PyTorch GPT-2 reference (no `transformers`) and the file helpers the
cross-check tests need: safetensors read/write (struct + json + numpy, so no `safetensors`
package is needed), Hugging Face config.json, and llm.c token shards.

The model follows Hugging Face's GPT2LMHeadModel exactly:
  * parameter names and Conv1D layout: y = x W + b with W of shape [in, out];
  * pre-LayerNorm blocks: x += attn(ln_1(x)); x += mlp(ln_2(x)); then ln_f;
  * causal multi-head attention, scores scaled by 1/sqrt(head_dim);
  * GELU, tanh approximation ("gelu_new"); LayerNorm eps 1e-5 (biased variance);
  * LM head tied to wte (logits = h wte^T); loss = mean cross-entropy over all positions.
Parameters live in a dict name -> tensor, in zerotrain's flat-vector order (param_shapes)."""

import json
import math
import os
import struct
from collections import OrderedDict

import numpy as np
import torch

BLOCK_TENSORS = [  # (leaf name, shape as a function of C), in zerotrain's table order
    ("ln_1.weight", lambda C: (C,)),
    ("ln_1.bias", lambda C: (C,)),
    ("attn.c_attn.weight", lambda C: (C, 3 * C)),
    ("attn.c_attn.bias", lambda C: (3 * C,)),
    ("attn.c_proj.weight", lambda C: (C, C)),
    ("attn.c_proj.bias", lambda C: (C,)),
    ("ln_2.weight", lambda C: (C,)),
    ("ln_2.bias", lambda C: (C,)),
    ("mlp.c_fc.weight", lambda C: (C, 4 * C)),
    ("mlp.c_fc.bias", lambda C: (4 * C,)),
    ("mlp.c_proj.weight", lambda C: (4 * C, C)),
    ("mlp.c_proj.bias", lambda C: (C,)),
]


def param_shapes(cfg):
    """[(name, shape)] in zerotrain's flat order: wte, wpe, blocks, ln_f. cfg: dict with
    n_layer, n_head, n_embd, vocab_size, n_positions."""
    C = cfg["n_embd"]
    out = [("transformer.wte.weight", (cfg["vocab_size"], C)),
           ("transformer.wpe.weight", (cfg["n_positions"], C))]
    for layer in range(cfg["n_layer"]):
        for leaf, shape in BLOCK_TENSORS:
            out.append((f"transformer.h.{layer}.{leaf}", shape(C)))
    out += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
    return out


def random_params(cfg, std=0.1, seed=0):
    """Random fp32 weights (numpy, OrderedDict in table order): every tensor N(0, std), LayerNorm
    weights 1 + N(0, std), so that no term of the forward/backward is trivially zero or one."""
    rng = np.random.default_rng(seed)
    params = OrderedDict()
    for name, shape in param_shapes(cfg):
        x = rng.standard_normal(shape) * std
        if ".ln_" in name and name.endswith(".weight"):
            x += 1.0
        params[name] = x.astype(np.float32)
    return params


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased, as torch.nn.LayerNorm
    return (x - mean) / torch.sqrt(var + eps) * w + b


def forward(p, cfg, idx, targets=None):
    """p: dict name -> torch tensor; idx, targets: LongTensor [B, T]. Returns (logits, loss)."""
    B, T = idx.shape
    C, H = cfg["n_embd"], cfg["n_head"]
    hd = C // H
    x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][:T].unsqueeze(0)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for layer in range(cfg["n_layer"]):
        pre = f"transformer.h.{layer}."
        h = layer_norm(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"])
        qkv = h @ p[pre + "attn.c_attn.weight"] + p[pre + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))  # [B, H, T, hd]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + (y @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"])
        h = layer_norm(x, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"])
        h = gelu_tanh(h @ p[pre + "mlp.c_fc.weight"] + p[pre + "mlp.c_fc.bias"])
        x = x + (h @ p[pre + "mlp.c_proj.weight"] + p[pre + "mlp.c_proj.bias"])
    x = layer_norm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"])
    logits = x @ p["transformer.wte.weight"].T  # tied LM head
    loss = None
    if targets is not None:
        loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
    return logits, loss


def eval_batches(np_params, cfg, tokens, B, T, n_batches, dtype=torch.float64, grads=True):
    """The zerotrain `eval` contract: batch i takes tok[p:p+B*T] as B rows of T (targets shifted by
    one), p += B*T; returns (mean loss over the batches, {name: grad of that mean loss} or None)."""
    p = {k: torch.tensor(v, dtype=dtype, requires_grad=grads) for k, v in np_params.items()}
    tok = torch.tensor(np.asarray(tokens, dtype=np.int64))
    total = 0.0
    pos = 0
    for _ in range(n_batches):
        idx = tok[pos:pos + B * T].view(B, T)
        tgt = tok[pos + 1:pos + B * T + 1].view(B, T)
        _, loss = forward(p, cfg, idx, tgt)
        total = total + loss
        pos += B * T
    mean = total / n_batches
    g = None
    if grads:
        mean.backward()
        g = OrderedDict((k, t.grad.detach().to(torch.float64).numpy()) for k, t in p.items())
    return float(mean.detach()), g


# ---------------------------------------------------------------- files

_ST_DTYPES = {"F32": 4, "BF16": 2, "F16": 2}


def f32_to_bf16_bits(a):
    """fp32 numpy array -> uint16 bf16 bits, round to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """tensors: ordered name -> numpy array (any float dtype; stored as DTYPE). Header padded with
    spaces to a multiple of 8 bytes as the reference implementation does."""
    header = {"__metadata__": metadata if metadata is not None else {"format": "pt"}}
    blobs, offset = [], 0
    for name, a in tensors.items():
        a = np.asarray(a)
        if dtype == "F32":
            raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        elif dtype == "F16":
            raw = np.ascontiguousarray(a.astype(np.float32).astype("<f2")).tobytes()  # numpy rounds to nearest even
        elif dtype == "BF16":
            raw = f32_to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
        else:
            raise ValueError(f"unsupported dtype {dtype}")
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def read_safetensors(path):
    """-> (OrderedDict name -> float32 numpy array, metadata). F32, BF16 and F16 only."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode(), object_pairs_hook=OrderedDict)
    meta = header.pop("__metadata__", None)
    buf = data[8 + n:]
    out = OrderedDict()
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = buf[b:e]
        if info["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        out[name] = a.reshape(info["shape"]).copy()
    return out, meta


def write_config(directory, cfg):
    """A config.json that transformers.GPT2Config would accept for CFG."""
    conf = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0,
        "bos_token_id": min(50256, cfg["vocab_size"] - 1),
        "eos_token_id": min(50256, cfg["vocab_size"] - 1),
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": cfg["n_positions"], "n_positions": cfg["n_positions"],
        "n_embd": cfg["n_embd"], "n_head": cfg["n_head"], "n_layer": cfg["n_layer"],
        "tie_word_embeddings": True,
        "vocab_size": cfg["vocab_size"],
    }
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)


def write_hf_dir(directory, cfg, np_params, dtype="F32"):
    os.makedirs(directory, exist_ok=True)
    write_safetensors(os.path.join(directory, "model.safetensors"), np_params, dtype)
    write_config(directory, cfg)


SHARD_MAGIC, SHARD_VERSION = 20240520, 1


def write_shard(path, tokens):
    """llm.c token shard: 256 little-endian int32 (magic, version, count, zeros), then uint16 tokens."""
    tokens = np.asarray(tokens)
    assert tokens.min() >= 0 and tokens.max() < 65536
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
