"""t_guard.py — checkpoints are never lost to divergence or to another run (issue 25, items 2 and 3).
2 ranks, ZeRO-2, configs/tiny.yaml; every failing run must end on EVERY rank with a non-zero status,
in time, with exactly one `zerotrain: error:` line (ztlib.failed_together), and the checkpoint saved
before must stay loadable (`zerotrain info` verifies every checksum) and stay `latest`:
  - the issue's reproduction: a run resumed with lr=100 is stopped by the divergence guard (on by
    default: max_loss) at the first diverged step, before any save; `latest` stays on the last good
    checkpoint, keep_last pruned nothing of it; with max_loss off, loss_spike stops it the same way;
  - the guard off: the state turns non-finite and the save refuses it (no checkpoint holds a NaN);
  - action skip: a step whose gradient norm is not finite (ZEROTRAIN_INJECT_OVERFLOW without fp16)
    is skipped (no Adam step: adam_t one short), training goes on to exit 0; the newest checkpoint
    saved before the guard fired survives keep_last; skipping max_skips steps in a row stops the run
    (no step passed, so no checkpoint is good: they are set aside and `latest` removed);
  - a checkpoint is good once the step after it passed the guard: saved every step with lr=100, the
    checkpoint after the diverging update is set aside (unconfirmed_step_N) and `latest` names the
    good one before it; keep_last never prunes the newest good checkpoint;
  - action rollback (an injected diverging update): the newest good checkpoint is reloaded, the
    batches since it skipped, the run goes on and exits 0 with the losses of a run that never saw
    those batches; with no good checkpoint it stops;
  - checkpoint.resume: never (or a path outside checkpoint.dir) in a directory holding checkpoints
    is refused at start naming the newest step, and nothing there changes; checkpoint.overwrite:
    true starts over there; keep_last removes only the steps of this run's lineage (it and the runs
    it resumed from; t_keep_last follows longer chains), never another run's;
  - a format-version-1 checkpoint is refused at resume unless checkpoint.allow_unverified is set."""
import os
import shutil
import tempfile

import h5py
import numpy as np

import ztlib

ztlib.ensure_shakespeare()
TINY = "configs/tiny.yaml"
BASE = ["zero_optimization.stage=2", "steps_per_print=1"]
tmp = tempfile.mkdtemp(prefix="zt_guard_")


def train(ckdir, sets=(), env=None):
    args = ["train", TINY]
    for s in BASE + [f"checkpoint.dir={ckdir}"] + list(sets):
        args += ["--set", s]
    return ztlib.finish_ranked(ztlib.start_ranked(args, 2, env))


def steps(ckdir):
    return sorted(d for d in os.listdir(ckdir) if d.startswith("step_"))


def latest(ckdir):
    return open(os.path.join(ckdir, "latest")).read().strip()


def all_finite(ckdir):
    """every saved vector of every step directory is finite"""
    for d in steps(ckdir):
        for f in os.listdir(os.path.join(ckdir, d)):
            if f.startswith("rank_"):
                with h5py.File(os.path.join(ckdir, d, f)) as h:
                    if not all(np.isfinite(h[v][...]).all() for v in ("master", "adam_m", "adam_v")):
                        return False
    return True


def good_run(name):
    """20 good steps saved every 5, keep_last 2: step_15 and step_20, latest step_20"""
    ck = os.path.join(tmp, name)
    r = train(ck, ["checkpoint.save_interval=5", "checkpoint.keep_last=2"])
    ztlib.check(r.rc == 0 and steps(ck) == ["step_00000015", "step_00000020"], f"{name}_good_run", r.why())
    return ck


DIVERGE = ["optimizer.params.lr=100", "train_iters=40", "checkpoint.save_interval=5", "checkpoint.keep_last=2"]

try:
    # ---- the reproduction: resumed with lr=100, keep_last 2
    ck = good_run("repro")
    r = train(ck, DIVERGE)
    ztlib.failed_together(r, "the divergence guard stops the run", "diverged_resume_stops_on_every_rank")
    ztlib.check(r.errors and "step 22: loss" in r.errors[0] and "max_loss 100" in r.errors[0]
                and "/repro/latest is step_00000020" in r.errors[0], "diverged_resume_line_names_step_and_latest", str(r.errors))
    ztlib.check(latest(ck) == "step_00000020" and steps(ck) == ["step_00000015", "step_00000020"],
                "diverged_resume_keeps_last_good_checkpoints", f"{latest(ck)} {steps(ck)}")
    ztlib.still_loadable(ck, 20, "diverged_resume_latest_loadable")

    # ---- issue 31's reproduction: saved every step, keep_last 2, lr=100 on resume: step 21 is saved
    # after the update that diverged (its loss shows only at step 22); it is set aside, `latest` names
    # step 20 (the newest good checkpoint: step 21 passed the guard on its weights), never pruned
    ck = good_run("every_step")
    r = train(ck, DIVERGE + ["checkpoint.save_interval=1"])
    ztlib.failed_together(r, "the divergence guard stops the run", "diverged_saved_every_step_stops")
    ztlib.check(r.errors and "latest is step_00000020, the newest good checkpoint (step_00000021" in r.errors[0]
                and "unconfirmed_step_00000021" in r.errors[0], "diverged_line_names_good_latest_and_set_aside", str(r.errors))
    ztlib.check(latest(ck) == "step_00000020" and "step_00000020" in steps(ck) and "step_00000021" not in steps(ck)
                and os.path.isdir(os.path.join(ck, "unconfirmed_step_00000021")), "diverged_good_checkpoint_kept_as_latest",
                f"{latest(ck)} {sorted(os.listdir(ck))}")
    ztlib.still_loadable(ck, 20, "diverged_good_checkpoint_loadable")

    # ---- loss_spike alone (max_loss off) finds the same step
    r = train(ck, DIVERGE + ["divergence_guard.max_loss=0", "divergence_guard.loss_spike=5"])
    ztlib.failed_together(r, "divergence_guard.loss_spike 5", "loss_spike_stops_on_every_rank")
    ztlib.check(r.errors and "step 22:" in r.errors[0] and latest(ck) == "step_00000020", "loss_spike_keeps_latest",
                str(r.errors))

    # ---- the guard off: the save refuses non-finite state, latest stays on a finite checkpoint
    r = train(ck, DIVERGE + ["divergence_guard.action=off", "checkpoint.save_interval=1"])
    ztlib.failed_together(r, "a checkpoint holds finite state only", "guard_off_nonfinite_save_refused")
    ztlib.check(all_finite(ck), "guard_off_no_checkpoint_holds_nonfinite", str(steps(ck)))
    ztlib.still_loadable(ck, int(latest(ck)[5:]), "guard_off_latest_loadable")
    ztlib.check(not any(d.startswith(".tmp_") for d in os.listdir(ck)), "guard_off_no_leftover", str(os.listdir(ck)))

    # ---- action skip: a non-finite gradient norm (no fp16) skips the step, the run goes on; keep_last 1
    # keeps the newest good checkpoint (step 6: step 7 passed the guard) beside the newest (step 8)
    ck = os.path.join(tmp, "skip")
    metrics = os.path.join(tmp, "skip.jsonl")
    r = train(ck, ["divergence_guard.action=skip", "train_iters=8", "checkpoint.save_interval=2", "checkpoint.keep_last=1",
                   f"metrics_file={metrics}"], env={"ZEROTRAIN_INJECT_OVERFLOW": "5"})
    rows = ztlib.read_metrics(metrics)
    warn = [l for l in r.stderr.splitlines() if "skipped by the divergence guard" in l]
    ztlib.check(r.rc == 0 and not r.errors and len(rows) == 8 and len(warn) == 1 and "step 5: gradient norm is inf" in warn[0],
                "skip_goes_on_with_one_line", f"{warn} {r.why()}")
    ztlib.check(rows and rows[4].get("skipped") == 1 and rows[4].get("diverged") == "grad_norm"
                and rows[4]["grad_norm"] is None and all(x["loss"] is not None for x in rows), "skip_in_metrics",
                str(rows[4] if len(rows) > 4 else rows))
    with h5py.File(os.path.join(ck, "step_00000008", "index.h5")) as h:
        adam_t = int(h.attrs["adam_t"])
    ztlib.check(adam_t == 7, "skip_takes_no_adam_step", f"adam_t {adam_t} after 8 steps, one skipped")
    ztlib.check(steps(ck) == ["step_00000006", "step_00000008"], "skip_keeps_newest_good_checkpoint",
                str(steps(ck)))

    # ---- action skip, every step diverged: stops after max_skips in a row, nothing saved
    ck = os.path.join(tmp, "skips")
    r = train(ck, ["divergence_guard.action=skip", "divergence_guard.max_loss=1", "divergence_guard.max_skips=3",
                   "checkpoint.save_interval=1"])
    ztlib.failed_together(r, "3 steps in a row skipped", "max_skips_stops_on_every_rank")
    # no step passed the guard, so no checkpoint is good: steps 1 and 2 are set aside, no `latest`
    ztlib.check(r.errors and "no checkpoint of this run in" in r.errors[0] and "unconfirmed_step_N" in r.errors[0]
                and not os.path.exists(os.path.join(ck, "latest")) and steps(ck) == []
                and os.path.isdir(os.path.join(ck, "unconfirmed_step_00000002")), "max_skips_no_good_checkpoint_no_latest",
                f"{sorted(os.listdir(ck))} {r.errors}")

    # ---- action rollback: an injected diverging update at step 6 (lr x 1e4, ZEROTRAIN_INJECT_LR_SPIKE),
    # seen at step 7: the run reloads step 5 (the newest good checkpoint), sets step 6 aside, skips the
    # two batches consumed since step 5 and goes on to exit 0; its losses from there on equal, bit for
    # bit, those of a run that never saw those batches (ZEROTRAIN_INJECT_SKIP_BATCHES: after step 5 the
    # data jumps 2 batches)
    ck = os.path.join(tmp, "rollback")
    m_roll, m_ref = os.path.join(tmp, "rollback.jsonl"), os.path.join(tmp, "reference.jsonl")
    r = train(ck, ["divergence_guard.action=rollback", "train_iters=12", "checkpoint.save_interval=1",
                   "checkpoint.keep_last=2", f"metrics_file={m_roll}"], env={"ZEROTRAIN_INJECT_LR_SPIKE": "6"})
    warn = [l for l in r.stderr.splitlines() if "rolls back" in l]
    ztlib.check(r.rc == 0 and not r.errors and len(warn) == 1 and "step 7: loss" in warn[0]
                and "rolls back to step_00000005" in warn[0] and "2 batches skipped" in warn[0],
                "rollback_goes_on_with_one_line", f"{warn} {r.why()}")
    ref = train(os.path.join(tmp, "reference"), ["train_iters=12", f"metrics_file={m_ref}"],
                env={"ZEROTRAIN_INJECT_SKIP_BATCHES": "5:2"})
    got = [(x["step"], x["loss"]) for x in ztlib.read_metrics(m_roll)][-7:]
    want = [(x["step"], x["loss"]) for x in ztlib.read_metrics(m_ref)][-7:]
    ztlib.check(ref.rc == 0 and len(got) == 7 and got == want and got[0][0] == 6, "rollback_losses_equal_run_without_spike_batches",
                f"{got} vs {want}")
    ztlib.check(latest(ck) == "step_00000012" and os.path.isdir(os.path.join(ck, "unconfirmed_step_00000006")),
                "rollback_sets_unconfirmed_aside", str(sorted(os.listdir(ck))))
    # every step diverged (max_loss 1): no good checkpoint to go back to, the run stops
    r = train(os.path.join(tmp, "rollback_none"), ["divergence_guard.action=rollback", "divergence_guard.max_loss=1",
                                                   "checkpoint.save_interval=1"])
    ztlib.failed_together(r, "cannot roll back (no good checkpoint yet)", "rollback_without_good_checkpoint_stops")

    # ---- checkpoint.resume: never in a directory holding another run's checkpoints
    ck = good_run("never")
    before = sorted(os.listdir(ck))
    r = train(ck, ["checkpoint.resume=never", "checkpoint.keep_last=1", "checkpoint.save_interval=5"])
    ztlib.failed_together(r, "checkpoint.resume is never, but the directory holds checkpoints",
                          "resume_never_refused_on_every_rank")
    ztlib.check(r.errors and "newest step_00000020" in r.errors[0] and "checkpoint.overwrite=true" in r.errors[0],
                "resume_never_line_names_newest_and_way_out", str(r.errors))
    ztlib.check(sorted(os.listdir(ck)) == before and latest(ck) == "step_00000020", "resume_never_changes_nothing",
                str(os.listdir(ck)))
    other = good_run("other")
    r = train(ck, [f"checkpoint.resume={other}/step_00000015", "train_iters=25"])
    ztlib.failed_together(r, "checkpoint.resume is a checkpoint outside it", "resume_elsewhere_refused")
    ztlib.check(sorted(os.listdir(ck)) == before, "resume_elsewhere_changes_nothing", str(os.listdir(ck)))
    r = train(ck, ["checkpoint.resume=never", "checkpoint.overwrite=true", "train_iters=4", "checkpoint.save_interval=2"])
    ztlib.check(r.rc == 0 and latest(ck) == "step_00000004" and "resumed" not in r.stdout + r.stderr, "overwrite_starts_over",
                r.why())

    # ---- keep_last prunes the steps of this run's lineage only: X saves 5, 10; A starts over
    # (overwrite, keep_last 0) with 2, 4; B resumes A and saves 6, 8 with keep_last 1 (6, the newest
    # good checkpoint, stays beside 8, which no step has confirmed)
    ck = os.path.join(tmp, "lineage")
    r1 = train(ck, ["train_iters=10", "checkpoint.save_interval=5"])
    r2 = train(ck, ["checkpoint.resume=never", "checkpoint.overwrite=true", "train_iters=4", "checkpoint.save_interval=2"])
    ztlib.check(r1.rc == 0 and r2.rc == 0 and latest(ck) == "step_00000004", "lineage_setup", r1.why() + r2.why())
    r = train(ck, ["train_iters=8", "checkpoint.save_interval=2", "checkpoint.keep_last=1"])
    ztlib.check(r.rc == 0 and steps(ck) == ["step_00000005", "step_00000006", "step_00000008", "step_00000010"]
                and latest(ck) == "step_00000008", "keep_last_spares_other_runs_steps", f"{steps(ck)} {r.why()}")
    # ---- a format-version-1 checkpoint (nothing checksums its metadata) loads only when allowed
    v1 = os.path.join(tmp, "v1", "step_00000020")
    shutil.copytree(os.path.join(tmp, "never", "step_00000020"), v1)
    os.unlink(os.path.join(v1, "manifest"))  # as a version-1 zerotrain saved it: no manifest
    with h5py.File(os.path.join(v1, "index.h5"), "r+") as h:
        h.attrs["format_version"] = np.int64(1)
    r = train(os.path.join(tmp, "v1_ck"), [f"checkpoint.resume={v1}", "train_iters=22"])
    ztlib.failed_together(r, "checkpoint format version 1", "format_version_1_refused_on_every_rank")
    ztlib.check(r.errors and "checkpoint.allow_unverified=true" in r.errors[0], "format_version_1_line_says_how", str(r.errors))
    r = train(os.path.join(tmp, "v1_ck"), [f"checkpoint.resume={v1}", "train_iters=22", "checkpoint.allow_unverified=true"])
    ztlib.check(r.rc == 0 and "resumed from" in r.stdout + r.stderr and "format version 1" in r.stderr,
                "format_version_1_loads_when_allowed",
                r.why())
finally:
    ztlib.kill_started()
    shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
