"""t_disk_full.py — the one policy for a full disk in every writer (issue 25, item 6): metrics_file,
trace, csv_monitor and tensorboard, each on a small tmpfs (as root; mounted under a temporary
directory and unmounted in `finally`) filled up to a few pages, with checkpoint.dir on another disk.
The write that fails stops the run at that step on EVERY rank with a non-zero status, in time, with
exactly one `zerotrain: error:` line naming the file and "No space left on device" and saying that a
last checkpoint was saved; that checkpoint is `latest` and verifies (`zerotrain info`); the metrics
lines written before stay whole. (Checkpoint saves on a full disk: t_checkpoint_faults.py.)"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import ztlib

ztlib.ensure_shakespeare()
TINY = "configs/tiny.yaml"
tmp = tempfile.mkdtemp(prefix="zt_diskfull_")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a terminated test still unmounts (finally)
PAGE = 4096


def fill(fs, pages_left):
    """fills the tmpfs FS but PAGES_LEFT pages"""
    st = os.statvfs(fs.path)
    with open(os.path.join(fs.path, "filler"), "wb") as f:
        f.write(b"\0" * (st.f_bavail * st.f_frsize - pages_left * PAGE))


def full_disk_case(name, sets, pages_left, want_path):
    """a run whose WRITER (sets point it into a full tmpfs) fails; checks the policy"""
    with ztlib.Tmpfs("size=256k", tmp) as fs:
        fill(fs, pages_left)
        ck = os.path.join(tmp, name + "_ck")
        args = ["train", TINY]
        for s in ["zero_optimization.stage=2", "train_iters=200", f"checkpoint.dir={ck}"] + \
                 [s.replace("FS", fs.path) for s in sets]:
            args += ["--set", s]
        r = ztlib.finish_ranked(ztlib.start_ranked(args, 2))
        ztlib.failed_together(r, "No space left on device", f"{name}_full_stops_on_every_rank")
        line = r.errors[0] if r.errors else ""
        m = re.search(r"after a last checkpoint: .*/latest is step_(\d+)$", line)
        ztlib.check(want_path.replace("FS", fs.path) in line and m, f"{name}_line_names_file_and_checkpoint", line)
        if m:
            ztlib.still_loadable(ck, int(m.group(1)), f"{name}_last_checkpoint_loadable")
        return fs.path


def can_mount():
    try:
        with ztlib.Tmpfs("size=64k", tmp):
            return True
    except (subprocess.CalledProcessError, OSError):
        return False


try:
    if not can_mount():
        print("SKIP t_disk_full: cannot mount a tmpfs here (needs root)")
    else:
        full_disk_case("metrics", ["metrics_file=FS/m.jsonl"], 1, "FS/m.jsonl: cannot write metrics_file")
        full_disk_case("trace", ["trace=FS/t/run.json"], 6, "FS/t/run.rank")
        full_disk_case("csv_monitor", ["csv_monitor.enabled=true", "csv_monitor.output_path=FS"], 3,
                       "FS/DeepSpeedJobName: cannot write the csv_monitor files")
        full_disk_case("tensorboard", ["tensorboard.enabled=true", "tensorboard.output_path=FS"], 1,
                       "cannot write the TensorBoard event file")

        # the lines written before the failure stay whole: every line but a cut last one reads
        with ztlib.Tmpfs("size=256k", tmp) as fs:
            fill(fs, 1)
            path = os.path.join(fs.path, "m.jsonl")
            r = ztlib.finish_ranked(ztlib.start_ranked(
                ["train", TINY, "--set", "train_iters=200", "--set", f"metrics_file={path}"], 2))
            whole = open(path).read().split("\n")[:-1]  # a line cut by the full disk has no newline
            try:
                steps = [ztlib.json.loads(line)["step"] for line in whole]
            except ValueError as e:
                steps = [str(e)]
            ztlib.check(sorted(r.rank_status.values()) == [1, 1] and len(whole) >= 2 and steps == list(range(1, len(whole) + 1)),
                        "metrics_lines_before_stay_whole", f"steps {steps}; {r.why()}")
finally:
    ztlib.kill_started()
    for line in open("/proc/mounts"):
        if line.split()[1].startswith(tmp):
            subprocess.run(["umount", "-l", line.split()[1]], check=False)
    shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
