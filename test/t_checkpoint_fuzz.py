"""t_checkpoint_fuzz.py — damaged checkpoints and exports end in bounded time with one clear line
(issue 48, items 2, 6, 7). A small 2-rank checkpoint (configs/tiny.yaml, ZeRO-2, steps 2 and 4) and its
Hugging Face export are made once; then seeded damage — one flipped bit, 64 zeroed bytes, a
truncation — to one file at a time: index.h5, each rank file, the step's manifest, `latest`, and the
export's model.safetensors and config.json. `zerotrain info` (checkpoint files: it reads and
verifies everything) or `zerotrain sample` (the export) must end within CASE_TIMEOUT s with exit 0 (a
change no checksum can see: `latest`'s trailing newline, safetensors padding) or exit 1 with exactly
one `zerotrain: error:` line — never a hang, a signal or a sanitizer report. Offsets are drawn mostly
where HDF5 keeps its structures (a rank file's first and last 64 KiB: its data in between is the
chunk CRCs'), the rest anywhere. The run is time-boxed: cases are taken round-robin over the files
and no new one starts after ZT_FUZZ_SECONDS (default 35) once every file has had each kind of damage
(ZT_FUZZ_CASES caps the count, default 300; two cases run at a time).
Also, each checked once: the hang case of the issue (64 zeroed bytes in index.h5 where main's
HDF5 span forever), a NaN saved with a valid checksum (ZEROTRAIN_INJECT_SAVE_NAN: info, export and
resume refuse it naming file, tensor and element), and a resume whose newest step is damaged falls
back to the newest step that verifies, saying so in one warning line; a SIGTERM while a resume's
load is stuck (ZEROTRAIN_INJECT_LOAD_STALL) ends every rank with status 99."""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import ztlib

ztlib.ensure_shakespeare()
TINY = "configs/tiny.yaml"
CASE_TIMEOUT = 10
WORKERS = 2
BUDGET = float(os.environ.get("ZT_FUZZ_SECONDS", "35"))
MAX_CASES = int(os.environ.get("ZT_FUZZ_CASES", "300"))
SANITIZER = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "LeakSanitizer")
tmp = tempfile.mkdtemp(prefix="zt_ckfuzz_")
ck = os.path.join(tmp, "ck")
STEP = os.path.join(ck, "step_00000004")


def train(ckdir, iters, env=None, sets=()):
    args = ["train", TINY, "--set", "zero_optimization.stage=2", "--set", f"checkpoint.dir={ckdir}",
            "--set", f"train_iters={iters}", "--set", "checkpoint.save_interval=2"]
    for s in sets:
        args += ["--set", s]
    return ztlib.run(args, ranks=2, timeout=120, env=env)


def errors(text):
    return [line for line in text.splitlines() if line.startswith("zerotrain: error:")]


def verdict(cmd):
    """(ok, why) for one command on damaged input: rc 0 with no error line, or rc 1 with one"""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=ztlib.ROOT, env=ztlib.ENV, capture_output=True, text=True, errors="replace",
                           timeout=CASE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"hung (> {CASE_TIMEOUT} s)"
    dt, errs = time.time() - t0, errors(p.stderr)
    if any(s in p.stderr for s in SANITIZER):
        return False, "sanitizer report: " + p.stderr[-400:]
    if p.returncode == 0 and not errs:
        return True, f"0 in {dt:.1f} s"
    if p.returncode == 1 and len(errs) == 1:
        return True, f"1 in {dt:.1f} s: {errs[0]}"
    return False, f"rc {p.returncode} with {len(errs)} error lines in {dt:.1f} s: {p.stderr[-400:]}"


def damage(data, kind, rng, hot):
    """the bytes DATA after damage KIND at an offset drawn from HOT (ranges HDF5 parses) or anywhere"""
    b = bytearray(data)
    lo, hi = rng.choice(hot) if hot and rng.random() < 0.8 else (0, len(b))
    off = rng.randrange(lo, max(lo + 1, min(hi, len(b))))
    if kind == "flip":
        b[off] ^= 1 << rng.randrange(8)
    elif kind == "zero64":
        b[off:off + 64] = bytes(min(64, len(b) - off))
    else:
        del b[off:]
    return bytes(b), f"{kind}@{off}"


try:
    p = train(ck, 4)
    made = p.returncode == 0 and os.path.isfile(os.path.join(STEP, "manifest"))
    ztlib.check(made, "checkpoint_made_with_manifest", p.stderr[-800:])
    exp = os.path.join(tmp, "export")
    p = ztlib.run(["export", ck, "-o", exp], timeout=120)
    ztlib.check(p.returncode == 0, "export_made", p.stderr[-500:])
    if not made:
        ztlib.finish()

    # ---- the issue's hang: 64 zeroed bytes inside index.h5's virtual-dataset mappings
    pristine = {}
    for name in ("index.h5", "rank_00000.h5", "rank_00001.h5", "manifest"):
        pristine[os.path.join(STEP, name)] = open(os.path.join(STEP, name), "rb").read()
    pristine[os.path.join(ck, "latest")] = open(os.path.join(ck, "latest"), "rb").read()
    for name in ("model.safetensors", "config.json"):
        pristine[os.path.join(exp, name)] = open(os.path.join(exp, name), "rb").read()
    index = os.path.join(STEP, "index.h5")
    hang = bytearray(pristine[index])
    hang[7428:7428 + 64] = bytes(64)
    open(index, "wb").write(hang)
    ok, why = verdict([ztlib.BIN, "info", ck])
    ztlib.check(ok and "index.h5: damaged" in why, "zeroed_index_range_one_line", why)
    open(index, "wb").write(pristine[index])

    # ---- seeded damage, round-robin over the files; WORKERS cases at a time, each in a copy of its own
    hot = {}
    for path, data in pristine.items():
        n = len(data)
        hot[path] = [(0, min(n, 65536)), (max(0, n - 65536), n)] if path.endswith("rank_00000.h5") or \
            path.endswith("rank_00001.h5") else []
    files = list(pristine)
    kinds = ("flip", "zero64", "truncate")
    t0, bad, hf_bad, counts = time.time(), [], [], []

    def worker(w):
        rng, root, done = random.Random(48 + w), os.path.join(tmp, f"w{w}"), 0
        shutil.copytree(ck, os.path.join(root, "ck"))
        shutil.copytree(exp, os.path.join(root, "export"))
        while True:
            i = done * WORKERS + w  # this worker's cases of the one round-robin sequence
            path, kind = files[i % len(files)], kinds[(i // len(files)) % len(kinds)]
            if i >= MAX_CASES or (i >= len(files) * len(kinds) and time.time() - t0 > BUDGET):
                break
            mine = os.path.join(root, os.path.relpath(path, tmp))
            data, what = damage(pristine[path], kind, rng, hot[path])
            with open(mine, "wb") as f:
                f.write(data)
            if path.startswith(exp):
                cmd = [ztlib.BIN, "sample", os.path.join(root, "export"), "--prompt", "a", "--max-tokens", "1",
                       "--device", "cpu"]
            else:
                cmd = [ztlib.BIN, "info", os.path.join(root, "ck")]
            ok, why = verdict(cmd)
            with open(mine, "wb") as f:
                f.write(pristine[path])
            done += 1
            if not ok:
                (hf_bad if path.startswith(exp) else bad).append(f"{os.path.basename(path)} {what}: {why}")
        counts.append(done)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(WORKERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done, dt = sum(counts), time.time() - t0
    print(f"    {done} damage cases in {dt:.1f} s ({len(bad)} checkpoint and {len(hf_bad)} export failures)")
    ztlib.check(not bad, f"checkpoint_damage_bounded_one_line ({done} cases)", "; ".join(bad[:6]))
    ztlib.check(not hf_bad, "export_damage_bounded_one_line", "; ".join(hf_bad[:6]))

    # ---- a resume whose newest step is damaged falls back to the newest that verifies
    open(index, "wb").write(hang)
    m = os.path.join(tmp, "resume.jsonl")
    p = train(ck, 6, sets=[f"metrics_file={m}"])
    warned = [line for line in p.stderr.splitlines() if "step_00000004" in line and "warning" in line]
    rows = ztlib.read_metrics(m)
    ztlib.check(p.returncode == 0 and len(warned) == 1 and "step_00000002" in warned[0] and rows and rows[0]["step"] == 3,
                "resume_falls_back_past_damaged_step", f"{warned}; {[r.get('step') for r in rows]}; {p.stderr[-800:]}")
    open(index, "wb").write(pristine[index])

    # ---- a NaN saved with a valid checksum: refused by info, export and resume, naming it
    nan = os.path.join(tmp, "nan")
    p = train(nan, 2, env={"ZEROTRAIN_INJECT_SAVE_NAN": "1"})
    want = "rank_00001.h5: element 0 of the shard, master of transformer.wte.weight (element 817920), is nan"
    for name, cmd in (("info", ["info", nan]), ("export", ["export", nan, "-o", os.path.join(tmp, "nan_exp")])):
        q = ztlib.run(cmd, timeout=60)
        ztlib.check(q.returncode == 1 and len(errors(q.stderr)) == 1 and want in q.stderr, f"nan_refused_by_{name}",
                    q.stderr[-500:])
    q = train(nan, 4, sets=["checkpoint.resume=" + os.path.join(nan, "step_00000002")])
    ztlib.check(q.returncode == 1 and want in q.stderr, "nan_refused_at_resume", q.stderr[-500:])

    # ---- a SIGTERM (a batch system's timeout) while the resume's load is stuck ends the run (status 99)
    args = ["train", TINY, "--set", "zero_optimization.stage=2", "--set", f"checkpoint.dir={ck}", "--set", "train_iters=6"]
    p = ztlib.start_ranked(args, ranks=2, env={"ZEROTRAIN_INJECT_LOAD_STALL": "1"})
    log = []
    for line in p.stdout:  # wait on the state: both ranks' load has begun (rank 0 says so)
        log.append(line)
        if "stalled by ZEROTRAIN_INJECT_LOAD_STALL" in line:
            break
    pids = ztlib.rank_pids(ck)
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    r = ztlib.finish_ranked(p, timeout=30)
    ztlib.check(len(pids) == 2 and not r.timed_out and sorted(r.rank_status.values()) == [99, 99],
                "sigterm_ends_a_stuck_load", f"pids {pids}; {r.why()}; {''.join(log)[-300:]}")
finally:
    ztlib.kill_started()
    shutil.rmtree(tmp, ignore_errors=True)
ztlib.finish()
