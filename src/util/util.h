/* util.h — error values, checked allocation, the process-wide logger and small helpers.
 * Every failure path fills a zt_err and returns; only main() decides to exit. Messages follow
 * "zerotrain: error: FILE:LINE:COL: what" when a position is known. */
#ifndef ZT_UTIL_H
#define ZT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct zt_err {
    char msg[1024]; /* without the "zerotrain: error: " prefix */
} zt_err;

/* Formats into err->msg (when err != NULL) and returns -1, so callers write `return zt_fail(err, ...)`. */
int zt_fail(zt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "zerotrain: error: MSG" to stderr, as one line: MSG goes through zt_escape. */
void zt_print_error(const zt_err *err);

/* Makes n bytes of untrusted text (a file's contents, a path, a config value, a library's message)
 * printable on one line: control bytes become \n \r \t or \xNN, as do DEL and bytes that are not
 * valid UTF-8 (valid UTF-8 passes through). Backslashes are kept as they are, so escaping twice
 * changes nothing. Writes at most cap - 1 bytes and a NUL to buf (ending in "..." when cut short) and
 * returns buf. zt_escape_str escapes a NUL-terminated string. */
char *zt_escape(const void *text, size_t n, char *buf, size_t cap);
char *zt_escape_str(const char *s, char *buf, size_t cap);

/* The first non-finite element of x[0, n), or n: what a load or a save of weights and states refuses
 * (naming the element), since a NaN would train, sample and evaluate to NaN. */
size_t zt_first_nonfinite(const float *x, size_t n);

/* malloc/calloc that abort with a message: out-of-host-memory is not a recoverable input error. */
void *zt_xmalloc(size_t bytes);
void *zt_xcalloc(size_t count, size_t size);
void *zt_xrealloc(void *p, size_t bytes); /* grows (or shrinks) p; aborts when out of memory, as the others */
char *zt_xstrdup(const char *s);

/* Logger: rank 0 prints info; every rank prints warnings and errors with its rank. */
void zt_log_set_rank(int rank);
int zt_log_rank(void);
void zt_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void zt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic wall clock in seconds. */
double zt_now(void);
/* Seconds since the Unix epoch (CLOCK_REALTIME): a time base shared by processes and machines. */
double zt_unix_time(void);

/* Scratch files (the NVMe swap files) removed on every exit path that runs code: exit() (an atexit
 * handler), zt_mpi_abort, and the stop signals (SIGTERM, SIGINT, SIGUSR1 precede mpirun's SIGKILL).
 * Removing is unlink, which leaves open descriptors working: a save the signal asks for still reads
 * them. At most 16 at a time; a file closed normally is forgotten. zt_scratch_remove_all is
 * async-signal-safe. */
void zt_scratch_register(const char *path);
void zt_scratch_forget(const char *path);
void zt_scratch_remove_all(void);

/* mkdir -p: creates PATH and its missing parents; an existing directory is fine. */
int zt_mkdir_p(const char *path, zt_err *err);
/* mkdir -p of the folder part of the file path PATH (nothing when it has none): the files a run
 * writes (metrics, trace) may name folders that do not exist yet. */
int zt_mkdir_parent(const char *path, zt_err *err);
/* The folder this program's executable is in (/proc/self/exe, links resolved), into out; -1 when it
 * cannot be read. Files shipped beside the binary (the vocabulary, configs/hw, the CUDA backend) are
 * found from it, whatever the working directory. */
int zt_exe_dir(char *out, size_t cap);

/* A growing NUL-terminated string (the project's one string builder): zero-initialise, append with
 * zt_sb_printf, take .p (malloc'ed, may be NULL when nothing was appended) and free it. */
typedef struct zt_sb {
    char *p;
    size_t n, cap;
} zt_sb;
void zt_sb_printf(zt_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A byte count as users write it, for config values and command-line flags alike: a number
 * (`1.5e9`), or a number and a unit with an optional space between (`40GiB`, `512 MB`, `80G`),
 * units case-insensitive. KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB powers of 1024; a bare
 * K/M/G/T means the binary unit (`80G` = 80 GiB, as memory sizes are usually meant on command lines);
 * B is 1. Returns 0 and sets *out (>= 0), or -1 for anything else. */
int zt_parse_bytes(const char *text, double *out);

/* A byte count for messages, in the unit that shows it: "1.50 GiB", "2.00 MiB", "512.00 KiB", "100 bytes"
 * (so a 1 MiB budget never reads as "0.0 GiB"). Writes into buf and returns it. */
const char *zt_format_bytes(double bytes, char *buf, size_t cap);

/* Writes " (did you mean 'X'?)" into out when one of the n candidates is within a third of word's
 * length in edit distance (case-insensitive, at least 2), else "". */
void zt_suggest(const char *word, const char *const *cands, int n, char *out, size_t cap);

/* A file of newline-ended records (JSON lines, CSV rows) that a killed or failed writer may have
 * left ending inside a record: cut back to just after its last '\n' (or to nothing when it has
 * none), so a run that appends to it starts at a whole record. A missing file is fine. Sets *cut to
 * the bytes removed (may be NULL). 0, or -1 with "PATH: ..." in err. */
int zt_cut_torn_line(const char *path, long *cut, zt_err *err);

/* Reads a whole file into a NUL-terminated buffer; *len gets the byte count (without the NUL). A
 * file over ZT_READ_FILE_MAX is refused as zt_read_file_max refuses one (every file read has a cap:
 * /dev/zero given as a small file must not be read until memory runs out). */
#define ZT_READ_FILE_MAX ((size_t)256 << 20)
char *zt_read_file(const char *path, size_t *len, zt_err *err);
/* The same, refusing a file (or device, or pipe) of more than max bytes without reading it all. A
 * pipe, FIFO or character device is read with a bound: no data (nor its writer's end) within
 * ZEROTRAIN_PIPE_TIMEOUT seconds (default 30) fails with one line, so a FIFO nobody writes to does
 * not hang the command; process substitution (<(...)) reads as before. */
char *zt_read_file_max(const char *path, size_t max, size_t *len, zt_err *err);

/* An input read block by block with zt_read_file_max's rules (a pipe, FIFO or device waits at
 * most ZEROTRAIN_PIPE_TIMEOUT seconds for data, one line naming it when none comes). */
typedef struct zt_reader {
    int fd, streamed; /* streamed: 'f' FIFO or pipe, 'c' device, 's' socket, 0 a file */
    double wait_s;
    const char *path;
} zt_reader;
int zt_reader_open(zt_reader *r, const char *path, zt_err *err);
/* Up to N bytes into BUF: the count read (0 only at the end), or -1 with "PATH: ..." in ERR. */
long zt_reader_read(zt_reader *r, void *buf, size_t n, zt_err *err);
void zt_reader_close(zt_reader *r);

/* The time a repeated measurement settles at (ratio auto's calibration passes): the middle of its 3
 * fastest of n samples once those agree within `tolerance` (slowest / fastest - 1), so a disturbance
 * in the other samples (a VM growing its memory, another job on the cores) moves nothing; *settled is
 * 1 then. With fewer than 3 samples, or when the fastest 3 disagree, the median of all and 0. n >= 1. */
double zt_settled_time(const double *t, int n, double tolerance, int *settled);

/* Deterministic RNG (xorshift64* seeded by splitmix64) for init, data order and sampling. */
typedef struct zt_rng { uint64_t state; } zt_rng;
void zt_rng_seed(zt_rng *rng, uint64_t seed);
uint64_t zt_rng_u64(zt_rng *rng);
float zt_rng_uniform(zt_rng *rng);           /* [0, 1) with 24 random bits */
float zt_rng_normal(zt_rng *rng);            /* Box-Muller, one value per call (two u64 draws) */
/* Advances the state by `draws` zt_rng_u64 calls in O(log draws): xorshift is linear over GF(2), so
 * the jump is a 64x64 bit-matrix power. Lets threads generate disjoint pieces of one sequence. */
void zt_rng_jump(zt_rng *rng, uint64_t draws);

#endif
