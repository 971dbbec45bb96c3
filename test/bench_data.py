"""bench_data.py — a rank's memory against the corpus size (issue 25 item 9): 2 ranks train a few steps
of a small GPT-2 at seq_len 1024 on one synthetic shard of ~10 MB and one of ~2 GB of tokens, and the
peak resident set of each rank (VmHWM, as the kernel's rusage of the waited rank gives it) is printed
per size. The tokens stay in the files (read window by window as used); what grows with the corpus
is the window order, 4 bytes per window of seq_len tokens, printed beside. The top size is lowered
when the disk has less than 3 times it free (df first)."""
import os
import shutil
import sys
import tempfile

import ztlib

T = 1024
SETS = ztlib.DATA_BENCH_SETS
MB = 1000 * 1000
where = os.environ.get("ZT_BENCH_DIR", os.path.join(ztlib.ROOT, "build"))
tmp = tempfile.mkdtemp(prefix="bench_data_", dir=where)
free = shutil.disk_usage(tmp).free
sizes = [10 * MB, 2000 * MB]
if free < 3 * sizes[-1]:
    sizes[-1] = max(100 * MB, free // 3 // MB * MB)
    print(f"  only {free / MB:.0f} MB free in {where}: the top size is {sizes[-1] / MB:.0f} MB")
rows = []
for size in sizes:
    path = os.path.join(tmp, "corpus.bin")
    ztlib.write_synthetic_shard(path, size // 2)
    p, peak = ztlib.train_peak_rss("configs/tiny.yaml", SETS + [f"data.train={path}"])
    os.unlink(path)
    if p.returncode or len(peak) != 2:
        print(f"  FAILED on {size / MB:.0f} MB: rc {p.returncode}\n{p.stderr[-1500:]}")
        sys.exit(1)
    order = size // 2 // T * 4
    rows.append((size, [peak[r][0] / 1024 for r in sorted(peak)], order))
print(f"data shards: peak RSS per rank (2 ranks, seq_len {T}, 3 steps) against the corpus, in {where}")
for size, ranks, order in rows:
    print(f"  {size / MB:7.0f} MB of tokens ({size // 2 / 1e6:7.1f} M): " +
          ", ".join(f"rank {r} {mib:6.1f} MiB" for r, mib in enumerate(ranks)) +
          f"   (window order {order / 2**20:.1f} MiB)")
grown = max(rows[-1][1]) - max(rows[0][1])
print(f"  {rows[-1][0] / rows[0][0]:.0f}x the corpus: the peak grew by {grown:.1f} MiB "
      f"({100 * grown * 2**20 / (rows[-1][0] - rows[0][0]):.2f}% of the added tokens)")
shutil.rmtree(tmp, ignore_errors=True)
