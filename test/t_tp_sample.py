"""t_tp_sample.py — a tensor-parallel training run samples at its end (the default sample_tokens; the
tiny config turns it off): every rank exits 0, and rank 0's sample is the text `zerotrain sample` gives
at tp 1 from the checkpoint that run saved (same seed, top-k 40, temperature 1). Under tensor
parallelism each rank holds only its vocabulary's logits; generation gathers the whole row.
Cases: tp 2 (ZeRO stage 0), tp 2 x dp 2 at stage 3 (parameters gathered while sampling), and tp 2 on
the simulated GPU (bf16 logits: exit 0 and a sample, the text may differ from tp 1 by rounding).
The banner's model-states line says how a rank's shard is made (its part's elements over the
data-parallel ranks, rounded up to 128), not "shard X of Y" with X > Y."""
import os
import re
import shutil
import tempfile

import ztlib

ztlib.ensure_shakespeare()
cfg = "configs/tiny.yaml"
tmp = tempfile.mkdtemp(prefix="zt-tp-sample-")
SEED = 1234  # configs/tiny.yaml's seed: the end-of-training sample uses it


def end_sample(text):
    m = re.search(r"sample \(top-k 40, temperature 1\.0\):\n---\n(.*)\n---", text, re.S)
    return m.group(1) if m else None


for name, tp, dp, sets in (("tp2", 2, 1, ["zero_optimization.stage=0"]),
                           ("tp2_dp2_stage3", 2, 2, ["zero_optimization.stage=3"]),
                           ("tp2_sim", 2, 1, ["device=sim"])):
    ck = os.path.join(tmp, name)
    p, _ = ztlib.train(cfg, ["model.n_head=4", f"tensor_parallel.tp_size={tp}", "sample_tokens=24", "train_iters=6",
                             f"checkpoint.dir={ck}"] + sets, ranks=tp * dp, timeout=600)
    # the model-states line says how the shard is made (issue 31: "shard 834048 of 833952 elements" at tp 4)
    m = re.search(r"\(stage \d; (\d+) elements in this rank's tensor-parallel part over (\d+) data-parallel ranks?: "
                  r"a shard of (\d+) each, rounded up to a multiple of 128\)", p.stdout)
    per = -(-int(m.group(1)) // int(m.group(2))) if m else 0  # ceil(total / ranks)
    ztlib.check(m and int(m.group(3)) == -(-per // 128) * 128,
                f"{name}_model_states_line_explains_shard", re.findall(r"model states:.*", p.stdout)[:1])
    got = end_sample(p.stdout + p.stderr)
    if not ztlib.check(p.returncode == 0 and got, f"{name}_samples_and_exits_0",
                       f"rc {p.returncode}\n" + p.stdout[-800:] + p.stderr[-1500:]):
        continue
    if "device=sim" in sets:
        continue
    s = ztlib.run(["sample", os.path.join(ck, "step_00000006"), "--max-tokens", "24", "--seed", str(SEED),
                   "--top-k", "40", "--temperature", "1.0"], timeout=300)
    ztlib.check(s.returncode == 0 and s.stdout.rstrip("\n") == got, f"{name}_sample_equals_tp1_sample",
                f"tp {tp}: {got!r}\ntp 1: {s.stdout!r}\n{s.stderr[-600:]}")

shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
