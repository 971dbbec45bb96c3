/* bench_swap.c — NVMe swap throughput (src/io/swap.c: io_uring, aio.block_size 1 MiB, queue depth 8)
 * against this disk's sequential bandwidth measured in the same run: pwrite/pread of 4 MiB and of 32
 * MiB blocks (the better of the two: which suits a drive varies), one at a time (the kernel cuts
 * each into device requests that are in flight together), on a file
 * in the same directory reserved beforehand as the swap file is, with the same bytes (random: virtual
 * disks compress or deduplicate regular data). Rounds alternate baseline and swap; the best of each
 * is reported, since a shared VM disk is noisy.
 *
 * The page cache: where the directory's file system takes O_DIRECT, both the baseline and the swap
 * use it, so no byte passes through the cache, and a write is timed until the device has taken it
 * (no fdatasync: a swap file need not survive a crash, and a flush of the drive's cache is not
 * what the swap waits for). Where it does not, both run buffered: every write
 * is timed up to its fdatasync and the file is dropped from the cache (POSIX_FADV_DONTNEED) before
 * it is read, which the kernel may honour only in part. The output says which.
 * The swap's checksums: every 4 KiB block is summed with CRC32C when its piece completes (included
 * in the swap's times above); the sum's own speed is measured on the same bytes in memory, in the
 * swap's way (three blocks interleaved with the SSE4.2 instruction), one block at a time, and with the
 * portable table version, and set against the swap's throughput: the share of a swap transfer's time
 * the summing costs on the thread that reaps it.
 * Usage: bench_swap [DIR] (default $ZT_BENCH_DIR, else build/); 1 GiB, 256 MiB when the disk holds
 * less than 8 GiB free. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "bench_io.h"
#include "io/swap.h"
#include "util/crc32c.h"

#define ROUNDS 3


/* sequential pwrite (+ fdatasync) then pread of buf's bytes; seconds of each, -1 on failure */
static int baseline(const char *path, int direct, const char *buf, size_t bytes, size_t block, double *tw, double *tr) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0600);
    if (fd < 0) { perror(path); return -1; }
    if (posix_fallocate(fd, 0, (off_t)bytes)) { perror("posix_fallocate"); return -1; } /* as the swap's open does */
    double t0 = zt_now();
    for (size_t at = 0; at < bytes; at += block)
        if (pwrite(fd, buf + at, bytes - at < block ? bytes - at : block, (off_t)at) <= 0) {
            perror("pwrite");
            return -1;
        }
    if (!direct) fdatasync(fd); /* O_DIRECT: complete at the device, as the swap's writes (neither flushes its cache) */
    *tw = zt_now() - t0;
    fdatasync(fd);
    if (!direct) drop_cache(path);
    char *in = zt_swap_buffer_alloc(block);
    t0 = zt_now();
    for (size_t at = 0; at < bytes; at += block)
        if (pread(fd, in, bytes - at < block ? bytes - at : block, (off_t)at) <= 0) {
            perror("pread");
            return -1;
        }
    *tr = zt_now() - t0;
    zt_swap_buffer_free(in);
    close(fd);
    unlink(path);
    return 0;
}

/* one write request of all the bytes, then one read; seconds of each, -1 on failure */
static int swap_round(const char *dir, char *buf, size_t bytes, double *tw, double *tr, int *direct) {
    zt_swap_opts o = {.block_size = (size_t)1 << 20, .queue_depth = 8, .overlap_events = 1, .preallocate = 1};
    zt_err err = {{0}};
    zt_swap *s = zt_swap_open(dir, "bench", 0, bytes, &o, &err);
    if (!s) { zt_print_error(&err); return -1; }
    *direct = zt_swap_is_direct(s);
    double t0 = zt_now();
    int rc = zt_swap_wait(s, zt_swap_write(s, 0, buf, bytes), &err);
    if (!*direct) drop_cache(zt_swap_path(s)); /* fdatasync, within the timing as for the baseline */
    *tw = zt_now() - t0;
    t0 = zt_now();
    if (!rc) rc = zt_swap_wait(s, zt_swap_read(s, 0, buf, bytes), &err);
    *tr = zt_now() - t0;
    zt_swap_stats st = zt_swap_get_stats(s);
    if (rc) zt_print_error(&err);
    else if (st.bytes_written != bytes || st.bytes_read != bytes) rc = -1, fprintf(stderr, "swap counters wrong\n");
    zt_swap_close(s, 1);
    return rc;
}

/* GiB/s of CRC32C over buf's bytes in 4 KiB blocks: mode 0 portable, 1 the instruction one block at a time,
 * 2 the instruction three blocks interleaved (what the swap runs); best of ROUNDS */
static double crc_rate(const char *buf, size_t bytes, int mode) {
    size_t nb = bytes / ZT_SWAP_ALIGN;
    uint32_t *sums = zt_xmalloc(nb * sizeof *sums), acc = 0;
    double best = 1e9;
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = zt_now();
        if (mode == 2) zt_crc32c_blocks_with(1, buf, ZT_SWAP_ALIGN, nb, sums);
        else if (mode == 0) zt_crc32c_blocks_with(0, buf, ZT_SWAP_ALIGN, nb, sums);
        else for (size_t b = 0; b < nb; b++) sums[b] = zt_crc32c_hw(0, buf + b * ZT_SWAP_ALIGN, ZT_SWAP_ALIGN);
        double t = zt_now() - t0;
        best = t < best ? t : best;
        acc ^= sums[nb / 2];
    }
    free(sums);
    if (acc == 0x12345678u) printf(" "); /* keeps the sums live */
    return (double)bytes / (double)(1 << 30) / best;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : getenv("ZT_BENCH_DIR") ? getenv("ZT_BENCH_DIR") : "build";
    struct statvfs vfs;
    if (statvfs(dir, &vfs)) { perror(dir); return 1; }
    double free_gib = (double)vfs.f_bavail * (double)vfs.f_frsize / (double)(1 << 30);
    size_t bytes = free_gib >= 8 ? (size_t)1 << 30 : (size_t)256 << 20;
    char path[1200];
    snprintf(path, sizeof path, "%s/bench_swap-baseline-%ld.bin", dir, (long)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
    int direct = fd >= 0;
    if (fd >= 0) close(fd);

    char *buf = zt_swap_buffer_alloc(bytes);
    zt_rng rng;
    zt_rng_seed(&rng, 1);
    for (size_t i = 0; i < bytes / 8; i++) ((uint64_t *)buf)[i] = zt_rng_u64(&rng);

    
    double bw = 1e9, br = 1e9, sw = 1e9, sr = 1e9;
    int swap_direct = 0;
    for (int round = 0; round < ROUNDS; round++) {
        double w, r, w32, r32, w2, r2;
        if (baseline(path, direct, buf, bytes, (size_t)4 << 20, &w, &r) ||
            baseline(path, direct, buf, bytes, (size_t)32 << 20, &w32, &r32) ||
            swap_round(dir, buf, bytes, &w2, &r2, &swap_direct))
            return 1;
        printf("  round %d: disk write %.2f s (4 MiB blocks) %.2f s (32 MiB), read %.2f s %.2f s; swap write %.2f s, read %.2f s\n",
               round + 1, w, w32, r, r32, w2, r2);
        w = w32 < w ? w32 : w;
        r = r32 < r ? r32 : r;
        bw = w < bw ? w : bw;
        br = r < br ? r : br;
        sw = w2 < sw ? w2 : sw;
        sr = r2 < sr ? r2 : sr;
    }
    double gib = (double)bytes / (double)(1 << 30);
    printf("NVMe swap, %.2f GiB in %s (best of %d); disk baseline %s, swap %s\n", gib, dir, ROUNDS,
           direct ? "O_DIRECT pwrite/pread of 4 or 32 MiB blocks" : "buffered pwrite+fdatasync/pread, cache dropped (advisory)",
           swap_direct ? "O_DIRECT" : "buffered (no O_DIRECT here): write timed to fdatasync, cache dropped before read");
    printf("  disk baseline: write %.2f GiB/s, read %.2f GiB/s\n", gib / bw, gib / br);
    printf("  swap (block 1 MiB, queue depth 8): write %.2f GiB/s = %.0f%% of the disk, read %.2f GiB/s = %.0f%% (goal >= 70%%)\n",
           gib / sw, 100.0 * bw / sw, gib / sr, 100.0 * br / sr);
    int hw = zt_crc32c_hw_available();
    double crc_swap = crc_rate(buf, bytes, hw ? 2 : 0), crc_one = hw ? crc_rate(buf, bytes, 1) : 0,
           crc_sw = crc_rate(buf, bytes, 0);
    printf("  CRC32C of every 4 KiB block (one core, in memory): %.2f GiB/s as the swap sums (%s)",
           crc_swap, hw ? "SSE4.2, 3 blocks interleaved" : "no SSE4.2 here: the portable version");
    if (hw) printf(", %.2f GiB/s one block at a time", crc_one);
    printf(", %.2f GiB/s portable\n", crc_sw);
    printf("  checksum cost against the swap: %.1f%% of a write's time, %.1f%% of a read's (swap GiB/s / CRC GiB/s)\n",
           100.0 * gib / sw / crc_swap, 100.0 * gib / sr / crc_swap);
    zt_swap_buffer_free(buf);
    return 0;
}
