"""t_checkpoint_faults.py — checkpoint saves that fail and checkpoint directories two runs want
(issue 18), on real tmpfs mounts (as root; each mounted under a temporary directory and unmounted in
`finally`, also when a case fails). 2 ranks, ZeRO-2, configs/tiny.yaml. Each failing run must end
on EVERY rank with a non-zero status (each rank's status is recorded by a wrapper; mpirun is told
not to kill the others) within a hard timeout, with exactly one `zerotrain: error:` line, and the
checkpoint saved before the fault must stay loadable (`zerotrain info` verifies every checksum):
  - read-only file system: refused at start (the directory's lock cannot be taken);
  - no inode left for the save's temporary directory (mkdir fails in the save), or for a rank file;
  - disk full while writing the rank files, and while writing index.h5 (no crash at exit);
  - two runs on one checkpoint dir: the second is refused at start naming the holder (host, pid,
    run id), also after its .lock was deleted (the directory itself is locked first: the refused run
    leaves no .lock behind); .lock deleted, emptied, truncated or replaced by a stray file: the holder
    restores it and keeps saving (no step lost); where directories cannot be locked (NFS, simulated),
    .lock replaced by a file another process holds locked stops the holder at its next save;
    after the first is killed with SIGKILL the lock is free and a third run resumes;
  - a step directory mixing one run's shards with another run's index is refused (load and info);
  - messages: a damaged index.h5 (HDF5 metadata checksum) says "damaged" with HDF5's reason; the
    trainer state edited with h5py is refused; `latest` naming something that is not a step
    directory is refused at resume; junk bytes in `latest` (and a --set with a newline) are escaped
    onto one line;
  - the 16-bit model save beside a checkpoint (stage3_gather_16bit_weights_on_model_save) fails on a
    full disk, and when its files cannot be created (no inode left): every rank stops, nothing half-written
    stays, the checkpoint itself is complete, `latest` names it, and a run resumes from it."""
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py

import ztlib

ztlib.ensure_shakespeare()
TINY = "configs/tiny.yaml"
BASE = ["zero_optimization.stage=2", "steps_per_print=1"]
tmp = tempfile.mkdtemp(prefix="zt_ckfaults_")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a terminated test still unmounts (finally)


def train(ckdir, sets=(), ranks=2):
    args = ["train", TINY]
    for s in BASE + [f"checkpoint.dir={ckdir}"] + list(sets):
        args += ["--set", s]
    return finish(start(args, ranks))


# the ranked-run helpers live in ztlib (shared with t_guard.py, t_disk_full.py)
start, finish, kill_tree, started = ztlib.start_ranked, ztlib.finish_ranked, ztlib.kill_tree, ztlib.started
info, failed_together, still_loadable = ztlib.info, ztlib.failed_together, ztlib.still_loadable


def Tmpfs(opts):
    return ztlib.Tmpfs(opts, tmp)


def wait_for(cond, timeout=ztlib.RANKED_TIMEOUT):
    """cond()'s first truthy value, polled until TIMEOUT (a hang fails the case, not the suite); else None"""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    return None


def saved_step(ck):
    """the step `latest` names (0 before the first save)"""
    t = ztlib.read_text(os.path.join(ck, "latest")).strip()
    return int(t[5:]) if t.startswith("step_") else 0


def blocks(path):
    return os.stat(path).st_blocks * 512


try:
    # ---- 1. read-only file system: the directory cannot be locked, every rank stops at start
    with Tmpfs("ro,size=1m") as fs:
        r = train(os.path.join(fs.path, "ck"), ["train_iters=3"])
        failed_together(r, "Read-only file system", "readonly_dir_fails_on_every_rank")
        ztlib.check("step     1/" not in r.stdout, "readonly_dir_refused_before_training", r.stdout[-300:])

    # ---- 2. mkdir of the save's temporary directory fails (no inode left)
    with Tmpfs("size=64m,nr_inodes=1000") as fs:
        ck = os.path.join(fs.path, "ck")
        r = train(ck, ["train_iters=1"])
        ztlib.check(r.rc == 0, "first_save", r.why())
        fs.remount(f"nr_inodes={fs.used()[1]}")
        r = train(ck, ["train_iters=3", "checkpoint.save_interval=1"])
        failed_together(r, ".tmp_step_00000002", "mkdir_in_save_fails_on_every_rank")
        ztlib.check(r.errors and "No space left on device" in r.errors[0], "mkdir_in_save_says_why", str(r.errors))
        # one inode more: the temporary directory is made, rank 0's file cannot be created
        fs.remount(f"nr_inodes={fs.used()[1] + 1}")
        r = train(ck, ["train_iters=3", "checkpoint.save_interval=1"])
        failed_together(r, "rank_00000.h5: cannot create: No space left on device", "shard_create_fails_with_cause")
        fs.remount("nr_inodes=1000")
        still_loadable(ck, 1, "mkdir_failure_keeps_previous")

    # ---- 3. disk full while the ranks write their files
    with Tmpfs("size=64m") as fs:
        ck = os.path.join(fs.path, "ck")
        r = train(ck, ["train_iters=1"])
        ztlib.check(r.rc == 0, "first_save_shards", r.why())
        fs.remount(f"size={fs.used()[0] + 64 * 1024}")
        r = train(ck, ["train_iters=3", "checkpoint.save_interval=1"])
        failed_together(r, "No space left on device", "disk_full_in_shards_fails_on_every_rank")
        fs.remount("size=64m")
        still_loadable(ck, 1, "disk_full_in_shards_keeps_previous")

    # ---- 4. disk full while rank 0 writes index.h5 (HDF5 used to crash at exit)
    with Tmpfs("size=64m") as fs:
        ck = os.path.join(fs.path, "ck")
        r = train(ck, ["train_iters=1"])
        ztlib.check(r.rc == 0, "first_save_index", r.why())
        sd = os.path.join(ck, "step_00000001")
        shards = sum(blocks(os.path.join(sd, f)) for f in os.listdir(sd) if f.startswith("rank_"))
        index = blocks(os.path.join(sd, "index.h5"))
        fs.remount(f"size={fs.used()[0] + shards + index // 2 // 4096 * 4096}")
        r = train(ck, ["train_iters=3", "checkpoint.save_interval=1"])
        failed_together(r, "index.h5", "disk_full_in_index_fails_on_every_rank")
        ztlib.check(r.errors and "No space left on device" in r.errors[0], "disk_full_in_index_says_why", str(r.errors))
        fs.remount("size=64m")
        still_loadable(ck, 1, "disk_full_in_index_keeps_previous")

    # ---- 5. two runs on one checkpoint dir; a killed holder does not leave it locked
    ck = os.path.join(tmp, "shared")
    a = start(["train", TINY] + sum([["--set", s] for s in BASE + [f"checkpoint.dir={ck}", "train_iters=400",
                                                                    "checkpoint.save_interval=1", "seed=1"]], []))
    deadline = time.time() + ztlib.RANKED_TIMEOUT
    while time.time() < deadline and not os.path.exists(os.path.join(ck, "latest")):
        time.sleep(0.2)
    lock = open(os.path.join(ck, ".lock")).read() if os.path.exists(os.path.join(ck, ".lock")) else ""
    r = train(ck, ["train_iters=400", "checkpoint.save_interval=1", "seed=2"])
    failed_together(r, "in use by another run", "second_run_refused_on_every_rank")
    ztlib.check(r.errors and "pid " in r.errors[0] and "host " in r.errors[0] and lock.split(",")[1].strip() in r.errors[0],
                "second_run_message_names_holder", f"{r.errors} vs lock '{lock}'")
    ztlib.check(a.poll() is None, "first_run_unharmed", "the first run ended while the second was refused")
    # .lock deleted under the running job (issue 31): the directory's own lock still refuses a second
    # run BEFORE it touches .lock (it leaves no file behind), and the holder restores .lock at its next
    # save and keeps saving: no step lost
    lockp = os.path.join(ck, ".lock")
    os.unlink(lockp)
    r = train(ck, ["train_iters=400", "checkpoint.save_interval=1", "seed=2"])
    failed_together(r, "in use by another run", "lock_deleted_second_run_refused")
    after = ztlib.read_text(lockp) if os.path.exists(lockp) else None
    ztlib.check(after is None or after == lock, "lock_deleted_refused_run_leaves_no_lock", repr(after))
    relock = wait_for(lambda: ztlib.read_text(lockp) if os.path.exists(lockp) else None)
    ztlib.check(a.poll() is None and relock == lock, "lock_deleted_written_again", f"'{relock}' vs '{lock}'")
    # what a refused run of an older build did (an empty .lock of its own where the deleted one was),
    # a truncated record, a file put in its place: the holder restores its record and goes on saving
    for how in ("empty_file_created", "record_truncated", "replaced_by_stray_file"):
        if how == "empty_file_created":
            os.unlink(lockp)
            open(lockp, "w").close()
        elif how == "record_truncated":
            open(lockp, "w").close()
        else:
            with open(lockp + ".other", "w") as f:
                f.write("host elsewhere, pid 1, run id 0123456789abcdef, started now\n")
            os.rename(lockp + ".other", lockp)
        s0 = saved_step(ck)
        ztlib.check(wait_for(lambda: saved_step(ck) >= s0 + 2 and ztlib.read_text(lockp) == lock) and a.poll() is None,
                    f"lock_{how}_holder_restores_and_keeps_saving",
                    f"step {s0} -> {saved_step(ck)}, alive {a.poll() is None}, .lock '{ztlib.read_text(lockp)}'")
    r = train(ck, ["train_iters=400", "checkpoint.save_interval=1", "seed=2"])
    failed_together(r, "in use by another run", "lock_restored_second_run_refused")
    os.kill(int(lock.split(",")[1].split()[1]), signal.SIGKILL)  # the holder (rank 0) crashes
    finish(a)
    r = train(ck, ["train_iters=1"])
    ztlib.check(r.rc == 0 and ("resumed from" in r.stdout or "nothing left to train" in r.stdout),
                "lock_released_when_holder_killed", r.why())
    still_loadable(ck, int(open(os.path.join(ck, "latest")).read().strip()[5:]), "killed_holder_leaves_loadable")

    # ---- 5b. where directories cannot be locked (NFS; ZEROTRAIN_INJECT_NO_DIR_LOCK), .lock replaced by a
    # file another process holds locked (another run got in): the holder's next save stops every rank
    # with one line naming the new holder; its checkpoints stay
    ck = os.path.join(tmp, "replaced")
    a = start(["train", TINY] + sum([["--set", s] for s in BASE + [f"checkpoint.dir={ck}", "train_iters=400",
                                                                    "checkpoint.save_interval=1"]], []),
              env={"ZEROTRAIN_INJECT_NO_DIR_LOCK": "1"})
    wait_for(lambda: os.path.exists(os.path.join(ck, "latest")))
    with open(os.path.join(ck, ".lock.other"), "w") as f:
        f.write("host elsewhere, pid 1, run id 0123456789abcdef, started now\n")
    other = open(os.path.join(ck, ".lock.other"))
    fcntl.flock(other, fcntl.LOCK_EX)  # held by this test process: a live holder
    os.rename(os.path.join(ck, ".lock.other"), os.path.join(ck, ".lock"))
    r = finish(a)
    other.close()
    failed_together(r, "replaced while this run holds the checkpoint directory (now: host elsewhere",
                    "lock_replaced_by_live_holder_stops_holder")
    still_loadable(ck, int(open(os.path.join(ck, "latest")).read().strip()[5:]), "lock_replaced_keeps_checkpoints")

    # ---- 6. a step directory mixing two runs' files is refused
    x, y, mixed = (os.path.join(tmp, n) for n in ("run_x", "run_y", "mixed"))
    rx, ry = train(x, ["train_iters=1", "seed=1"]), train(y, ["train_iters=1", "seed=2"])
    ztlib.check(rx.rc == 0 and ry.rc == 0, "two_runs_saved", rx.why() + ry.why())
    shutil.copytree(os.path.join(x, "step_00000001"), os.path.join(mixed, "step_00000001"))
    shutil.copy(os.path.join(y, "step_00000001", "rank_00001.h5"), os.path.join(mixed, "step_00000001"))
    r = info(mixed)
    # (the step's manifest refuses the other run's file before HDF5 opens it; test_checkpoint.c checks
    # the index's shard digests behind it)
    ztlib.check(r.rc != 0 and "rank_00001.h5: damaged: checksum mismatch" in r.stdout + r.stderr and
                "not the file this step saved" in r.stderr and "integrity: OK" not in r.stdout,
                "info_refuses_mixed_step", r.stdout[-500:] + r.stderr[-500:])
    r = train(mixed, ["train_iters=2"])
    failed_together(r, "rank_00001.h5: damaged: checksum mismatch", "resume_refuses_mixed_step")

    # ---- 7. messages
    good = os.path.join(x, "step_00000001")
    # 7a. a changed byte inside index.h5 (its attribute heap): "damaged", from the step's manifest, before HDF5
    dmg = os.path.join(tmp, "damaged")
    shutil.copytree(good, os.path.join(dmg, "step_00000001"))
    idx = os.path.join(dmg, "step_00000001", "index.h5")
    data = bytearray(open(idx, "rb").read())
    at = data.find(b"BTLF")  # a leaf of the attribute name index (checksummed metadata)
    data[at + 12] ^= 0x55
    open(idx, "wb").write(data)
    r = train(dmg, ["train_iters=2"])
    failed_together(r, "damaged", "damaged_index_metadata_says_damaged")
    ztlib.check(r.errors and "checksum mismatch" in r.errors[0] and "manifest" in r.errors[0],
                "damaged_index_metadata_named_by_manifest", str(r.errors))
    # 7b. trainer state edited with h5py, the manifest removed too (else it refuses the edit first)
    edited = os.path.join(tmp, "edited")
    shutil.copytree(good, os.path.join(edited, "step_00000001"))
    os.unlink(os.path.join(edited, "step_00000001", "manifest"))
    with h5py.File(os.path.join(edited, "step_00000001", "index.h5"), "r+") as f:
        f["state"].attrs["data_samples"] = 999
    r = train(edited, ["train_iters=2"])
    failed_together(r, "metadata checksum mismatch", "edited_trainer_state_refused")
    r = info(edited)
    ztlib.check(r.rc != 0 and "metadata checksum mismatch" in r.stderr, "info_refuses_edited_state", r.stderr[-400:])
    # 7c. `latest` naming a directory that is not a step directory (it looks like a file)
    odd = os.path.join(tmp, "odd_latest")
    shutil.copytree(good, os.path.join(odd, "rank_00000.h5"))
    open(os.path.join(odd, "latest"), "w").write("rank_00000.h5\n")
    r = train(odd, ["train_iters=2"])
    failed_together(r, "does not name a step directory", "latest_not_a_step_dir_refused_at_resume")
    # 7d. junk bytes in `latest`: escaped, one line
    junk = os.path.join(tmp, "junk_latest")
    shutil.copytree(good, os.path.join(junk, "step_00000001"))
    open(os.path.join(junk, "latest"), "wb").write(b"step_\x01\xff\x1b[31m\nmore\n")
    r = train(junk, ["train_iters=2"])
    failed_together(r, "\\x01\\xFF\\x1B[31m\\nmore", "latest_junk_escaped_on_one_line")
    # 7e. a --set with a newline in it: every error message goes out escaped, on one line
    r = train(os.path.join(tmp, "unused"), ["no_such\nkey=1"])
    failed_together(r, "no_such\\nkey", "set_with_newline_one_line")

    # ---- 8. the 16-bit model save after a checkpoint (stage3_gather_16bit_weights_on_model_save) fails:
    # every rank stops with one line, the checkpoint it belongs to stays complete, loadable and resumable
    SAVE16 = "zero_optimization.stage3_gather_16bit_weights_on_model_save=true"

    def export_failure_keeps_checkpoint(fs, ck, tag):
        sd = os.path.join(ck, "step_00000002")
        ztlib.check(os.path.isfile(os.path.join(sd, "index.h5")) and not os.path.exists(os.path.join(sd, "hf"))
                    and not os.path.exists(os.path.join(sd, ".hf.tmp")), f"{tag}_no_partial_export",
                    str(os.listdir(sd) if os.path.isdir(sd) else "no step_00000002"))
        ztlib.check(open(os.path.join(ck, "latest")).read() == "step_00000002\n", f"{tag}_latest_on_the_checkpoint")
        fs.remount("size=128m,nr_inodes=1000")  # room for step 3 with its export
        still_loadable(ck, 2, f"{tag}_checkpoint_loadable")
        r = train(ck, ["train_iters=3", "checkpoint.save_interval=1", SAVE16])
        ztlib.check(r.rc == 0 and "resumed from" in r.stdout and "at step 2" in r.stdout
                    and os.path.isfile(os.path.join(ck, "step_00000003", "hf", "model.safetensors")),
                    f"{tag}_resumes_and_exports", r.why())

    # 8a. disk full: the checkpoint fits, its export does not
    with Tmpfs("size=128m") as fs:
        ck = os.path.join(fs.path, "ck")
        r = train(ck, ["train_iters=1", "zero_optimization.stage=3", SAVE16])
        ztlib.check(r.rc == 0 and os.path.isdir(os.path.join(ck, "step_00000001", "hf")), "first_save_with_export", r.why())
        sd = os.path.join(ck, "step_00000001")
        ckpt = sum(blocks(os.path.join(sd, f)) for f in os.listdir(sd) if f.endswith(".h5"))
        fs.remount(f"size={fs.used()[0] + ckpt + 256 * 1024}")  # the export needs 3.3 MB more
        r = train(ck, ["train_iters=3", "checkpoint.save_interval=1", "zero_optimization.stage=3", SAVE16])
        failed_together(r, "No space left on device", "export_disk_full_fails_on_every_rank")
        ztlib.check(r.errors and "16-bit model save" in r.errors[0] and "step_00000002 itself is complete" in r.errors[0],
                    "export_disk_full_message", str(r.errors))
        export_failure_keeps_checkpoint(fs, ck, "export_disk_full")

    # 8b. the export's files cannot be created (no inode left once the checkpoint is written)
    with Tmpfs("size=128m,nr_inodes=1000") as fs:
        ck = os.path.join(fs.path, "ck")
        r = train(ck, ["train_iters=1", SAVE16])
        ztlib.check(r.rc == 0, "first_save_with_export_inodes", r.why())
        # a save takes 5 (its directory, 2 rank files, index.h5, manifest) and 1 more while latest is
        # replaced: then the export makes its directory with that last one and cannot create a file in it
        fs.remount(f"nr_inodes={fs.used()[1] + 6}")
        r = train(ck, ["train_iters=3", "checkpoint.save_interval=1", SAVE16])
        failed_together(r, ".hf.tmp/model.safetensors.tmp", "export_uncreatable_fails_on_every_rank")
        ztlib.check(r.errors and "cannot create: No space left on device" in r.errors[0], "export_uncreatable_says_why",
                    str(r.errors))
        export_failure_keeps_checkpoint(fs, ck, "export_uncreatable")
finally:
    for p in started:
        if p.poll() is None:
            kill_tree(p.pid)
    for line in open("/proc/mounts"):
        if line.split()[1].startswith(tmp):
            subprocess.run(["umount", "-l", line.split()[1]], check=False)
    shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
