/* checkpoint_manifest.c — the step directory's manifest (DIR/step_N/manifest): the size and CRC32C
 * of every file of the checkpoint, checked before HDF5 opens the file. HDF5 parses its structures
 * (superblock, object headers, the global heap holding the virtual datasets' mappings) trusting
 * them: a zeroed range of index.h5 sent it into an endless loop, a flipped bit into abort(). The
 * HDF5-level checksums (the index's metadata_crc32c, the shard digests, the chunk CRCs) are read
 * through that parser, so they come too late for this. The manifest is plain text that our code
 * alone parses, and checks itself:
 *   zerotrain checkpoint manifest 1
 *   index.h5 bytes=29868 crc32c=1f2e3d4c
 *   rank_00000.h5 bytes=9890816 crc32c=0a1b2c3d data=4096+3271680,3276800+3271680,6553600+3271680
 *   ...
 *   manifest crc32c=5e6f7a8b            (the CRC32C of every byte before this line)
 * index.h5's CRC is of the whole file: every attribute and dataset the loader and the readers use
 * (param_table's shapes, segments and decay flags, the params/NAME views h5py reads) is covered. A
 * rank file's CRC is of every byte outside its `data` extents (offset+length of the contiguous
 * master, adam_m and adam_v): the structures HDF5 parses and the chunk CRCs. The raw data itself is
 * covered by those chunk CRCs, checked as it is read, so verifying a rank file before opening it
 * reads a few hundred KiB whatever the model's size, not the whole file twice.
 * Written by rank 0 after the index, inside the temporary directory, so it is published with the
 * step by the same rename. Checkpoints saved before manifests (no manifest file) are read with the
 * old checks and a warning, not refused: they were saved by a correct program and refusing them
 * would strand every run in progress at the upgrade; the warning says a damaged file may stall
 * HDF5. A manifest that exists but does not verify is an error. */
#define _GNU_SOURCE
#include "io/checkpoint_manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint_common.h"
#include "util/crc32c.h"

#define MANIFEST_HEAD "zerotrain checkpoint manifest 1\n"
#define MANIFEST_TAIL "manifest crc32c="
#define MANIFEST_MAX ((size_t)16 << 20)
#define DIGEST_BUF ((size_t)1 << 20)

/* the extents of rec in file order; -1 when they overlap or run past `bytes` */
static int sorted_extents(const ck_file_record *rec, uint64_t bytes, uint64_t off[], uint64_t len[]) {
    int n = 0;
    for (int i = 0; i < rec->n_ext && i < CK_MAX_EXTENTS; i++) {
        if (!rec->ext_len[i]) continue;
        int j = n++;
        for (; j > 0 && off[j - 1] > rec->ext_off[i]; j--) { off[j] = off[j - 1]; len[j] = len[j - 1]; }
        off[j] = rec->ext_off[i];
        len[j] = rec->ext_len[i];
    }
    uint64_t end = 0;
    for (int i = 0; i < n; i++) {
        if (off[i] < end || len[i] > bytes || off[i] > bytes - len[i]) return -1;
        end = off[i] + len[i];
    }
    return n;
}

int ck_file_digest(const char *path, ck_file_record *rec, zt_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return zt_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) { int e = errno; close(fd); return zt_fail(err, "%s: cannot stat: %s", path, strerror(e)); }
    rec->bytes = (uint64_t)st.st_size;
    uint64_t off[CK_MAX_EXTENTS + 1], len[CK_MAX_EXTENTS + 1];
    int n = sorted_extents(rec, rec->bytes, off, len);
    if (n < 0) { close(fd); return zt_fail(err, "%s: its data extents do not fit its %" PRIu64 " bytes", path, rec->bytes); }
    off[n] = rec->bytes; /* the last gap runs to the end */
    len[n] = 0;
    char *buf = zt_xmalloc(DIGEST_BUF);
    uint32_t crc = 0;
    int rc = 0;
    for (int i = 0; i <= n && !rc; i++) { /* the gap before extent i, then skip it */
        uint64_t pos = i ? off[i - 1] + len[i - 1] : 0;
        while (pos < off[i] && !rc) {
            ssize_t got = pread(fd, buf, (size_t)(off[i] - pos < DIGEST_BUF ? off[i] - pos : DIGEST_BUF), (off_t)pos);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) rc = zt_fail(err, "%s: cannot read at byte %" PRIu64 ": %s", path, pos, got < 0 ? strerror(errno) : "file shrank");
            else { crc = zt_crc32c(crc, buf, (size_t)got); pos += (uint64_t)got; }
        }
    }
    free(buf);
    close(fd);
    rec->crc = crc;
    return rc;
}

int ck_file_verify(const char *path, const ck_file_record *rec, zt_err *err) {
    struct stat st;
    if (stat(path, &st)) return zt_fail(err, "%s: cannot stat: %s", path, strerror(errno));
    if ((uint64_t)st.st_size != rec->bytes)
        return zt_fail(err, "%s: damaged: %lld bytes, the step's manifest records %" PRIu64 " (truncated, extended, or not "
                       "the file this step saved)", path, (long long)st.st_size, rec->bytes);
    ck_file_record got = *rec;
    if (ck_file_digest(path, &got, err)) return -1;
    if (got.crc != rec->crc)
        return zt_fail(err, "%s: damaged: checksum mismatch (CRC32C %08x%s, the step's manifest records %08x): not the "
                       "file this step saved", path, got.crc, rec->n_ext ? " of the bytes outside its data" : "", rec->crc);
    return 0;
}

static void record_line(zt_sb *b, const char *name, const ck_file_record *r) {
    zt_sb_printf(b, "%s bytes=%" PRIu64 " crc32c=%08x", name, r->bytes, r->crc);
    for (int i = 0; i < r->n_ext; i++) zt_sb_printf(b, "%s%" PRIu64 "+%" PRIu64, i ? "," : " data=", r->ext_off[i], r->ext_len[i]);
    zt_sb_printf(b, "\n");
}

char *ck_manifest_text(const ck_file_record *index, const ck_file_record *ranks, int world) {
    zt_sb b = {0};
    zt_sb_printf(&b, MANIFEST_HEAD);
    record_line(&b, "index.h5", index);
    for (int r = 0; r < world; r++) {
        char name[32];
        ck_rank_file_name(name, sizeof name, r);
        record_line(&b, name, &ranks[r]);
    }
    zt_sb_printf(&b, MANIFEST_TAIL "%08x\n", zt_crc32c(0, b.p, b.n));
    return b.p;
}

/* one record line "NAME bytes=N crc32c=X[ data=O+L,...]\n" at *p, advanced past it; -1 if malformed */
static int parse_record(const char **p, const char *name, ck_file_record *r) {
    size_t nl = strlen(name);
    if (strncmp(*p, name, nl) || (*p)[nl] != ' ') return -1;
    const char *s = *p + nl;
    int used = 0;
    memset(r, 0, sizeof *r);
    if (sscanf(s, " bytes=%" SCNu64 " crc32c=%8x%n", &r->bytes, &r->crc, &used) != 2) return -1;
    s += used;
    if (!strncmp(s, " data=", 6)) {
        s += 6;
        for (;; s++) {
            if (r->n_ext == CK_MAX_EXTENTS) return -1;
            if (sscanf(s, "%" SCNu64 "+%" SCNu64 "%n", &r->ext_off[r->n_ext], &r->ext_len[r->n_ext], &used) != 2) return -1;
            r->n_ext++;
            s += used;
            if (*s != ',') break;
        }
    }
    if (*s != '\n') return -1;
    *p = s + 1;
    return 0;
}

int ck_manifest_read(const char *step_dir, ck_file_record *index, ck_file_record **ranks, int *world, zt_err *err) {
    *ranks = NULL;
    *world = 0;
    char path[CK_PATHCAP];
    if (ck_path_join(path, sizeof path, step_dir, CK_MANIFEST, err)) return -1;
    struct stat st;
    if (lstat(path, &st) && errno == ENOENT) return 0;
    size_t n = 0;
    zt_err rerr;
    char *text = zt_read_file_max(path, MANIFEST_MAX, &n, &rerr);
    if (!text) return zt_fail(err, "%s", rerr.msg);
    size_t tail = strlen(MANIFEST_TAIL) + 9, body = n >= tail ? n - tail : 0;
    unsigned want = 0;
    int used = 0, rc = 0;
    if (n < tail || strncmp(text + body, MANIFEST_TAIL, strlen(MANIFEST_TAIL)) ||
        sscanf(text + body + strlen(MANIFEST_TAIL), "%8x%n", &want, &used) != 1 || used != 8 || text[n - 1] != '\n')
        rc = zt_fail(err, "%s: damaged: it does not end with its checksum line", path);
    else if (zt_crc32c(0, text, body) != want)
        rc = zt_fail(err, "%s: damaged: checksum mismatch", path);
    const char *p = text + strlen(MANIFEST_HEAD);
    if (!rc && (strncmp(text, MANIFEST_HEAD, strlen(MANIFEST_HEAD)) || parse_record(&p, "index.h5", index)))
        rc = zt_fail(err, "%s: not a zerotrain checkpoint manifest of version 1", path);
    int cap = 0;
    while (!rc && p < text + body) {
        char name[32];
        ck_rank_file_name(name, sizeof name, *world);
        if (*world == cap) {
            cap = cap ? 2 * cap : 8;
            *ranks = zt_xrealloc(*ranks, (size_t)cap * sizeof **ranks);
        }
        if (parse_record(&p, name, &(*ranks)[*world])) rc = zt_fail(err, "%s: malformed record of %s", path, name);
        else (*world)++;
    }
    if (!rc && !*world) rc = zt_fail(err, "%s: records no rank file", path);
    free(text);
    if (rc) { free(*ranks); *ranks = NULL; *world = 0; return -1; }
    return 1;
}

int ck_manifest_check(const char *step_dir, zt_err *err) {
    ck_file_record index, *ranks = NULL;
    int world = 0, has = ck_manifest_read(step_dir, &index, &ranks, &world, err);
    if (has <= 0) return has;
    char path[CK_PATHCAP], name[32];
    int rc = ck_path_join(path, sizeof path, step_dir, "index.h5", err) || ck_file_verify(path, &index, err);
    for (int r = 0; r < world && !rc; r++) {
        ck_rank_file_name(name, sizeof name, r);
        rc = ck_path_join(path, sizeof path, step_dir, name, err) || ck_file_verify(path, &ranks[r], err);
    }
    free(ranks);
    return rc ? -1 : 1;
}
