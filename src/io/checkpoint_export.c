/* checkpoint_export.c — a checkpoint's master weights as a Hugging Face GPT-2 directory: the one
 * path that `zerotrain export` and the training loop's 16-bit save beside each checkpoint
 * (zero_optimization.stage3_gather_16bit_weights_on_model_save) share.
 *
 * The weights are read from the checkpoint files, one tensor at a time through
 * zt_checkpoint_reader (checksum-verified), and written one tensor at a time by zt_hf_save, so
 * memory stays bounded by the largest tensor (plus the reader's staging buffer) whatever the model
 * size: ZeRO-3 never gathers the fp32 model into one buffer on one rank to save it. */
#define _GNU_SOURCE
#include "io/checkpoint_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm/fail_together.h"
#include "io/hf.h"

typedef struct master_src {
    zt_checkpoint_reader *r;
    zt_err *err; /* the reader's own message, better than "cannot fetch tensor" */
} master_src;

static int read_master(void *ctx, size_t offset, size_t n, float *out) {
    master_src *s = ctx;
    return zt_checkpoint_read(s->r, ZT_CKPT_MASTER, offset, n, out, s->err);
}

int zt_checkpoint_export_hf(zt_checkpoint_reader *r, const char *out, const char *dtype, const char *vocab_dir,
                            zt_err *why_not, zt_err *err) {
    const zt_checkpoint_meta *m = zt_checkpoint_reader_meta(r);
    zt_err read_err = {{0}}, save_err = {{0}};
    master_src src = {r, &read_err};
    if (zt_hf_save(out, zt_checkpoint_reader_table(r), &m->shape, read_master, &src, dtype, &save_err)) {
        *err = read_err.msg[0] ? read_err : save_err; /* a read failure's own message is the better one */
        return -1;
    }
    return zt_hf_save_tokenizer(out, vocab_dir, &m->shape, why_not, err) < 0 ? -1 : 0;
}

/* rank 0: exports STEP_DIR into STEP_DIR/.hf.tmp and renames it to STEP_DIR/hf once complete */
static int export_step(const char *step_dir, const char *dtype, const char *vocab_dir, zt_err *err) {
    char tmp[CK_PATHCAP], final[CK_PATHCAP];
    if (ck_path_join(tmp, sizeof tmp, step_dir, "." ZT_CKPT_HF_DIR ".tmp", err) ||
        ck_path_join(final, sizeof final, step_dir, ZT_CKPT_HF_DIR, err))
        return -1;
    double t0 = zt_now();
    ck_rmtree(tmp); /* a crashed earlier export of this step */
    if (mkdir(tmp, 0777)) return zt_fail(err, "%s: cannot create directory: %s", tmp, strerror(errno));
    zt_checkpoint_reader *r = zt_checkpoint_open(step_dir, err);
    int rc = r ? 0 : -1;
    zt_err why_not = {{0}};
    if (!rc) rc = zt_checkpoint_export_hf(r, tmp, dtype, vocab_dir, &why_not, err);
    zt_checkpoint_close(r);
    if (!rc && ck_is_dir(final)) ck_rmtree(final); /* the same step exported again */
    if (!rc && rename(tmp, final)) rc = zt_fail(err, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (!rc) rc = ck_fsync_path(step_dir, err);
    if (rc) {
        ck_rmtree(tmp); /* nothing half-written stays; the checkpoint beside it is untouched */
        return -1;
    }
    char weights[CK_PATHCAP];
    struct stat st;
    double mb = ck_path_join(weights, sizeof weights, final, "model.safetensors", NULL) == 0 && stat(weights, &st) == 0
                    ? (double)st.st_size / 1e6 : 0;
    zt_info("checkpoint: wrote the 16-bit model %s (%s, %.1f MB in %.2f s%s%s)", final, dtype, mb, zt_now() - t0,
            why_not.msg[0] ? "; no tokenizer: " : "", why_not.msg);
    return 0;
}

int zt_checkpoint_export_16bit(const zt_checkpoint_dir *d, long step, const char *dtype, const char *vocab_dir,
                               zt_comm *comm, zt_err *err) {
    char name[64], step_dir[CK_PATHCAP];
    snprintf(name, sizeof name, "step_%08ld", step);
    int rc = 0;
    if (comm->rank == 0) {
        ck_h5_quiet q = ck_h5_silence();
        rc = ck_path_join(step_dir, sizeof step_dir, d->path, name, err);
        if (!rc) rc = export_step(step_dir, dtype, vocab_dir, err);
        ck_h5_restore(q);
        if (rc) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            zt_fail(err, "16-bit model save (zero_optimization.stage3_gather_16bit_weights_on_model_save) failed: %s "
                         "(checkpoint %s itself is complete and resumable)", why, name);
        }
    }
    return zt_agree(comm, rc, err);
}
