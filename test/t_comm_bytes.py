"""t_comm_bytes.py — communication volume per step, per rank, per collective (metrics_file's
comm_sent_bytes / comm_recv_bytes) against the ZeRO paper's volumes, for 2 and 4 ranks:
  - stages 0-2 move 2Ψ per step (all-reduce equivalent: 2(n-1)/n Ψ elements sent per rank);
  - stage 3 moves 3Ψ: Ψ gathered in forward, Ψ again in backward, Ψ reduce-scattered — plus, in
    this engine, one more gather of GPT-2's tied embedding segment (wte+wpe), which the forward
    uses twice (token embedding and LM head) and releases in between; that is with
    stage3_max_reuse_distance 0 (every use gathers). With the default reuse distance, what is still
    in a gather buffer when it is used again is not gathered again: the embeddings at the LM head
    and in backward, the final LayerNorm and the last blocks when backward starts (1 + prefetch
    depth rotating buffers hold the final LayerNorm and the last `depth` blocks) — 3Ψ less those;
  - the stated padding: stages 1-2 gather whole shards, so they move up to n*128 elements more
    (shard = ceil(Ψ/n) rounded up to 128); reductions and stage-3 gathers move exactly Ψ;
  - one micro-step per step (stages 2-3 reduce-scatter, and stage 3 gathers, once per micro-step,
    as DeepSpeed does, so gradient accumulation multiplies those);
  - summed over ranks, bytes sent equal bytes received for every collective;
  - the wall_clock_breakdown line reports the same numbers;
  - tensor parallelism (tp_comm_sent_bytes, the model's traffic over the tensor-parallel group), per
    micro-step and rank: the all-reduces move 2(n-1)/n S bytes each (S = B*T*C activations), 4 per block
    (Megatron's 2 in forward, 2 in backward) plus 2 for the vocabulary-parallel embedding (forward) and
    LM head (backward), and 2 more per block when activation checkpointing recomputes the forward; the
    vocabulary-parallel cross-entropy all-gathers 3 floats per token from each rank. Exactly, on every
    rank, for tp 2 and 4 and tp 2 x dp 2;
  - without tensor parallelism rank 0 writes every rank's figures from its own counts of them, with no
    gather a step: the same, to the byte, as the ranks' own counts gathered (ZEROTRAIN_INJECT_GATHER_COMM_BYTES),
    on 3 ranks (uneven pieces: the ranks' figures differ) with an evaluation's traffic between steps."""
import os
import re
import tempfile

import ztlib

ztlib.ensure_shakespeare()
tiny = "configs/tiny.yaml"
L, C, V, NP = 2, 32, 50257, 64
psi = V * C + NP * C + L * (12 * C * C + 13 * C) + 2 * C  # parameters of the tiny config
emb = V * C + NP * C                                       # the tied embedding segment
block, lnf = 12 * C * C + 13 * C, 2 * C
E = 4                                                      # fp32 on the CPU backend
MODEL_KINDS = ("allreduce", "reduce_scatter", "allgather", "broadcast")

for n in (2, 4):
    shard = -(-psi // n)
    shard = -(-shard // 128) * 128
    pad = n * shard - psi
    for stage in range(4):
        sets = [f"zero_optimization.stage={stage}", "train_iters=3", f"train_batch_size={2 * n}", "wall_clock_breakdown=true",
                "steps_per_print=1", "zero_optimization.stage3_param_persistence_threshold=0",
                "zero_optimization.stage3_max_reuse_distance=0"]
        p, rows = ztlib.train(tiny, sets, ranks=n)
        name = f"comm_bytes_stage{stage}_ranks{n}"
        if p.returncode != 0 or len(rows) != 3:
            ztlib.check(False, name, f"rc={p.returncode}: {p.stderr[-300:]}")
            continue
        row = rows[-1]
        sent, recv = row["comm_sent_bytes"], row["comm_recv_bytes"]
        # the paper's unit: elements one rank sends per step, divided by (n-1)/n
        per_rank = sum(sum(sent[k]) for k in MODEL_KINDS) / n / E / ((n - 1) / n)
        if stage == 0:
            want, slack = 2 * psi, 0
        elif stage < 3:
            want, slack = 2 * psi, pad
        else:
            want, slack = 3 * psi + emb, 0
        ok = want <= per_rank + 1e-6 and per_rank <= want + slack + 1e-6
        ztlib.check(ok, name, f"{per_rank:.1f} elements per rank per step, want {want} (+ up to {slack} padding); "
                              f"sent {sent}")
        balanced = all(abs(sum(sent[k]) - sum(recv[k])) < 1e-6 for k in sent)
        ztlib.check(balanced, f"comm_bytes_sent_equals_received_stage{stage}_ranks{n}", f"{sent} vs {recv}")
        kinds_used = {k for k in MODEL_KINDS if sum(sent[k]) > 0}
        expect_kinds = {"allreduce"} if stage == 0 else {"reduce_scatter", "allgather"}
        ztlib.check(kinds_used == expect_kinds, f"comm_bytes_kinds_stage{stage}_ranks{n}", f"{kinds_used}")
        # every step the same (no warm-up traffic counted in a step)
        ztlib.check(rows[1]["comm_sent_bytes"] == rows[2]["comm_sent_bytes"], f"comm_bytes_steady_stage{stage}_ranks{n}",
                    f"{rows[1]['comm_sent_bytes']} vs {rows[2]['comm_sent_bytes']}")
        if n == 4 and stage in (0, 3):
            lines = re.findall(r"comm \(MB sent/received by rank 0\): (.*)", p.stdout)
            m = re.search(r"all-reduce ([0-9.]+)/.*reduce-scatter ([0-9.]+)/.*all-gather ([0-9.]+)/", lines[-1] if lines else "")
            ok = m and all(abs(float(m.group(i + 1)) - sent[k][0] * 1e-6) < 1e-3
                           for i, k in enumerate(("allreduce", "reduce_scatter", "allgather")))
            ztlib.check(bool(ok), f"comm_bytes_breakdown_line_stage{stage}", lines[-1] if lines else p.stdout[-300:])

# stage 3 with reuse (the default distance): the same step without the re-gathers; prefetch depth 1
# (a bucket of one element) and the default bucket's depth (5e7 / block, at most 4: both blocks here)
for n in (2, 4):
    for bucket, depth in ((1, 1), (5e7, 4)):
        p, rows = ztlib.train(tiny, ["zero_optimization.stage=3", "train_iters=3", f"train_batch_size={2 * n}",
                                     "zero_optimization.stage3_param_persistence_threshold=0",
                                     f"zero_optimization.stage3_prefetch_bucket_size={bucket}"], ranks=n)
        name = f"comm_bytes_stage3_reuse_ranks{n}_depth{depth}"
        if not ztlib.check(p.returncode == 0 and len(rows) == 3, f"{name}_runs", p.stderr[-300:]):
            continue
        sent = rows[-1]["comm_sent_bytes"]
        per_rank = sum(sum(sent[k]) for k in MODEL_KINDS) / n / E / ((n - 1) / n)
        kept = min(2, depth)  # blocks still gathered when backward starts (tiny has 2)
        want = 3 * psi - emb - lnf - kept * block
        ztlib.check(abs(per_rank - want) < 1e-6, name,
                    f"{per_rank:.1f} elements per rank per step, want 3Ψ - embeddings - final LayerNorm - {kept} "
                    f"block(s) = {want}")
# ---- every rank's figures without a gather: rank 0's own counts of them equal the ranks' own, gathered
for stage in (0, 2, 3):
    rows = {}
    for gather in (False, True):
        fd, metrics = tempfile.mkstemp(suffix=".jsonl")
        os.close(fd)
        p = ztlib.run(["train", tiny, "--set", f"metrics_file={metrics}", "--set", f"zero_optimization.stage={stage}",
                       "--set", "train_iters=4", "--set", "train_batch_size=12", "--set", "eval_interval=2",
                       "--set", "eval_batches=4"], ranks=3, env={"ZEROTRAIN_INJECT_GATHER_COMM_BYTES": "1"} if gather else None)
        ztlib.check(p.returncode == 0, f"comm_bytes_counted_stage{stage}_runs{'_gathered' if gather else ''}", p.stderr[-300:])
        rows[gather] = [{k: r.get(k) for k in ("step", "comm_sent_bytes", "comm_recv_bytes")} for r in ztlib.read_metrics(metrics)]
        os.unlink(metrics)
    counted, gathered = rows[False], rows[True]
    ztlib.check(len(counted) == 4 and counted == gathered, f"comm_bytes_counted_equal_gathered_stage{stage}",
                f"counted {counted[-1:]} vs gathered {gathered[-1:]}")
    if stage == 3:  # the ranks' pieces are uneven: each rank's own figure, not one rank's for all
        sent = counted[-1]["comm_sent_bytes"] if counted else {}
        ztlib.check(any(len(set(v)) > 1 for v in sent.values()), "comm_bytes_counted_per_rank_stage3", f"{sent}")
# ---- tensor parallelism: the model's traffic over the tensor-parallel group against Megatron's formula
B, T, GB = 2, 32, 8  # tiny's micro-batch, sequence and global batch


def check_tp_bytes(name, rows, tp, dp, recompute):
    if not rows:
        return
    row = rows[-1]
    sent, recv = row.get("tp_comm_sent_bytes"), row.get("tp_comm_recv_bytes")
    if not ztlib.check(sent is not None, name + "_reported", f"keys {sorted(row)}"):
        return
    micro = GB // (B * dp)
    N = B * T
    allreduces = (6 if recompute else 4) * L + 2
    want_ar = micro * allreduces * 2 * (tp - 1) / tp * N * C * E
    want_ag = micro * (tp - 1) * 3 * N * 4
    for r in range(tp * dp):
        ok = abs(sent["allreduce"][r] - want_ar) < 0.5 and abs(sent["allgather"][r] - want_ag) < 0.5
        ztlib.check(ok, f"{name}_rank{r}", f"sent {sent['allreduce'][r]} / {sent['allgather'][r]}, want {want_ar} / "
                                           f"{want_ag}")
    balanced = all(abs(sum(sent[k]) - sum(recv[k])) < 1e-6 for k in sent)
    ztlib.check(balanced, name + "_sent_equals_received", f"{sent} vs {recv}")


HEADS = ["model.n_head=4"]
for tp, dp, recompute in ((2, 1, False), (4, 1, False), (2, 2, False), (2, 1, True)):
    extra = ["activation_checkpointing.enabled=true"] if recompute else []
    p, rows = ztlib.train(tiny, HEADS + extra + [f"tensor_parallel.tp_size={tp}", "train_iters=2"], ranks=tp * dp)
    ztlib.check(p.returncode == 0, f"tp_bytes_tp{tp}_dp{dp}{'_recompute' if recompute else ''}_runs", p.stderr[-300:])
    check_tp_bytes(f"tp_bytes_tp{tp}_dp{dp}{'_recompute' if recompute else ''}", rows, tp, dp, recompute)

ztlib.finish()
