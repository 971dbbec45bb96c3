/* bench_io.h — what the disk benches (bench_checkpoint, bench_swap) share: reading a file back from
 * the disk, not from the page cache. */
#ifndef ZT_BENCH_IO_H
#define ZT_BENCH_IO_H

#include <fcntl.h>
#include <unistd.h>

/* writes the file's dirty pages out and drops it from the page cache */
static inline void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

#endif
