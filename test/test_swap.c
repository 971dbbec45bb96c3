/* test_swap.c — the NVMe swap files (src/io/swap.c): random data makes the round trip through the
 * file for every way a request is cut into pieces, lands at its byte offset (checked with a plain
 * pread), several tickets in flight are waited for out of order, the counters equal the bytes moved,
 * O_DIRECT is used on a real disk and left out where the file system refuses it (ramfs), the file
 * is removed or kept at close, and each way to fail gives its one-line error: a missing directory,
 * a file for a directory, a read-only one, too little space, and a real ENOSPC on a write.
 * The fault cases mount small tmpfs/ramfs file systems in a private mount namespace of this process
 * (root), so nothing stays mounted even if the test dies; without that they are skipped with a reason.
 * Integrity: CRC32C (util/crc32c.h), the portable and the SSE4.2 version, against published check
 * values and each other (any length, any alignment, chained, per block); a byte changed in the file
 * behind the swap's back (written or never written) fails the read with the file, the block's
 * offset and the context, and a rewrite of the block heals it.
 * Usage: test_swap [DISK_DIR] (default /var/tmp: a real disk, for the O_DIRECT cases). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/swap.h"
#include "util/crc32c.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static zt_rng rng;

static void fill_random(void *buf, size_t bytes) {
    uint64_t *p = buf;
    for (size_t i = 0; i < bytes / 8; i++) p[i] = zt_rng_u64(&rng);
}

static zt_swap_opts make_opts(size_t block, int depth) {
    return (zt_swap_opts){.block_size = block, .queue_depth = depth, .single_submit = 0, .overlap_events = 1,
                          .preallocate = 1};
}

/* 1 when the bytes at `offset` of the swap file, read with a plain descriptor, equal want */
static int file_holds(const zt_swap *s, size_t offset, const void *want, size_t bytes) {
    int fd = open(zt_swap_path(s), O_RDONLY);
    if (fd < 0) return 0;
    char *got = malloc(bytes);
    ssize_t n = pread(fd, got, bytes, (off_t)offset);
    int ok = n == (ssize_t)bytes && memcmp(got, want, bytes) == 0;
    free(got);
    close(fd);
    return ok;
}

/* write random bytes at offset, wait, read them back into another buffer, compare, and check the
 * counters and the file itself */
static void round_trip(const char *name, const char *dir, size_t bytes, size_t offset, zt_swap_opts o) {
    zt_err err = {{0}};
    zt_swap *s = zt_swap_open(dir, "test", 0, offset + bytes, &o, &err);
    if (!s) { CHECK(0, name, "open: %s", err.msg); return; }
    char *out = zt_swap_buffer_alloc(bytes), *in = zt_swap_buffer_alloc(bytes);
    fill_random(out, bytes);
    double t0 = zt_now();
    int tw = zt_swap_write(s, offset, out, bytes);
    int rc = zt_swap_wait(s, tw, &err);
    int tr = rc ? -1 : zt_swap_read(s, offset, in, bytes);
    if (!rc) rc = zt_swap_wait(s, tr, &err);
    double wall = zt_now() - t0;
    zt_swap_stats st = zt_swap_get_stats(s);
    CHECK(rc == 0 && tw >= 0 && tr >= 0 && tw != tr && memcmp(out, in, bytes) == 0 && file_holds(s, offset, out, bytes) &&
              st.bytes_written == bytes && st.bytes_read == bytes && st.write_seconds > 0 && st.read_seconds > 0 &&
              st.write_seconds + st.read_seconds <= wall,
          name, "rc %d (%s) tickets %d %d, data %s, file %s, counters %zu written %zu read (want %zu), busy %.6f + %.6f s of %.6f",
          rc, err.msg, tw, tr, memcmp(out, in, bytes) ? "differs" : "same", file_holds(s, offset, out, bytes) ? "ok" : "wrong",
          st.bytes_written, st.bytes_read, bytes, st.write_seconds, st.read_seconds, wall);
    zt_swap_close(s, 1);
    zt_swap_buffer_free(out);
    zt_swap_buffer_free(in);
}

static void test_round_trips(const char *dir) {
    round_trip("one_block", dir, 64 * KiB, 0, make_opts(64 * KiB, 8));
    round_trip("many_blocks", dir, 1 * MiB, 256 * KiB, make_opts(64 * KiB, 32));
    round_trip("more_blocks_than_depth", dir, 1 * MiB, 4 * KiB, make_opts(16 * KiB, 4));
    round_trip("block_not_dividing", dir, 200 * KiB, 8 * KiB, make_opts(12 * KiB, 3));
    round_trip("block_rounded_up", dir, 100 * KiB, 0, make_opts(10000, 2)); /* 10000 -> 12288 bytes */
    round_trip("depth_one", dir, 96 * KiB, 0, make_opts(8 * KiB, 1));
    zt_swap_opts o = make_opts(16 * KiB, 4);
    o.single_submit = 1;
    round_trip("single_submit", dir, 512 * KiB, 0, o);
    o = make_opts(16 * KiB, 4);
    o.overlap_events = 0;
    round_trip("no_overlap_events", dir, 512 * KiB, 0, o);
    o.preallocate = 0;
    round_trip("no_preallocate", dir, 256 * KiB, 0, o);
}

/* eight requests in flight at once, waited for out of order; then reads of the same regions, also
 * out of order; then one region overwritten and read back (no stale data) */
static void test_many_tickets(const char *dir) {
    enum { N = 8 };
    const size_t region = 96 * KiB;
    zt_err err = {{0}};
    zt_swap_opts o = make_opts(16 * KiB, 4);
    zt_swap *s = zt_swap_open(dir, "tickets", 3, N * region, &o, &err);
    if (!s) { CHECK(0, "tickets_out_of_order", "open: %s", err.msg); return; }
    char *out = zt_swap_buffer_alloc(N * region), *in = zt_swap_buffer_alloc(N * region);
    fill_random(out, N * region);
    int t[N], distinct = 1, rc = 0;
    static const int order_w[N] = {5, 1, 7, 0, 3, 6, 2, 4}, order_r[N] = {7, 6, 0, 2, 1, 5, 3, 4};
    for (int i = 0; i < N; i++) t[i] = zt_swap_write(s, i * region, out + i * region, region);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < i; j++) distinct &= t[i] >= 0 && t[i] != t[j];
    for (int i = 0; i < N; i++) rc |= zt_swap_wait(s, t[order_w[i]], &err);
    for (int i = 0; i < N; i++) t[i] = zt_swap_read(s, i * region, in + i * region, region);
    for (int i = 0; i < N; i++) rc |= zt_swap_wait(s, t[order_r[i]], &err);
    CHECK(rc == 0 && distinct && memcmp(out, in, N * region) == 0 && file_holds(s, 0, out, N * region),
          "tickets_out_of_order", "rc %d (%s), distinct %d, data %s", rc, err.msg, distinct,
          memcmp(out, in, N * region) ? "differs" : "same");

    /* read after write: overwrite region 2 while region 5 is being read, then read region 2 again */
    fill_random(out + 2 * region, region);
    memset(in, 0, N * region);
    int tw = zt_swap_write(s, 2 * region, out + 2 * region, region);
    int tr5 = zt_swap_read(s, 5 * region, in + 5 * region, region);
    rc = zt_swap_wait(s, tw, &err);
    int tr2 = zt_swap_read(s, 2 * region, in + 2 * region, region);
    rc |= zt_swap_wait_all(s, &err);
    CHECK(rc == 0 && tr5 >= 0 && tr2 >= 0 && memcmp(out + 2 * region, in + 2 * region, region) == 0 &&
              memcmp(out + 5 * region, in + 5 * region, region) == 0,
          "read_after_write", "rc %d (%s), region 2 %s, region 5 %s", rc, err.msg,
          memcmp(out + 2 * region, in + 2 * region, region) ? "stale" : "new",
          memcmp(out + 5 * region, in + 5 * region, region) ? "differs" : "same");
    zt_swap_stats st = zt_swap_get_stats(s);
    CHECK(st.bytes_written == (N + 1) * region && st.bytes_read == (N + 2) * region, "counters_many",
          "written %zu (want %zu), read %zu (want %zu)", st.bytes_written, (N + 1) * region, st.bytes_read,
          (N + 2) * region);
    zt_swap_close(s, 1);
    zt_swap_buffer_free(out);
    zt_swap_buffer_free(in);
}

/* can this directory's file system open a file with O_DIRECT? */
static int probe_direct(const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/zt-swap-probe-%ld", dir, (long)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
    int ok = fd >= 0;
    if (fd >= 0) close(fd);
    unlink(path);
    return ok;
}

static void test_direct_and_files(const char *disk_dir) {
    zt_err err = {{0}};
    zt_swap_opts o = make_opts(1 * MiB, 8);
    if (probe_direct(disk_dir)) {
        zt_swap *s = zt_swap_open(disk_dir, "direct", 0, 4 * MiB, &o, &err);
        CHECK(s && zt_swap_is_direct(s), "direct_on_disk", "%s", s ? "opened without O_DIRECT" : err.msg);
        zt_swap_close(s, 1);
    } else {
        printf("SKIP direct_on_disk: %s refuses O_DIRECT; pass a directory on a real disk as the argument\n", disk_dir);
    }
    /* tmpfs takes O_DIRECT since Linux 6.6 and refuses it before: the module must agree with the kernel */
    zt_swap *s = zt_swap_open("/dev/shm", "shm", 0, 1 * MiB, &o, &err);
    CHECK(s && zt_swap_is_direct(s) == probe_direct("/dev/shm"), "direct_matches_kernel_on_tmpfs", "%s",
          s ? "is_direct disagrees with open(O_DIRECT)" : err.msg);
    zt_swap_close(s, 1);
    round_trip("round_trip_tmpfs", "/dev/shm", 1 * MiB, 0, make_opts(64 * KiB, 8));

    /* the file's name, removal at close(…, 1) and its survival at close(…, 0) */
    s = zt_swap_open(disk_dir, "params", 7, 64 * KiB, &o, &err);
    if (!s) { CHECK(0, "file_name_and_size", "open: %s", err.msg); return; }
    char want[1200], path[1200];
    snprintf(want, sizeof want, "%s/zerotrain-swap-params-rank7-%ld.bin", disk_dir, (long)getpid());
    snprintf(path, sizeof path, "%s", zt_swap_path(s));
    struct stat st;
    CHECK(strcmp(path, want) == 0 && stat(path, &st) == 0 && st.st_size == 64 * (off_t)KiB, "file_name_and_size",
          "path %s (want %s), size %lld", path, want, stat(path, &st) ? -1LL : (long long)st.st_size);
    zt_swap_close(s, 1);
    CHECK(access(path, F_OK) != 0, "close_removes", "%s still exists", path);
    s = zt_swap_open(disk_dir, "params", 7, 64 * KiB, &o, &err);
    zt_swap_close(s, 0);
    CHECK(s && access(path, F_OK) == 0, "close_keeps", "%s", s ? "file gone" : err.msg);
    unlink(path);
}

static void test_dir_errors(const char *disk_dir) {
    zt_err err = {{0}};
    zt_swap_opts o = make_opts(1 * MiB, 8);
    zt_swap *s = zt_swap_open("/nonexistent-zt-swap", "optimizer", 0, 1 * MiB, &o, &err);
    CHECK(!s && strcmp(err.msg, "/nonexistent-zt-swap: No such file or directory") == 0, "error_missing_dir", "got '%s'",
          s ? "opened" : err.msg);
    zt_swap_close(s, 1);
    char file[1200];
    snprintf(file, sizeof file, "%s/zt-swap-notadir-%ld", disk_dir, (long)getpid());
    close(open(file, O_CREAT | O_WRONLY, 0600));
    s = zt_swap_open(file, "optimizer", 0, 1 * MiB, &o, &err);
    CHECK(!s && strncmp(err.msg, file, strlen(file)) == 0 && strstr(err.msg, ": not a directory"), "error_not_a_dir",
          "got '%s'", s ? "opened" : err.msg);
    zt_swap_close(s, 1);
    unlink(file);
}

/* ---- cases on small file systems mounted for the test ---- */

static char mnt_root[64];

/* mounts a fresh file system of `type` at mnt_root/name; NULL (and a SKIP line) when not allowed */
static const char *mount_fs(const char *name, const char *type, const char *options, unsigned long flags) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", mnt_root, name);
    mkdir(path, 0755);
    if (mount(type, path, type, flags, options)) {
        printf("SKIP %s: cannot mount a %s at %s (%s): needs root\n", name, type, path, strerror(errno));
        rmdir(path);
        return NULL;
    }
    return path;
}

static void unmount_fs(const char *path) {
    if (umount2(path, MNT_DETACH)) fprintf(stderr, "umount %s: %s\n", path, strerror(errno));
    rmdir(path);
}

static int dir_is_empty(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
    return system(cmd) == 0;
}

static void test_mounted_faults(void) {
    zt_err err = {{0}};
    zt_swap_opts o = make_opts(1 * MiB, 8);
    /* a private mount namespace: the mounts below vanish with this process, however it ends */
    if (unshare(CLONE_NEWNS) == 0) mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    snprintf(mnt_root, sizeof mnt_root, "/tmp/zt-test-swap-XXXXXX");
    if (!mkdtemp(mnt_root)) { printf("SKIP mounted_faults: mkdtemp: %s\n", strerror(errno)); return; }

    const char *ro = mount_fs("error_read_only_dir", "tmpfs", "size=1m", MS_RDONLY);
    if (ro) {
        zt_swap *s = zt_swap_open(ro, "optimizer", 0, 64 * KiB, &o, &err);
        CHECK(!s && strncmp(err.msg, ro, strlen(ro)) == 0 && strstr(err.msg, ": not writable: Read-only file system"),
              "error_read_only_dir", "got '%s'", s ? "opened" : err.msg);
        zt_swap_close(s, 1);
        unmount_fs(ro);
    }

    const char *small = mount_fs("error_too_little_space", "tmpfs", "size=1m", 0);
    if (small) {
        zt_swap *s = zt_swap_open(small, "optimizer", 0, 2 * MiB, &o, &err);
        char want[256];
        snprintf(want, sizeof want, "%s: needs 2.00 MiB for optimizer swap, 1.00 MiB free", small);
        CHECK(!s && strcmp(err.msg, want) == 0 && dir_is_empty(small), "error_too_little_space",
              "got '%s', want '%s'%s", s ? "opened" : err.msg, want, dir_is_empty(small) ? "" : ", a file was left");
        zt_swap_close(s, 1);
        s = zt_swap_open(small, "optimizer", 0, 1 * MiB, &o, &err);
        CHECK(s != NULL, "exactly_enough_space", "%s", err.msg);
        zt_swap_close(s, 1);

        /* a real ENOSPC: open 512 KiB without reserving it, let a filler take most of the space,
         * then the swap's write runs out of space in the kernel */
        o.preallocate = 0;
        s = zt_swap_open(small, "optimizer", 0, 512 * KiB, &o, &err);
        char filler[160];
        snprintf(filler, sizeof filler, "%s/filler", small);
        int fd = open(filler, O_CREAT | O_WRONLY, 0600);
        char *junk = zt_swap_buffer_alloc(700 * KiB);
        ssize_t put = fd >= 0 ? write(fd, junk, 700 * KiB) : -1;
        if (fd >= 0) close(fd);
        fill_random(junk, 512 * KiB);
        int t = s ? zt_swap_write(s, 0, junk, 512 * KiB) : -1;
        int rc = s ? zt_swap_wait(s, t, &err) : 0;
        snprintf(want, sizeof want, "%s: write of ", s ? zt_swap_path(s) : "");
        zt_swap_stats st = s ? zt_swap_get_stats(s) : (zt_swap_stats){0};
        CHECK(s && put == 700 * KiB && rc == -1 && strncmp(err.msg, want, strlen(want)) == 0 &&
                  strstr(err.msg, " failed: No space left on device") && st.bytes_written < 512 * KiB,
              "error_enospc_on_write", "open %s, filler %zd bytes, wait %d: '%s', %zu bytes written", s ? "ok" : err.msg,
              put, rc, err.msg, st.bytes_written);
        /* the swap is still usable once there is room again */
        unlink(filler);
        t = s ? zt_swap_write(s, 0, junk, 512 * KiB) : -1;
        rc = s ? zt_swap_wait_all(s, &err) : -1;
        CHECK(rc == 0 && file_holds(s, 0, junk, 512 * KiB), "write_after_enospc", "%s", rc ? err.msg : "data differs");
        zt_swap_close(s, 1);
        zt_swap_buffer_free(junk);
        CHECK(dir_is_empty(small), "enospc_leaves_no_file", "%s is not empty", small);
        unmount_fs(small);
    }

    /* ramfs refuses O_DIRECT (EINVAL), has no fallocate and reports no size: the fallbacks */
    const char *ram = mount_fs("ramfs_fallback", "ramfs", "", 0);
    if (ram) {
        o = make_opts(64 * KiB, 8);
        zt_swap *s = zt_swap_open(ram, "optimizer", 0, 1 * MiB, &o, &err);
        struct stat st;
        CHECK(s && !zt_swap_is_direct(s) && stat(zt_swap_path(s), &st) == 0 && st.st_blocks * 512 >= (off_t)MiB,
              "fallback_without_direct", "%s", !s ? err.msg : zt_swap_is_direct(s) ? "claims O_DIRECT" : "not preallocated");
        zt_swap_close(s, 1);
        round_trip("round_trip_ramfs", ram, 1 * MiB, 64 * KiB, o);
        unmount_fs(ram);
    }
    rmdir(mnt_root);
}

/* ---- CRC32C ---- */

static void test_crc32c(void) {
    /* published check values: RFC 3720 (iSCSI) B.4 and the CRC catalogue's "123456789" */
    static const struct { const char *name; unsigned char byte; size_t n; uint32_t want; } fills[] = {
        {"crc32c_32_zero_bytes", 0x00, 32, 0x8A9136AAu}, {"crc32c_32_ff_bytes", 0xff, 32, 0x62A8AB43u}};
    int hw = zt_crc32c_hw_available();
    for (int v = 0; v < 2; v++) {
        uint32_t (*f)(uint32_t, const void *, size_t) = v ? zt_crc32c_hw : zt_crc32c_sw;
        const char *which = v ? "hw" : "sw";
        char name[64];
        if (v && !hw) {
            printf("SKIP crc32c_hw: this CPU has no SSE4.2 (the portable version is used)\n");
            break;
        }
        snprintf(name, sizeof name, "crc32c_%s_check_value", which);
        CHECK(f(0, "123456789", 9) == 0xE3069283u, name, "got %08x", f(0, "123456789", 9));
        for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++) {
            unsigned char buf[32];
            memset(buf, fills[i].byte, sizeof buf);
            snprintf(name, sizeof name, "%s_%s", fills[i].name, which);
            CHECK(f(0, buf, fills[i].n) == fills[i].want, name, "got %08x, want %08x", f(0, buf, fills[i].n), fills[i].want);
        }
        unsigned char inc[32];
        for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
        snprintf(name, sizeof name, "crc32c_32_incrementing_bytes_%s", which);
        CHECK(f(0, inc, 32) == 0x46DD794Eu, name, "got %08x", f(0, inc, 32));
        snprintf(name, sizeof name, "crc32c_%s_chained", which);
        CHECK(f(f(0, "1234", 4), "56789", 5) == 0xE3069283u && f(0, "", 0) == 0, name, "differs");
    }
    /* the two versions agree on every length 0..300 at every alignment 0..7, and on 1 MiB chained
     * in uneven parts */
    enum { BIG = 1 << 20 };
    uint32_t (*hw_crc)(uint32_t, const void *, size_t) = hw ? zt_crc32c_hw : zt_crc32c_sw; /* no SIGILL without it */
    unsigned char *buf = malloc(BIG + 8);
    fill_random(buf, BIG + 8);
    int same = 1;
    for (size_t align = 0; align < 8; align++)
        for (size_t n = 0; n <= 300; n++) same &= hw_crc(0, buf + align, n) == zt_crc32c_sw(0, buf + align, n);
    uint32_t whole = zt_crc32c_sw(0, buf, BIG), parts = 0;
    for (size_t at = 0, k = 1; at < BIG; at += k, k = k * 3 + 1) parts = zt_crc32c(parts, buf + at, at + k > BIG ? BIG - at : k);
    CHECK(same && whole == hw_crc(0, buf, BIG) && parts == whole && zt_crc32c(0, buf, BIG) == whole,
          "crc32c_hw_and_sw_agree", "lengths/alignments %s, 1 MiB sw %08x hw %08x chained %08x", same ? "same" : "differ",
          whole, hw_crc(0, buf, BIG), parts);
    /* per block, as the swap sums its blocks: 3 interleaved at a time and the remainder */
    for (size_t nb = 1; nb <= 8; nb++) {
        uint32_t got_hw[8], got_sw[8];
        zt_crc32c_blocks_with(1, buf, 4096, nb, got_hw);
        zt_crc32c_blocks_with(0, buf, 4096, nb, got_sw);
        int ok = 1;
        for (size_t i = 0; i < nb; i++) ok &= got_hw[i] == got_sw[i] && got_sw[i] == zt_crc32c_sw(0, buf + i * 4096, 4096);
        char name[64];
        snprintf(name, sizeof name, "crc32c_blocks_%zu", nb);
        CHECK(ok, name, "a block's sum differs from its own CRC");
    }
    free(buf);
}

/* writes one byte of the swap file behind the swap's back (a plain descriptor: the kernel writes
 * the page cache back before the next O_DIRECT read of it) */
static void poke(const zt_swap *s, size_t at, unsigned char value) {
    int fd = open(zt_swap_path(s), O_WRONLY);
    if (fd < 0 || pwrite(fd, &value, 1, (off_t)at) != 1) perror("poke");
    if (fd >= 0) close(fd);
}

static void test_checksum_mismatch(const char *dir) {
    zt_err err = {{0}};
    zt_swap_opts o = make_opts(64 * KiB, 4);
    const size_t bytes = 256 * KiB;
    zt_swap *s = zt_swap_open(dir, "corrupt", 0, 2 * bytes, &o, &err);
    if (!s) { CHECK(0, "checksum_mismatch_detected", "open: %s", err.msg); return; }
    char *out = zt_swap_buffer_alloc(bytes), *in = zt_swap_buffer_alloc(bytes);
    fill_random(out, bytes);
    int rc = zt_swap_wait(s, zt_swap_write(s, 0, out, bytes), &err);
    rc |= zt_swap_wait(s, zt_swap_read(s, bytes, in, bytes), &err); /* never written: zeros, which check */
    CHECK(rc == 0 && in[0] == 0 && in[bytes - 1] == 0, "checksum_unwritten_reads_as_zeros", "rc %d: %s", rc, err.msg);
    CHECK(zt_swap_checksum_bytes(s) == 2 * bytes / 4096 * 4, "checksum_host_bytes", "%zu", zt_swap_checksum_bytes(s));

    zt_swap_set_context(s, "step 12");
    poke(s, 70000, (unsigned char)(out[70000] ^ 0x10)); /* in block 17 (69632..73727) */
    rc = zt_swap_wait(s, zt_swap_read(s, 0, in, bytes), &err);
    char want[1300];
    snprintf(want, sizeof want, "%s: checksum mismatch in 4096 bytes at byte 69632 (step 12): ", zt_swap_path(s));
    CHECK(rc == -1 && strncmp(err.msg, want, strlen(want)) == 0, "checksum_mismatch_detected",
          "rc %d, got '%s', want it to start '%s'", rc, err.msg, want);
    /* a read of other blocks only is fine; one that covers the bad block fails again */
    rc = zt_swap_wait(s, zt_swap_read(s, 73728, in, 64 * KiB), &err);
    int again = zt_swap_wait(s, zt_swap_read(s, 64 * KiB, in, 8 * KiB), &err);
    CHECK(rc == 0 && again == -1 && strstr(err.msg, "at byte 69632"), "checksum_only_the_bad_block", "rc %d %d: %s", rc,
          again, err.msg);
    /* the block written anew is whole again */
    rc = zt_swap_wait(s, zt_swap_write(s, 64 * KiB, out + 64 * KiB, 64 * KiB), &err);
    rc |= zt_swap_wait(s, zt_swap_read(s, 0, in, bytes), &err);
    CHECK(rc == 0 && memcmp(in, out, bytes) == 0, "checksum_rewrite_heals", "rc %d: %s", rc, err.msg);
    /* a byte in a never-written block */
    zt_swap_set_context(s, NULL);
    poke(s, bytes + 5000, 1);
    rc = zt_swap_wait(s, zt_swap_read(s, bytes, in, bytes), &err);
    snprintf(want, sizeof want, "%s: checksum mismatch in 4096 bytes at byte %zu: ", zt_swap_path(s), bytes + 4096);
    CHECK(rc == -1 && strncmp(err.msg, want, strlen(want)) == 0, "checksum_mismatch_in_unwritten_block",
          "rc %d, got '%s', want it to start '%s'", rc, err.msg, want);
    zt_swap_close(s, 1);
    zt_swap_buffer_free(out);
    zt_swap_buffer_free(in);
}

int main(int argc, char **argv) {
    const char *disk_dir = argc > 1 ? argv[1] : "/var/tmp";
    zt_rng_seed(&rng, 13);
    test_crc32c();
    test_checksum_mismatch(disk_dir);
    test_round_trips(disk_dir);
    test_many_tickets(disk_dir);
    test_direct_and_files(disk_dir);
    test_dir_errors(disk_dir);
    test_mounted_faults();
    return zt_check_exit();
}
