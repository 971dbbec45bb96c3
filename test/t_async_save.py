"""t_async_save.py — asynchronous checkpoint saves (checkpoint.async_save, issue 51 part 1), with real
MPI ranks, real HDF5 files and configs/tiny.yaml:
  - same bytes: the asynchronous save of a step holds every dataset's bytes and every attribute a
    blocking save of the same step holds (h5py, every file of the step directory), apart from the
    run's identity (run_id, lineage, the effective config's text and the digests over them): 1 rank
    stage 2, 2 ranks stage 2, 2 ranks stage 3, tensor parallelism 2, 2 ranks stage 3 with the optimizer
    on NVMe (its swap files are copied into the snapshot); the run's losses are those of the blocking run;
  - every save prints `save step N: blocked B ms, written W ms` and the metrics rows carry
    save_blocked_ms and save_written_ms;
  - resume from an asynchronous checkpoint gives the uninterrupted run's losses exactly;
  - the divergence guard's rollback while saves are in flight: back to the newest published good
    checkpoint, the losses of a run that never saw the skipped batches;
  - kill -9 of a rank while a write is in flight (held there by ZEROTRAIN_INJECT_ASYNC_HOLD, waited
    for on its marker file): `latest` still names the previous complete checkpoint, which verifies
    and resumes exactly;
  - a full disk (a small tmpfs, as root) during the asynchronous write: one error line naming
    "No space left on device", every rank non-zero, `latest` on the previous checkpoint, which verifies;
  - SIGUSR1 while a write is in flight: the run waits for the write, saves the stop step and exits 99,
    both checkpoints complete."""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import h5py
import numpy as np

import ztlib

ztlib.ensure_shakespeare()
TINY = "configs/tiny.yaml"
tmp = tempfile.mkdtemp(prefix="zt_async_save_")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a terminated test still unmounts (finally)
nvme = os.path.join(tmp, "nvme")
os.makedirs(nvme)
ASYNC = "checkpoint.async_save=true"
# the run's own identity: what two runs of the same config never share
IDENTITY = {"run_id", "lineage", "config", "metadata_crc32c", "shard_crc32c"}


def args_of(ckdir, sets, metrics=None):
    args = ["train", TINY, "--set", f"checkpoint.dir={ckdir}", "--set", "steps_per_print=1"]
    if metrics:
        args += ["--set", f"metrics_file={metrics}"]
    for s in sets:
        args += ["--set", s]
    return args


def train(name, sets, ranks=2, env=None):
    """a ranked run into tmp/NAME (checkpoint dir NAME_ck, metrics NAME.jsonl): (RankedRun, rows)"""
    ck, metrics = os.path.join(tmp, name + "_ck"), os.path.join(tmp, name + ".jsonl")
    r = ztlib.finish_ranked(ztlib.start_ranked(args_of(ck, sets, metrics), ranks, env=env), timeout=300)
    return r, ztlib.read_metrics(metrics)


def h5_items(path):
    """{name: value} of every attribute and dataset of an HDF5 file (datasets as raw bytes), identity left out"""
    out = {}

    def attrs(prefix, obj):
        for k, v in obj.attrs.items():
            if k not in IDENTITY:
                out[f"{prefix}@{k}"] = np.asarray(v).tobytes() if not isinstance(v, (str, bytes)) else v

    with h5py.File(path, "r") as f:
        attrs("/", f)

        def visit(name, obj):
            attrs(name, obj)
            if isinstance(obj, h5py.Dataset):
                out[name] = (obj.dtype.str, obj.shape, obj[()].tobytes())
        f.visititems(visit)
    return out


def same_step(a, b):
    """'' when step directories A and B hold the same datasets and attributes (identity apart), else what differs"""
    fa = sorted(os.path.basename(p) for p in glob.glob(os.path.join(a, "*.h5")))
    fb = sorted(os.path.basename(p) for p in glob.glob(os.path.join(b, "*.h5")))
    if fa != fb or not fa:
        return f"files {fa} vs {fb}"
    for name in fa:
        x, y = h5_items(os.path.join(a, name)), h5_items(os.path.join(b, name))
        if x.keys() != y.keys():
            return f"{name}: items {sorted(x.keys() ^ y.keys())[:5]}"
        diff = [k for k in x if x[k] != y[k]]
        if diff:
            return f"{name}: {diff[:5]} differ"
    return ""


def save_lines(r):
    """the `save step N: blocked B ms, written W ms` lines (not the `waiting for its write` ones)"""
    return [l for l in r.stdout.splitlines() if re.match(r"save step \d+: blocked [0-9.]+ ms, written [0-9.]+ ms$", l)]


def resume_exact(name, ck, step, ref_rows, sets, ranks=2):
    """a run resumed from CK (latest: STEP) to the end gives the reference run's losses after STEP"""
    metrics = os.path.join(tmp, name + ".jsonl")
    r = ztlib.finish_ranked(ztlib.start_ranked(args_of(ck, sets, metrics), ranks), timeout=300)
    got = ztlib.losses(ztlib.read_metrics(metrics))
    want = ztlib.losses(ref_rows)[step:]
    ztlib.check(r.rc == 0 and f"at step {step}" in r.stdout and got == want, name,
                f"losses {got} vs {want}; {r.why()}")


try:
    # ---- same bytes as a blocking save, the lines and the metrics
    CASES = {"ranks1_stage2": (1, ["zero_optimization.stage=2"]),
             "ranks2_stage2": (2, ["zero_optimization.stage=2"]),
             "ranks2_stage3": (2, ["zero_optimization.stage=3"]),
             "ranks2_tp2": (2, ["tensor_parallel.tp_size=2"]),  # format version 3: the tp group's whole-tensor check
             "ranks2_stage3_optimizer_nvme": (2, ["zero_optimization.stage=3",
                                                  f"zero_optimization.offload_optimizer={{device: nvme, nvme_path: {nvme}}}",
                                                  "zero_optimization.sub_group_size=100000"])}
    for name, (ranks, sets) in CASES.items():
        sets = sets + ["checkpoint.save_interval=3", "train_iters=8"]
        rb, rows_b = train(name + "_blocking", sets, ranks)
        ra, rows_a = train(name + "_async", sets + [ASYNC], ranks)
        if not ztlib.check(rb.rc == 0 and ra.rc == 0, f"{name}_runs", rb.why() + ra.why()):
            continue
        for step in (3, 6):  # saved asynchronously (8, the run's end, is blocking in both)
            d = f"step_{step:08d}"
            why = same_step(os.path.join(tmp, name + "_blocking_ck", d), os.path.join(tmp, name + "_async_ck", d))
            ztlib.check(not why, f"{name}_async_{d}_equals_blocking", why)
        ztlib.check(ztlib.losses(rows_a) == ztlib.losses(rows_b) and len(rows_a) == 8, f"{name}_async_losses_equal_blocking",
                    f"{ztlib.losses(rows_a)} vs {ztlib.losses(rows_b)}")
        lines = save_lines(ra)
        ztlib.check([l.split(":")[0] for l in lines] == ["save step 3", "save step 6", "save step 8"], f"{name}_save_lines",
                    ra.stdout[-1500:])
        blocking_lines = [l.split()[2:] for l in save_lines(rb)]
        ztlib.check(len(blocking_lines) == 3 and all(l[2] == l[5] for l in blocking_lines), f"{name}_blocking_B_equals_W",
                    str(blocking_lines))
        saved = [(r["save_step"], r["save_blocked_ms"], r["save_written_ms"]) for r in rows_a if "save_step" in r]
        # step 3's save completes by step 6's at the latest (one in flight), so a row after it carries it;
        # step 6's, when its write ends before the run's last save, too
        ztlib.check([s for s, _, _ in saved] in ([3], [3, 6]) and all(b >= 0 and w > 0 for _, b, w in saved),
                    f"{name}_metrics_save_fields", str(saved))
        ztlib.still_loadable(os.path.join(tmp, name + "_async_ck"), 8, f"{name}_async_checkpoints_verify")

    # ---- resume from an asynchronous checkpoint: the uninterrupted run's losses
    base = ["zero_optimization.stage=2", "checkpoint.save_interval=3", "train_iters=12"]
    r_ref, rows_ref = train("uninterrupted", base + [ASYNC])
    ztlib.check(r_ref.rc == 0 and len(rows_ref) == 12, "uninterrupted_async_run", r_ref.why())
    ck = os.path.join(tmp, "from_async_ck")
    shutil.copytree(os.path.join(tmp, "uninterrupted_ck"), ck)
    for later in ("step_00000009", "step_00000012"):
        shutil.rmtree(os.path.join(ck, later))
    with open(os.path.join(ck, "latest"), "w") as f:
        f.write("step_00000006\n")
    resume_exact("resume_from_async_checkpoint_exact", ck, 6, rows_ref, base + [ASYNC])

    # ---- the divergence guard's rollback with saves in flight (t_guard's case: a diverging update at
    # step 6, seen at step 7): a save in flight completes before the guard acts, a checkpoint counts as
    # good once published, so the run goes back to the newest published good one (step 4 or 5) and its
    # losses from there equal a run that never saw the batches it skips
    m_roll, m_ref = os.path.join(tmp, "rollback.jsonl"), os.path.join(tmp, "rollback_ref.jsonl")
    r = ztlib.finish_ranked(ztlib.start_ranked(
        args_of(os.path.join(tmp, "rollback_ck"), ["zero_optimization.stage=2", "divergence_guard.action=rollback",
                "train_iters=12", "checkpoint.save_interval=1", "checkpoint.keep_last=2", ASYNC], m_roll), 2,
        env={"ZEROTRAIN_INJECT_LR_SPIKE": "6"}), timeout=300)
    m = re.search(r"rolls back to step_(\d+).*; (\d+) batches skipped", r.stderr)
    good, skipped = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    ztlib.check(r.rc == 0 and not r.errors and good in (4, 5) and skipped == 7 - good, "rollback_with_saves_in_flight",
                r.why())
    ref = ztlib.finish_ranked(ztlib.start_ranked(
        args_of(os.path.join(tmp, "rollback_ref_ck"), ["zero_optimization.stage=2", "train_iters=12"], m_ref), 2,
        env={"ZEROTRAIN_INJECT_SKIP_BATCHES": f"{good}:{skipped}"}), timeout=300)
    got = [(x["step"], x["loss"]) for x in ztlib.read_metrics(m_roll)][-(12 - good):]
    want = [(x["step"], x["loss"]) for x in ztlib.read_metrics(m_ref)][-(12 - good):]
    ztlib.check(ref.rc == 0 and good and got == want and got[0][0] == good + 1, "rollback_with_saves_in_flight_exact",
                f"{got} vs {want}")

    # ---- kill -9 of a rank while a write is in flight: latest stays, and resumes exactly
    hold = os.path.join(tmp, "hold_kill")
    ck = os.path.join(tmp, "killed_ck")
    p = ztlib.start_ranked(args_of(ck, base + [ASYNC, "checkpoint.save_interval=2"]), 2,
                           env={"ZEROTRAIN_INJECT_ASYNC_HOLD": f"4:{hold}"})
    held = ztlib.wait_for_files([hold + ".rank0", hold + ".rank1"], p)
    latest = open(os.path.join(ck, "latest")).read().strip() if os.path.exists(os.path.join(ck, "latest")) else ""
    pids = ztlib.rank_pids(ck)
    if held and len(pids) == 2:
        os.kill(pids[1], signal.SIGKILL)
    r = ztlib.finish_ranked(p)
    after = open(os.path.join(ck, "latest")).read().strip() if os.path.exists(os.path.join(ck, "latest")) else ""
    ztlib.check(held and len(pids) == 2 and latest == after == "step_00000002" and r.rc != 0 and not r.timed_out,
                "kill9_mid_write_keeps_previous_latest", f"held {held}, pids {pids}, latest {latest!r} -> {after!r}; {r.why()}")
    ztlib.check(not os.path.exists(os.path.join(ck, "step_00000004")), "kill9_mid_write_publishes_nothing",
                str(os.listdir(ck)))
    ztlib.still_loadable(ck, 2, "kill9_previous_checkpoint_verifies")
    resume_exact("kill9_resume_exact", ck, 2, rows_ref, base + [ASYNC])

    # ---- a full disk during the asynchronous write: one line, every rank non-zero, latest stays
    if ztlib.can_mount_tmpfs(tmp):
        # one step's checkpoint (two rank files of ~10 MB) fits, the second does not
        with ztlib.Tmpfs("size=32m", tmp) as fs:
            ck = os.path.join(fs.path, "ck")
            r = ztlib.finish_ranked(ztlib.start_ranked(args_of(ck, base + [ASYNC, "checkpoint.save_interval=2"]), 2))
            ztlib.failed_together(r, "No space left on device", "disk_full_mid_write_stops_every_rank")
            ztlib.check(open(os.path.join(ck, "latest")).read().strip() == "step_00000002" and
                        "save step 2:" in r.stdout and "save step 4:" not in r.stdout,
                        "disk_full_mid_write_keeps_latest", r.stdout[-800:])
            ztlib.still_loadable(ck, 2, "disk_full_previous_checkpoint_verifies")
    else:
        print("SKIP disk_full: cannot mount a tmpfs here (needs root)")

    # ---- SIGUSR1 while a write is in flight: waits for it, saves the stop step, exits 99
    hold = os.path.join(tmp, "hold_stop")
    ck = os.path.join(tmp, "stopped_ck")
    out = os.path.join(tmp, "stopped.out")
    with open(out, "w") as f:
        p = subprocess.Popen(ztlib.ranked_cmd(args_of(ck, base + [ASYNC, "train_iters=200"]), 2), cwd=ztlib.ROOT,
                             env=dict(ztlib.ENV, ZEROTRAIN_INJECT_ASYNC_HOLD=f"3:{hold}"), stdout=f,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ztlib.started.append(p)
    held = ztlib.wait_for_files([hold + ".rank0", hold + ".rank1"], p)
    pids = ztlib.rank_pids(ck)
    if held and pids:
        os.kill(pids[0], signal.SIGUSR1)
    waiting = ztlib.wait_for_text(out, "save step 3: waiting for its write to end", p)
    open(hold, "w").close()  # the write may go on now
    try:
        p.wait(timeout=ztlib.RANKED_TIMEOUT)
    except subprocess.TimeoutExpired:
        ztlib.kill_tree(p.pid)
    text = ztlib.read_text(out)
    statuses = sorted(int(l.split()[2]) for l in text.splitlines() if l.startswith("rank-exit "))
    latest = open(os.path.join(ck, "latest")).read().strip() if os.path.exists(os.path.join(ck, "latest")) else ""
    stop_step = int(latest[5:]) if latest.startswith("step_") else -1
    ztlib.check(waiting and statuses == [99, 99] and stop_step > 3 and "save step 3: blocked" in text and
                text.index("save step 3: blocked") < text.index(f"save step {stop_step}: blocked"),
                "sigusr1_mid_write_waits_then_exits_99", f"waiting {waiting}, statuses {statuses}, latest {latest!r}; "
                f"{text[-1000:]}")
    ztlib.still_loadable(ck, stop_step, "sigusr1_stop_checkpoint_verifies")
    ztlib.check(ztlib.info(os.path.join(ck, "step_00000003")).rc == 0, "sigusr1_in_flight_checkpoint_complete")
finally:
    ztlib.clean_up(tmp)
ztlib.finish()
