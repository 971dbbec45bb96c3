"""t_blas_core.py — every command that computes runs on the widest OpenBLAS kernels the CPU has
(src/backend/blas_core.h), on whatever CPU the test runs on: a run that starts on a fallback core
ends up on the chosen one, alone and on every rank under mpirun, for train, eval, sample and
selftest; a user's OPENBLAS_CORETYPE is kept; the chosen run's losses are bit for bit those of a run
the user put on the same kernels. The fallback is real: ZEROTRAIN_INJECT_BLAS_FALLBACK=1 makes
OPENBLAS_CORETYPE=Prescott count as OpenBLAS's own choice, so the process really loads the SSE3
kernels first. OPENBLAS_VERBOSE=2 makes the library itself print "Core: NAME" each time it loads:
the re-executed program is a second load."""
import os
import re
import tempfile

import ztlib

flags = set()
vendor = ""
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
        if line.startswith("vendor_id") and not vendor:
            vendor = line.split(":", 1)[1].strip()
# the best core this CPU runs, by the rule blas_core.c states (written out here independently)
if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags:
    want = "SkylakeX"
elif {"avx2", "fma"} <= flags:
    want = "Zen" if vendor == "AuthenticAMD" else "Haswell"
elif "avx" in flags:
    want = "Sandybridge"
else:
    want = None

VERBOSE = {"OPENBLAS_VERBOSE": "2"}
FALLBACK = dict(VERBOSE, OPENBLAS_CORETYPE="Prescott", ZEROTRAIN_INJECT_BLAS_FALLBACK="1")
tiny = os.path.join(ztlib.ROOT, "configs", "tiny.yaml")
ztlib.ensure_shakespeare()
tmp = tempfile.mkdtemp()


def cores(p):
    """the cores OpenBLAS loaded with, in order (every process, every load)"""
    return re.findall(r"^Core: (\S+)$", p.stdout + p.stderr, re.M)


def kernel_line(p):
    m = re.search(r"^(?:selftest: )?(cpu kernels: .*)$", p.stdout + p.stderr, re.M)
    return m.group(1) if m else ""


def train(name, env, ranks=0, sets=()):
    metrics = os.path.join(tmp, name + ".jsonl")
    args = ["train", tiny, "--set", f"metrics_file={metrics}", "--set", "train_iters=6"]
    for s in sets:
        args += ["--set", s]
    p = ztlib.run(args, ranks=ranks, env=env, timeout=180)
    return p, [r["loss"] for r in ztlib.read_metrics(metrics)]


# no variable set: the kernels run are as wide as the CPU (OpenBLAS's choice, or zerotrain's)
p, _ = train("plain", VERBOSE)
m = re.match(r"cpu kernels: OpenBLAS \S+ (\S+) \((.+?)\) on an (.+?) CPU, ", kernel_line(p))
ztlib.check(p.returncode == 0 and m and m.group(2) == m.group(3), "train_runs_on_kernels_as_wide_as_the_cpu",
            kernel_line(p) or p.stderr[-600:])

if want is None:
    print("SKIP blas core choice: this CPU has no SIMD wider than SSE, nothing to choose")
    ztlib.finish()

# a run that starts on the fallback ends on the chosen core, and says so first
ck = os.path.join(tmp, "ck")
p, chosen_losses = train("fallback", FALLBACK, sets=[f"checkpoint.dir={ck}"])
ztlib.check(p.returncode == 0 and cores(p) == ["Prescott", want], f"fallback_replaced_by_{want}",
            f"cores loaded {cores(p)}, rc {p.returncode}: {p.stderr[-600:]}")
first = [ln for ln in p.stdout.splitlines() if not ln.startswith("Core:")][:1]
ztlib.check(first == [kernel_line(p)] and f"{want} (" in first[0] and "chosen by zerotrain: OpenBLAS took Prescott" in first[0],
            "log_starts_with_the_kernels_and_why", f"{first}")

# the same kernels set by the user give the same losses, bit for bit
p, user_losses = train("user_same", dict(VERBOSE, OPENBLAS_CORETYPE=want))
ztlib.check(p.returncode == 0 and cores(p) == [want] and len(chosen_losses) == 6 and chosen_losses == user_losses,
            "chosen_kernels_losses_bit_identical_to_the_users_same_choice", f"{chosen_losses} vs {user_losses}")

# a user's OPENBLAS_CORETYPE wins, even a slow one: no re-exec
p, _ = train("user_prescott", dict(VERBOSE, OPENBLAS_CORETYPE="Prescott"))
ztlib.check(p.returncode == 0 and cores(p) == ["Prescott"] and "set by OPENBLAS_CORETYPE=Prescott" in kernel_line(p),
            "users_coretype_kept", f"cores {cores(p)}; {kernel_line(p)}")

# every rank under mpirun chooses before MPI_Init
p, _ = train("ranks", FALLBACK, ranks=2, sets=["zero_optimization.stage=2"])
c = cores(p)
ztlib.check(p.returncode == 0 and c.count("Prescott") == 2 and c.count(want) == 2 and len(c) == 4,
            f"every_rank_replaces_the_fallback_with_{want}", f"cores {c}, rc {p.returncode}: {p.stderr[-600:]}")

# the other commands that compute
val = ztlib.ensure_shakespeare() + "_val.bin"
runs = {
    "eval": ["eval", ck, "--data", val, "--batch-size", "2", "--seq-len", "16", "--batches", "2"],
    "sample": ["sample", ck, "--prompt", "Hello", "--max-tokens", "5", "--seed", "1"],
    "selftest": ["selftest", "--device", "cpu"],
}
for cmd, args in runs.items():
    p = ztlib.run(args, env=FALLBACK, timeout=180)
    ztlib.check(p.returncode == 0 and cores(p) == ["Prescott", want] and "chosen by zerotrain" in kernel_line(p),
                f"{cmd}_replaces_the_fallback_with_{want}", f"cores {cores(p)}, rc {p.returncode}: {p.stderr[-600:]}")
    if cmd == "sample":
        ztlib.check(p.stdout.replace("Core: Prescott\n", "").replace(f"Core: {want}\n", "").startswith("Hello"),
                    "sample_text_alone_on_stdout", p.stdout[:300])
ztlib.finish()
