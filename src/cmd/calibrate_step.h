/* calibrate_step.h — `zerotrain calibrate`'s real step (calibrate_step.c): a short real training run
 * of a small fixed GPT-2 on the simulated GPU, priced by the profile calibrate's timed loops wrote,
 * with the sim's per-op table (ZEROTRAIN_SIM_OP_TIMES); what each kind of op took there against
 * what the loops priced it at. calibrate.c turns these into the profile's rates. */
#ifndef ZT_CALIBRATE_STEP_H
#define ZT_CALIBRATE_STEP_H

#include "util/util.h"

/* the kinds of op whose math the step prices apart, each by its own profile keys */
enum {
    STEP_GEMM_SQUARE,   /* the blocks' GEMMs (and their epilogues): gemm.*.efficiency */
    STEP_LM_FORWARD,    /* the LM head's forward GEMM: gemm.*.long_out */
    STEP_LM_BACKWARD,   /* the LM head's dinp and dW GEMMs: gemm.*.long_k and long_rows */
    STEP_ATTENTION,     /* attention_tflops */
    STEP_XENT,          /* xent_gbs */
    STEP_ELEMENTWISE,   /* memory_bandwidth_gbs: every other item priced by its bytes */
    STEP_NKINDS
};

typedef struct zt_step_prices {
    double measured[STEP_NKINDS], priced[STEP_NKINDS]; /* the kind's math: lane CPU seconds, priced seconds */
    double widened, widen_cpu, rounded, round_cpu;     /* 16-bit operand bytes and the CPU seconds they took */
    int steps, runs, layers, n_embd, seq_len, micro_batch, tp; /* the runs (for the profile's comments) */
} zt_step_prices;

extern const char *const zt_step_kind_names[STEP_NKINDS];

/* Runs the step (this executable, `train`, in a child process; its files under dir, removed after)
 * with `profile` (the loops' profile) as its prices, 3 times, each CPU figure the median of the 3
 * runs'; items priced under min_item_s (the profile's
 * kernel_min: the floor, not their work) are left out of the element-wise kind. tp > 1: the step at
 * tensor_parallel.tp_size tp, as tp processes at once, every rank's ops summed. */
int zt_calibrate_step(const char *profile, const char *dir, double min_item_s, int tp, zt_step_prices *out, zt_err *err);

#endif
