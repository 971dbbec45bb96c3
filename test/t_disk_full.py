"""t_disk_full.py — the one policy for a full disk in every writer (issue 25, item 6): metrics_file,
trace, csv_monitor and tensorboard, each on a small tmpfs (as root; mounted under a temporary
directory and unmounted in `finally`) filled up to a few pages, with checkpoint.dir on another disk.
The write that fails stops the run at that step on EVERY rank with a non-zero status, in time, with
exactly one `zerotrain: error:` line naming the file and "No space left on device" and saying that a
last checkpoint was saved; that checkpoint is `latest` and verifies (`zerotrain info`); the metrics
lines written before stay whole. With space again the run resumes and appends: every file then reads
whole, a torn last record (left by the full disk, or put there by the test) cut first (issue 31).
(Checkpoint saves on a full disk: t_checkpoint_faults.py.)"""
import os
import json
import re
import struct
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
        for s in ["zero_optimization.stage=2", f"checkpoint.dir={ck}"] + [s.replace("FS", fs.path) for s in sets] + \
                 ["train_iters=200"]:
            args += ["--set", s]
        r = ztlib.finish_ranked(ztlib.start_ranked(args, 2))
        ztlib.failed_together(r, "No space left on device", f"{name}_full_stops_on_every_rank")
        line = r.errors[0] if r.errors else ""
        m = re.search(r"after a last checkpoint: .*/latest is step_(\d+)$", line)
        ztlib.check(want_path.replace("FS", fs.path) in line and m, f"{name}_line_names_file_and_checkpoint", line)
        if m:
            ztlib.still_loadable(ck, int(m.group(1)), f"{name}_last_checkpoint_loadable")
            resume_after_full_disk(name, fs.path, args, int(m.group(1)))
        return fs.path


def records_whole(name, fs):
    """'' when every file NAME's writer left in FS ends on a whole record and reads, else what does not"""
    bad = []
    for root, _, files in os.walk(fs):
        for f in files:
            p = os.path.join(root, f)
            data = open(p, "rb").read()
            if f == "filler" or not data:
                continue
            if f.endswith(".jsonl") or f.endswith(".csv"):
                try:
                    lines = data.decode().split("\n")
                    ok = lines[-1] == "" and all(
                        json.loads(x) is not None if f.endswith(".jsonl") else re.fullmatch(r"(step,\w+|\d+,[-0-9.e+inf]+)\r", x)
                        for x in lines[:-1])
                except ValueError:
                    ok = False
            elif f.startswith("events.out.tfevents."):
                at = 0
                while at + 12 <= len(data):
                    at += 12 + struct.unpack("<Q", data[at:at + 8])[0] + 4
                ok = at == len(data)
            elif f.endswith(".json"):
                try:
                    ok = isinstance(json.loads(data), list)
                except ValueError:
                    ok = False
            else:
                continue
            if not ok:
                bad.append(f"{p} (ends {data[-80:]!r})")
    return " ".join(bad)


def resume_after_full_disk(name, fs, args, step):
    """issue 31: with space again, the run resumes (from the last checkpoint) and appends to the files
    the failed run left; each must then read whole (a torn last record is cut first). A writer that
    happened to end on a whole record gets a torn one put there, so every writer meets the case."""
    os.unlink(os.path.join(fs, "filler"))
    for root, _, files in os.walk(fs):
        for f in files:
            p = os.path.join(root, f)
            data = open(p, "rb").read()
            if f.endswith(".jsonl") and not data.endswith(b"\n"):
                continue  # the full disk tore it already (the case)
            with open(p, "ab") as out:
                if f.endswith(".jsonl"):
                    out.write(b'{"step": 9999, "loss": 1.2')
                elif f.endswith(".csv"):
                    out.write(b"9999,1.2")
                elif f.startswith("events.out.tfevents."):
                    out.write(struct.pack("<Q", 40) + b"\0\0\0\0" + b"torn")
    r = ztlib.finish_ranked(ztlib.start_ranked(args[:-1] + [f"train_iters={step + 2}"] if args[-1].startswith("train_iters")
                                               else args + ["--set", f"train_iters={step + 2}"], 2))
    ztlib.check(r.rc == 0 and "resumed from" in r.stdout + r.stderr, f"{name}_resumes_after_full_disk", r.why())
    bad = records_whole(name, fs)
    ztlib.check(not bad, f"{name}_files_read_whole_after_resume", bad)


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
