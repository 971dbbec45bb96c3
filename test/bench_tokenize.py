"""bench_tokenize.py — `zerotrain tokenize` against the input's size and the cores (issue 48 item 4).
A corpus is generated (tiny Shakespeare, README.md, the sources and a mixed-script text, repeated
to ZT_BENCH_TOKENIZE_MB, default 1000 MB; lowered when the disk has less than 3 times it free) and
tokenized with -j 1 and -j CORES (the default --val-fraction 0.1: the ids go through the spool).
For each: tokens/s over the whole command (read, encode, write the shards) and the peak resident
set (the kernel's rusage of the waited process: its high-water mark, no sampling). Then tiktoken's
encode_ordinary_batch on the same text in 1 MiB pieces cut after a newline, with 1 and CORES
threads, timed over the encoding only (the text already decoded in memory, a batch of 4 * CORES
pieces at a time; its count can differ by a few tokens where a newline run is cut). Goals: the peak stays under 256 MiB whatever the input; -j CORES reaches
0.8 * CORES times the -j 1 rate (on a machine whose cores are not busy with other work)."""
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import ztlib

ztlib.use_pypi_env("tiktoken")

MB = 1000 * 1000
cores = os.cpu_count() or 1
where = os.environ.get("ZT_BENCH_DIR", os.path.join(ztlib.ROOT, "build"))
size = int(os.environ.get("ZT_BENCH_TOKENIZE_MB", "1000")) * MB
tmp = tempfile.mkdtemp(prefix="bench_tokenize_", dir=where)
free = shutil.disk_usage(tmp).free
if free < 3 * size:
    size = max(50 * MB, free // 3 // MB * MB)
    print(f"  only {free / MB:.0f} MB free in {where}: the corpus is {size / MB:.0f} MB")

corpus = os.environ.get("ZT_BENCH_TOKENIZE_FILE")  # an existing text instead of the generated one
baseline = os.environ.get("ZT_BENCH_TOKENIZE_BASELINE")  # another zerotrain (say main's) run the same way, no -j
parts = [open(os.path.join(ztlib.ROOT, "data", "tinyshakespeare.txt"), "rb").read(),
         open(os.path.join(ztlib.ROOT, "README.md"), "rb").read()]
for d in sorted(os.listdir(os.path.join(ztlib.ROOT, "src"))):
    folder = os.path.join(ztlib.ROOT, "src", d)
    for f in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        parts.append(open(os.path.join(folder, f), "rb").read())
parts.append(("Hello world! It's 2024 — naïve café, 東京タワーへ行きました。 Здравствуйте, мир; مرحبا بالعالم "
              "नमस्ते दुनिया 🎉🚀 ١٢٣ \u00a0\u3000x\n\n").encode() * 4000)
unit = b"\n".join(parts)
if not corpus:
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "wb") as f:
        for _ in range(max(1, size // len(unit))):
            f.write(unit)
size = os.path.getsize(corpus)


def run_zerotrain(threads, binary=ztlib.BIN):
    t0 = time.time()
    p = subprocess.Popen([binary, "tokenize", "--vocab", os.path.join(ztlib.ROOT, "data", "gpt2"), corpus, "-o",
                          os.path.join(tmp, "out")] + (["-j", str(threads)] if threads else []),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.time() - t0
    err = p.stderr.read()
    if status:
        print(f"  FAILED: zerotrain tokenize -j {threads}: {err[-800:]}")
        sys.exit(1)
    n = 0
    for f in os.listdir(tmp):
        if f.startswith("out_"):
            with open(os.path.join(tmp, f), "rb") as sh:
                n += struct.unpack("<3i", sh.read(12))[2]  # the header's token count
            os.unlink(os.path.join(tmp, f))
    return n, dt, usage.ru_maxrss / 1024


print(f"tokenize: {size / MB:.0f} MB of text ({corpus}), {cores} cores")
if baseline:
    n, dt, peak = run_zerotrain(0, baseline)
    print(f"  {baseline} tokenize: {n} tokens in {dt:.1f} s, {n / dt / 1e6:.2f} M tokens/s, peak RSS {peak:.0f} MiB")
zt = {}
for threads in sorted({1, cores}):
    n, dt, peak = zt[threads] = run_zerotrain(threads)
    print(f"  zerotrain tokenize -j {threads}: {n} tokens in {dt:.1f} s, {n / dt / 1e6:.2f} M tokens/s, "
          f"peak RSS {peak:.0f} MiB (goal <= 256 MiB)")

enc = ztlib.tiktoken_gpt2()
pieces, start, raw = [], 0, open(corpus, "rb").read()
while start < len(raw):
    end = raw.find(b"\n", start + (1 << 20))
    end = len(raw) if end < 0 else end + 1
    pieces.append(raw[start:end].decode("utf-8"))
    start = end
del raw
for threads in sorted({1, cores}):
    n, dt, batch = 0, 0.0, 4 * threads
    for i in range(0, len(pieces), batch):
        t0 = time.perf_counter()
        ids = enc.encode_ordinary_batch(pieces[i:i + batch], num_threads=threads)
        dt += time.perf_counter() - t0
        n += sum(map(len, ids))
    print(f"  tiktoken encode_ordinary_batch, {threads} threads: {n} tokens in {dt:.1f} s, {n / dt / 1e6:.2f} M tokens/s"
          f" (zerotrain -j {threads}: {zt[threads][0] / zt[threads][1] / (n / dt):.2f}x)")
if cores > 1:
    one, many = zt[1][0] / zt[1][1], zt[cores][0] / zt[cores][1]
    print(f"tokenize: -j {cores} is {many / one:.2f}x -j 1 (goal >= {0.8 * cores:.1f}x); "
          f"peak RSS {max(p for _, _, p in zt.values()):.0f} MiB on {size / MB:.0f} MB (goal <= 256 MiB)")
print(f"  (this process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, the text in memory)")
shutil.rmtree(tmp, ignore_errors=True)
