/* sim_operands.c — the simulated GPU's operands inside an op (for backend_sim_ops.c and
 * backend_sim_llama.c, the ops): the CPU backend that does the math, the fp32 copies of an op's 16-bit
 * arguments (kept per lane thread between ops) widened before it runs and rounded back after, and what
 * the virtual clock charges for them and for attention's FLOPs, said when the op is queued. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_adam.h"
#include "backend/sim_clock.h"
#include "backend/sim_internal.h"
#include "util/util.h"

const zt_backend *sim_cpu_math;

/* Each lane thread keeps the fp32 copies of its ops' operands between ops, one per operand slot (up
 * to SCRATCH_KEEP bytes each; larger ones are allocated per op): a fresh copy per op page-faulted on
 * every use, so an op's cost depended on what the allocator had at hand, which the virtual clock
 * cannot price (calibrate measures operands in a loop where the allocator hands the same memory back). */
#define SCRATCH_KEEP ((size_t)64 << 20)
static __thread struct { float *f; size_t cap; } t_scratch[8];
static float *scratch(int slot, size_t n) {
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (bytes > SCRATCH_KEEP) return zt_xmalloc(bytes);
    if (t_scratch[slot].cap < bytes) {
        free(t_scratch[slot].f);
        t_scratch[slot].f = zt_xmalloc(bytes), t_scratch[slot].cap = bytes;
    }
    return t_scratch[slot].f;
}

float *sim_w16(wide *w, void *shadow, size_t n, int write) {
    if (!shadow) return NULL;
    for (int j = 0; j < w->k; j++)
        if (w->t[j].shadow == shadow && w->t[j].n >= n) {
            w->t[j].write |= write;
            return w->t[j].f;
        }
    int timed = sim_clock_op_times_on(); /* a thread-CPU clock read costs a system call: only for the op table */
    double c0 = timed ? sim_thread_cpu() : 0;
    float *f = scratch(w->k, n);
    zt_cpu_to_f32(f, shadow, n, w->dt);
    w->t[w->k++] = (typeof(w->t[0])){shadow, f, n, write, 1, n, n};
    if (timed) sim_operand_cpu_add(sim_thread_cpu() - c0, 0);
    return f;
}

/* elements a matrix of rows x cols with row stride ld spans from its first: the last row ends at
 * its cols-th element, not at ld (a column slice may end before its buffer's last full row) */
size_t sim_span(long rows, long cols, long ld) { return rows > 0 && cols > 0 ? (size_t)(rows - 1) * ld + cols : 0; }

/* sim_w16 for a strided matrix (a column slice of a wider one): widened over its span, but only its own
 * rows x cols elements are written back, so the rest of each row (another tile's columns) stays bit
 * for bit as it was */
float *sim_w16_rows(wide *w, void *shadow, long rows, long cols, long ld, int write) {
    float *f = sim_w16(w, shadow, sim_span(rows, cols, ld), write);
    for (int j = 0; write && j < w->k; j++)
        if (w->t[j].f == f) w->t[j].rows = (size_t)rows, w->t[j].cols = (size_t)cols, w->t[j].ld = (size_t)ld;
    return f;
}

void sim_w16_done(wide *w) {
    int timed = sim_clock_op_times_on();
    double c0 = timed ? sim_thread_cpu() : 0;
    for (int j = 0; j < w->k; j++) {
        if (w->t[j].write)
            for (size_t r = 0; r < w->t[j].rows; r++)
                zt_cpu_from_f32((char *)w->t[j].shadow + r * w->t[j].ld * zt_dtype_size(w->dt),
                                w->t[j].f + r * w->t[j].ld, w->t[j].cols, w->dt);
        if (w->t[j].f != t_scratch[j].f) free(w->t[j].f); /* a kept scratch stays for the next op */
    }
    if (timed) sim_operand_cpu_add(0, sim_thread_cpu() - c0);
}

/* it->p[slot] = the shadow of [p, p + bytes) (sim_dev's checks), and its widening and rounding added
 * to the item's operand cost; an operand aliasing an earlier slot's buffer is widened once (sim_w16) */
void sim_operand(sim_item *it, int slot, int use, const void *p, size_t bytes, const char *op, const char *arg) {
    it->p[slot] = sim_dev(p, bytes, op, arg);
    if (!it->p[slot] || use == AS_IS) return;
    int aliased = 0;
    for (int j = 0; j < slot; j++) aliased |= it->p[j] == it->p[slot];
    double widened = aliased ? 0 : (double)bytes, rounded = use == OUT16 ? (double)bytes : 0;
    it->operand_cost += sim_cost_operands(widened, rounded);
    it->widened += widened, it->rounded += rounded;
}

sim_item *sim_op_item(sim_fn run, zt_dtype dt, const char *name) {
    sim_item *it = sim_item_new(run);
    it->i[8] = dt;
    it->name = name;
    return it;
}

/* causal attention over B sequences of T: QK^T and PV are 4 T^2 C FLOPs per sequence, half of
 * them under the mask; backward is costed at `factor` times forward (flash attention recomputes
 * the scores: 2.5) */
void sim_attention_cost(sim_item *it, zt_dtype dt, double B, double T, double C, double factor) {
    double flops = factor * 2.0 * B * T * T * C;
    it->cost += sim_cost_attention(dt, flops);
    it->flops += flops;
}
