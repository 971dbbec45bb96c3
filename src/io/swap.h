/* swap.h — NVMe swap files for ZeRO-Infinity offload (zero_optimization.offload_optimizer /
 * offload_param with device: nvme). Owns one file per rank and purpose under nvme_path, its space
 * check and allocation at start, asynchronous reads and writes through io_uring (liburing) with
 * O_DIRECT where the file system allows it, the byte and time counters (and each finished request,
 * issue to completion, to the trace's observer of backend.h), and the file's removal at a clean end. It knows nothing of what is stored: the engine lays out its regions.
 *
 * Requests: offsets and lengths are multiples of ZT_SWAP_ALIGN and buffers come from
 * zt_swap_buffer_alloc (aligned for O_DIRECT). A request is split into aio.block_size pieces, at
 * most aio.queue_depth of them in flight; zt_swap_read / zt_swap_write return at once with a ticket,
 * zt_swap_wait blocks until that request is complete. A failed piece (ENOSPC, EIO, a short read)
 * fails its request: the wait returns -1 with a one-line error naming the file, the byte offset
 * and the cause. One thread uses a zt_swap at a time (the engine's host lane).
 *
 * Integrity: every ZT_SWAP_ALIGN block carries a CRC32C, kept in host memory, recorded when a write
 * completes and checked when a read completes; a block that reads back different from what was
 * last written there (or, never written, not as zeros) fails its read with "FILE: checksum mismatch
 * in 4096 bytes at byte OFF (CONTEXT): ...", so corrupted swap contents are never used. */
#ifndef ZT_SWAP_H
#define ZT_SWAP_H

#include <stddef.h>

#include "util/util.h"

#define ZT_SWAP_ALIGN 4096 /* bytes: O_DIRECT's alignment on every Linux file system we target */

typedef struct zt_swap zt_swap;

typedef struct zt_swap_opts {
    size_t block_size;   /* aio.block_size: bytes per I/O request (rounded up to ZT_SWAP_ALIGN) */
    int queue_depth;     /* aio.queue_depth: requests in flight */
    int single_submit;   /* aio.single_submit: one io_uring_submit per request instead of batches */
    int overlap_events;  /* aio.overlap_events: submit new pieces while reaping completions */
    int preallocate;     /* 1: reserve the whole file at open (fallocate), so later writes cannot
                            run out of space on non-copy-on-write file systems */
} zt_swap_opts;

/* Creates DIR/zerotrain-swap-<purpose>-rank<rank>-<pid>.bin of `bytes` bytes (DIR must exist and
 * be writable), after checking that the file system has that much free; preallocates it when
 * opts->preallocate. NULL with a one-line error naming DIR on failure (missing, not a directory,
 * not writable, too small: "needs X GiB, Y GiB free"). */
zt_swap *zt_swap_open(const char *dir, const char *purpose, int rank, size_t bytes, const zt_swap_opts *opts,
                      zt_err *err);
/* Closes the file; removes it when remove_file (a clean end). */
void zt_swap_close(zt_swap *s, int remove_file);

const char *zt_swap_path(const zt_swap *s);
/* Words naming where the user is in its work ("step 12"), added to every error from here on as
 * " (step 12)" after the byte offset; NULL or "" for none. */
void zt_swap_set_context(zt_swap *s, const char *context);
/* host memory the block checksums take (4 bytes per ZT_SWAP_ALIGN of the file) */
size_t zt_swap_checksum_bytes(const zt_swap *s);
int zt_swap_is_direct(const zt_swap *s); /* 1 when the file is open with O_DIRECT */

/* Asynchronous transfer of `bytes` between buf and the file at byte `offset`; returns a ticket
 * (>= 0) for zt_swap_wait. */
int zt_swap_read(zt_swap *s, size_t offset, void *buf, size_t bytes);
int zt_swap_write(zt_swap *s, size_t offset, const void *buf, size_t bytes);
/* Blocks until request `ticket` is complete (and reaps whatever else completed); 0, or -1 with err
 * set if it failed. Waiting for a ticket twice is an error caught by an assertion. */
int zt_swap_wait(zt_swap *s, int ticket, zt_err *err);
/* Waits for every request in flight; 0, or -1 with the first failure in err. Their tickets are used
 * up: waiting for one of them afterwards is the same error as waiting twice. */
int zt_swap_wait_all(zt_swap *s, zt_err *err);

/* Buffers for requests: aligned to ZT_SWAP_ALIGN, size rounded up to it, zeroed. */
void *zt_swap_buffer_alloc(size_t bytes);
void zt_swap_buffer_free(void *p);
/* bytes rounded up to ZT_SWAP_ALIGN */
size_t zt_swap_round(size_t bytes);

/* Counters since open: bytes moved and seconds during which at least one request of that kind
 * was in flight (for throughput against the disk's bandwidth). */
typedef struct zt_swap_stats {
    size_t bytes_read, bytes_written;
    double read_seconds, write_seconds;
} zt_swap_stats;
zt_swap_stats zt_swap_get_stats(const zt_swap *s);

#endif
