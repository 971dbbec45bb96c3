/* checkpoint_manifest.h — internal to the checkpoint modules: the step directory's manifest, which
 * lets no byte of a checkpoint reach HDF5's parser unverified (see checkpoint_manifest.c). */
#ifndef ZT_CHECKPOINT_MANIFEST_H
#define ZT_CHECKPOINT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define CK_MANIFEST "manifest"  /* DIR/step_N/manifest */
#define CK_MAX_EXTENTS 3        /* a rank file's raw data: master, adam_m, adam_v */

/* What the manifest records of one file: its size and the CRC32C of every byte of it outside its
 * raw data extents (a rank file's three contiguous datasets, whose bytes the chunk CRCs cover; the
 * index has none, so its CRC is of the whole file). */
typedef struct ck_file_record {
    uint64_t bytes;
    uint32_t crc;
    int n_ext;
    uint64_t ext_off[CK_MAX_EXTENTS], ext_len[CK_MAX_EXTENTS];
} ck_file_record;

/* Fills rec->bytes and rec->crc from PATH (rec's extents given). 0, or -1 with "PATH: ..." in err. */
int ck_file_digest(const char *path, ck_file_record *rec, zt_err *err);
/* PATH must be the file REC records: its size, then the CRC. -1 with one line naming PATH otherwise. */
int ck_file_verify(const char *path, const ck_file_record *rec, zt_err *err);

/* The manifest's text for the index's record and rank files 0 .. world-1 (malloc'ed). */
char *ck_manifest_text(const ck_file_record *index, const ck_file_record *ranks, int world);
/* Reads STEP_DIR/manifest: 1 with *index, *ranks (malloc'ed, [*world]) filled; 0 when there is none
 * (a checkpoint saved before manifests); -1 with one line naming the file when it is damaged. */
int ck_manifest_read(const char *step_dir, ck_file_record *index, ck_file_record **ranks, int *world, zt_err *err);
/* Every file STEP_DIR's manifest records is the one it records (what HDF5 would parse, without
 * opening any: index.h5 whole, each rank file outside its data). 1 when they verify, 0 when there is
 * no manifest (saved before manifests: nothing to check), -1 with the first damaged file in err. */
int ck_manifest_check(const char *step_dir, zt_err *err);

#endif
