"""ztlib.py — helpers for the Python integration tests: paths, test data, running zerotrain alone
or under mpirun, reading metrics, and the PASS/FAIL protocol of test/run.sh."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ZEROTRAIN_BIN") or os.path.join(ROOT, "zerotrain")  # make sanitize: build/sanitize/zerotrain
TESTDATA = os.path.join(ROOT, "build", "testdata")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
failed = 0


def check(ok, name, why=""):
    global failed
    if ok:
        print(f"PASS {name}", flush=True)
    else:
        failed += 1
        print(f"FAIL {name}: {why}", flush=True)
    return ok


def finish():
    sys.exit(1 if failed else 0)


def processes_with(marker):
    """pids of this machine's processes whose command line contains marker (a run's unique path):
    what a test checks is no longer running"""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(d))
        except OSError:
            pass
    return found


def ensure_shakespeare():
    """Tokenized tiny Shakespeare shards under build/testdata (made once by zerotrain tokenize)."""
    os.makedirs(TESTDATA, exist_ok=True)
    prefix = os.path.join(TESTDATA, "shakespeare")
    if not os.path.exists(prefix + "_val.bin"):
        subprocess.run([BIN, "tokenize", "--vocab", os.path.join(ROOT, "data/gpt2"),
                        os.path.join(ROOT, "data/tinyshakespeare.txt"), "-o", prefix],
                       check=True, env=ENV, stdout=subprocess.DEVNULL)
    return prefix


def note_sanitizer_report(args, p):
    """make sanitize (test/t_sanitize.sh): UBSan inside an ASan build prints to stderr whatever its log_path
    says, and a test that expects a refusal would take its exit for one, so a report seen here is kept
    as a file for t_sanitize.sh to fail on."""
    reports = os.environ.get("ZEROTRAIN_SANITIZE_REPORTS")
    text = (p.stderr or "") + (p.stdout or "")
    if reports and (p.returncode == 86 or "runtime error:" in text or "Sanitizer" in text):
        with open(os.path.join(reports, f"ztlib.{os.getpid()}.{len(os.listdir(reports))}"), "w") as f:
            f.write(" ".join(map(str, args)) + f"\nexit status {p.returncode}\n" + text[-6000:])


def run(args, ranks=0, timeout=300, env=None):
    """Runs zerotrain ARGS (under mpirun -np RANKS when ranks > 0); returns CompletedProcess."""
    cmd = [BIN] + list(args)
    if ranks:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] + cmd
    p = subprocess.run(cmd, cwd=ROOT, env=dict(ENV, **(env or {})), capture_output=True, text=True, timeout=timeout)
    note_sanitizer_report(args, p)
    return p


def train(config, sets=(), ranks=0, metrics=None, timeout=300):
    """Trains; returns (CompletedProcess, list of metric dicts)."""
    tmp = None
    if metrics is None:
        tmp = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False)
        metrics = tmp.name
        tmp.close()
    args = ["train", config, "--set", f"metrics_file={metrics}"]
    for s in sets:
        args += ["--set", s]
    p = run(args, ranks=ranks, timeout=timeout)
    rows = read_metrics(metrics)
    if tmp:
        os.unlink(metrics)
    return p, rows


def read_text(path):
    """A log file's text so far ("" while it does not exist; undecodable bytes replaced)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_metrics(path):
    """The rows of a metrics_file (JSON lines); [] when it does not exist (yet)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def can_netns(*tools):
    """Whether this process can make network namespaces (root, iproute2) and has TOOLS."""
    import shutil
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip",) + tools):
        return False
    probe = f"ztprobe{os.getpid()}"
    ok = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ok


def wait_slurm_job(state_of, terminal, timeout, poll=0.25):
    """Polls state_of() (a Slurm job's JobState) until it is in TERMINAL or TIMEOUT seconds pass;
    returns the final state, or TIMEOUT_IN_TEST(state) (sbatch --wait polls at 2, 10, 42 s...)."""
    import time
    end = time.time() + timeout
    while time.time() < end:
        st = state_of()
        if st in terminal:
            return st
        time.sleep(poll)
    return "TIMEOUT_IN_TEST(" + state_of() + ")"


def trace_spans(path):
    """{name: [(start, end), ...]} of a trace file's complete events (µs); {} when it is missing or torn"""
    try:
        with open(path) as f:
            events = json.load(f)
    except (OSError, ValueError):
        return {}
    spans = {}
    for e in events:
        if e.get("ph") == "X":
            spans.setdefault(e["name"], []).append((e["ts"], e["ts"] + e["dur"]))
    return spans


def overlaps(xs, ys):
    """how many pairs of spans, one from each list, overlap in time"""
    return sum(1 for x in xs for y in ys if min(x[1], y[1]) > max(x[0], y[0]))


def losses(rows):
    return [r["loss"] for r in rows]


def max_rel_diff(a, b):
    if len(a) != len(b) or not a:
        return float("inf")
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


PYENV = os.environ.get("ZEROTRAIN_PYENV") or os.path.expanduser("~/.cache/zerotrain/pyenv")


def use_pypi_env(*modules):
    """Makes MODULES importable: re-runs this script under the virtual environment that
    scripts/install-deps.sh fills from PyPI (transformers, tokenizers, safetensors, tiktoken; it sees
    Debian's torch and numpy too). A FAIL line naming the script to run when it is missing."""
    try:
        for m in modules:
            __import__(m)
        return
    except ImportError as e:
        missing = e.name
    py = os.path.join(PYENV, "bin", "python")
    if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(PYENV):
        os.execv(py, [py] + sys.argv)
    check(False, "pypi_env", f"Python module {missing} missing (run scripts/install-deps.sh, which installs it into {PYENV})")
    finish()


def read_shard(path):
    """The tokens of an llm.c token shard (256 int32 header, then the tokens: uint16, or uint32 when
    the magic is 20240801, llm.c's Llama 3 shards)."""
    import numpy as np
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        dtype = "<u4" if header[0] == 20240801 else "<u2"
        return np.frombuffer(f.read(), dtype=dtype)[: header[2]].astype(np.int64)


def tokenize_ids(vocab, prefix, files, env=None):
    """`zerotrain tokenize --vocab VOCAB FILES -o PREFIX --val-fraction 0`: its ids, or its error's tail."""
    p = run(["tokenize", "--vocab", vocab] + list(files) + ["-o", prefix, "--val-fraction", "0"], env=env)
    if p.returncode != 0:
        return p.stderr[-400:]
    return read_shard(prefix + "_train_000000.bin").tolist()


def first_diff(ours, theirs, who):
    """Where two id lists first differ, for a FAIL line (OURS may be an error message instead)."""
    if isinstance(ours, str):
        return ours
    k = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
    return f"first difference at {k}: zerotrain {ours[k:k + 6]} {who} {theirs[k:k + 6]} (lengths {len(ours)} {len(theirs)})"


def bytes_to_unicode():
    """GPT-2's byte -> printable character alphabet (its encoder.json spells token bytes with it)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tiktoken_gpt2():
    """tiktoken's GPT-2 encoding built offline from data/gpt2 (encoder.json gives each token's bytes
    and its rank, which for GPT-2 is its id); call after use_pypi_env("tiktoken")."""
    import json
    import tiktoken
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    with open(os.path.join(ROOT, "data", "gpt2", "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    ranks = {bytes(byte_of[c] for c in tok): i for tok, i in encoder.items() if tok != "<|endoftext|>"}
    return tiktoken.Encoding(name="gpt2_from_data_gpt2",
                             pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                             mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


class Tmpfs:
    """A tmpfs mounted (as root) on a new directory under parent for a `with` block; unmounted and
    removed at its end, also when the test fails."""
    def __init__(self, opts, parent=None):
        self.path = tempfile.mkdtemp(dir=parent, prefix="mnt_")
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", self.path], check=True)

    def remount(self, opts):
        subprocess.run(["mount", "-o", "remount," + opts, self.path], check=True)

    def used(self):
        s = os.statvfs(self.path)
        return (s.f_blocks - s.f_bfree) * s.f_frsize, s.f_files - s.f_ffree

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run(["umount", "-l", self.path], check=False)
        shutil.rmtree(self.path, ignore_errors=True)


def write_synthetic_shard(path, n_tokens, vocab=256, seed=1):
    """An llm.c token shard of n_tokens random tokens below vocab (a 1 Mi-token random block repeated:
    written at disk speed, not Python's)."""
    import random
    import struct
    rng = random.Random(seed)
    block_tokens = min(n_tokens, 1 << 20)
    block = struct.pack(f"<{block_tokens}H", *(rng.randrange(vocab) for _ in range(block_tokens)))
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n_tokens, *([0] * 253)))
        left = n_tokens
        while left:
            k = min(left, block_tokens)
            f.write(block[: 2 * k])
            left -= k


# Runs each rank under a Python parent that waits for it and prints its peak resident set: the rusage
# of a waited-for child is the kernel's high-water mark of its RSS (VmHWM in /proc/PID/status), read
# after the whole run, so no sampling can miss the peak.
RANK_PEAK = ('import os, resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); '
             'os.write(2, ("rank-peak %s %d %d\\n" % (os.environ.get("OMPI_COMM_WORLD_RANK", "0"), '
             'resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)).encode()); sys.exit(rc)')  # one write: one line


# the run whose per-rank memory docs/configuration.md quotes (make bench's test/bench_data.py, and
# test/t_data_shards.py, which holds docs/configuration.md to it): 2 ranks, seq_len 1024, a few steps
DATA_BENCH_SETS = ["model={n_layer: 2, n_head: 2, n_embd: 64, n_positions: 1024, vocab_size: 256}", "data.seq_len=1024",
                   "data.val=", "train_iters=3", "train_batch_size=4", "train_micro_batch_size_per_gpu=2"]


def train_peak_rss(config, sets, ranks=2, timeout=600):
    """Trains under mpirun; returns (CompletedProcess, {rank: (peak RSS in KiB, exit status)})."""
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", sys.executable, "-c", RANK_PEAK, BIN,
           "train", config]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout)
    peaks = {}
    for line in p.stderr.splitlines():
        if line.startswith("rank-peak "):
            _, r, kib, rc = line.split()
            peaks[int(r)] = (int(kib), int(rc))
    return p, peaks


# ---- runs whose every rank's exit status is recorded (fault tests: t_checkpoint_faults, t_guard, t_disk_full)

RANKED_TIMEOUT = 90  # seconds per run: a hang fails the case instead of the suite


def ranked_cmd(args, ranks):
    # every rank's exit status is printed by its wrapper; mpirun waits for all of them
    wrapped = 'b=$1; shift; "$b" "$@"; s=$?; echo "rank-exit $OMPI_COMM_WORLD_RANK $s" >&2; exit $s'
    return ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
            "--mca", "orte_abort_on_non_zero_status", "0", "sh", "-c", wrapped, "sh", BIN] + list(args)


class RankedRun:
    """A finished (or timed-out) run: rc, stdout, stderr, rank_status {rank: status}, timed_out,
    errors (its `zerotrain: error:` lines)."""

    def __init__(self, rc, out, err, timed_out):
        self.rc, self.stdout, self.stderr, self.timed_out = rc, out, err, timed_out
        self.rank_status = {}
        for line in err.splitlines():
            if line.startswith("rank-exit "):
                _, r, s = line.split()
                self.rank_status[int(r)] = int(s)
        self.errors = [line for line in err.splitlines() if line.startswith("zerotrain: error:")]

    def why(self):
        return f"rc {self.rc}, timed out {self.timed_out}, ranks {self.rank_status}, stderr: {self.stderr[-1200:]}"


started = []  # every ranked run a test starts: none may outlive it (kill what is left with kill_tree)


def start_ranked(args, ranks=2, env=None):
    """Starts zerotrain ARGS on RANKS ranks (0: one process, no mpirun), ENV added to the
    environment; returns the Popen."""
    started.append(subprocess.Popen(ranked_cmd(args, ranks) if ranks else [BIN] + list(args), cwd=ROOT,
                                    env=dict(ENV, **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True))
    return started[-1]


def kill_tree(pid):
    """SIGKILL pid and its descendants (mpirun may put the ranks in process groups of their own)"""
    import signal
    children = {}
    for d in os.listdir("/proc"):
        try:
            ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        except (ValueError, OSError, IndexError):
            pass
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += children.get(p, [])
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def finish_ranked(p, timeout=RANKED_TIMEOUT):
    """Waits for a start_ranked run (killing it after TIMEOUT seconds); returns its RankedRun."""
    try:
        out, err = p.communicate(timeout=timeout)
        return RankedRun(p.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        kill_tree(p.pid)
        out, err = p.communicate()
        return RankedRun(p.returncode, out, err, True)


def kill_started():
    """Kills every ranked run still going (a test's `finally`)."""
    for p in started:
        if p.poll() is None:
            kill_tree(p.pid)


def wait_until(cond, proc=None, timeout=RANKED_TIMEOUT):
    """cond()'s first truthy value, polled until it comes, PROC (a Popen) ends or TIMEOUT passes
    (a hang fails the case, not the suite); else None. A state waited on, not a clock."""
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            return cond() or None
        time.sleep(0.02)
    return None


def wait_for_files(paths, proc=None):
    """True once every one of PATHS exists (wait_until)"""
    return bool(wait_until(lambda: all(os.path.exists(p) for p in paths), proc))


def wait_for_text(path, text, proc=None):
    """True once file PATH holds TEXT (wait_until)"""
    return bool(wait_until(lambda: text in read_text(path), proc))


def can_mount_tmpfs(parent):
    """whether this process may mount a tmpfs (root)"""
    try:
        with Tmpfs("size=64k", parent):
            return True
    except (subprocess.CalledProcessError, OSError):
        return False


def clean_up(tmp):
    """a test's `finally`: kills the runs still going, unmounts what it mounted under TMP, removes TMP"""
    kill_started()
    for line in open("/proc/mounts"):
        if line.split()[1].startswith(tmp):
            subprocess.run(["umount", "-l", line.split()[1]], check=False)
    shutil.rmtree(tmp, ignore_errors=True)


def info(path):
    return finish_ranked(start_ranked(["info", path], ranks=0))


def failed_together(r, want, name, ranks=2):
    """every rank non-zero (no crash), in time, one error line containing WANT"""
    ok = (not r.timed_out and len(r.rank_status) == ranks
          and all(s not in (0, 139) and s < 128 for s in r.rank_status.values())
          and len(r.errors) == 1 and want in r.errors[0])
    if r.errors:
        print(f"    {name}: {r.errors[0]}")
    return check(ok, name, f"want one error line with '{want}'; {r.errors}; {r.why()}")


def still_loadable(ckdir, step, name):
    """`zerotrain info CKDIR` verifies every checksum and names STEP (its `latest`)"""
    r = info(ckdir)
    return check(r.rc == 0 and f"step {step}," in r.stdout and "integrity: OK" in r.stdout, name,
                 r.stdout[-600:] + r.stderr[-600:])



def weights_of(checkpoint, scratch):
    """The fp32 weights of CHECKPOINT (a checkpoint.dir, its `latest`, or a step directory) as the
    bytes of its safetensors export under SCRATCH: equal bytes are equal weights, bit for bit."""
    out = os.path.join(scratch, "export_" + os.path.basename(os.path.normpath(checkpoint)) + f"_{len(os.listdir(scratch))}")
    p = run(["export", checkpoint, "-o", out, "--format", "safetensors", "--dtype", "fp32"], timeout=300)
    if p.returncode != 0:
        return None
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        data = f.read()
    shutil.rmtree(out, ignore_errors=True)
    return data


def rank_pids(marker):
    """pids of the `zerotrain train` ranks whose command line contains marker (not the launchers)"""
    pids = []
    for pid in processes_with(marker):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"zerotrain") and argv[1] == b"train":
            pids.append(pid)
    return sorted(pids)
