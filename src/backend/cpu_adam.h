/* cpu_adam.h — the host AdamW: one streaming pass over fp32 params, grads and moments with
 * AVX-512 or AVX2+FMA code picked at run time (scalar fallback = opmath.h's zt_adamw_element),
 * OpenMP across cores, and an optional fused 16-bit copy-out of the updated params for the H2D
 * transfer; in place, or out of place (zt_cpu_adamw_g_to). Every path gives the scalar formula's results
 * bit for bit (see cpu_adam.c). */
#ifndef ZT_CPU_ADAM_H
#define ZT_CPU_ADAM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

enum { ZT_ADAM_ISA_SCALAR = 0, ZT_ADAM_ISA_AVX2 = 1, ZT_ADAM_ISA_AVX512 = 2, ZT_ADAM_ISA_BEST = -1 };

/* The widest path this CPU runs (AVX-512F > AVX2+FMA+F16C > scalar). */
int zt_cpu_adam_best_isa(void);
const char *zt_cpu_adam_isa_name(int isa);

/* AdamW on n elements (p, m, v updated in place; g read). out16 (may be NULL) receives the updated
 * p rounded to nearest-even in out_dtype (ZT_BF16 or ZT_F16). nthreads <= 0: OpenMP's default. */
void zt_cpu_adamw(float *p, float *m, float *v, const float *g, size_t n, const zt_adam_step *s, void *out16,
                  zt_dtype out_dtype, int nthreads);
/* The same with a given path (ZT_ADAM_ISA_BEST = the widest supported); an unsupported isa falls
 * back to the widest supported one. For tests and the bench. */
void zt_cpu_adamw_isa(float *p, float *m, float *v, const float *g, size_t n, const zt_adam_step *s, void *out16,
                      zt_dtype out_dtype, int nthreads, int isa);

/* From now on the calling thread's zt_cpu_adamw_g calls report each of their OpenMP threads' busy
 * interval to the device observer (backend.h's host_adam) while one is set: Twin-Flow's host Adam
 * lanes call it, so the trace shows every host Adam thread; other callers (the backends' own
 * AdamW, ratio auto's calibration) report nothing. */
void zt_cpu_adam_report_threads(int on);

/* The same with the gradients g in g_dtype (F32, BF16 or F16), widened to fp32 as they are loaded
 * (exact), and a given path: the results equal converting g first and calling zt_cpu_adamw. */
void zt_cpu_adamw_g(float *p, float *m, float *v, const void *g, zt_dtype g_dtype, size_t n, const zt_adam_step *s,
                    void *out16, zt_dtype out_dtype, int nthreads, int isa);

/* The same out of place: reads the state from (p, m, v) and writes the updated state to (p_out, m_out,
 * v_out), leaving the inputs as they were (the arrays may also be the same: then it is zt_cpu_adamw_g).
 * The same traffic as in place (28 B/element): Twin-Flow's speculative update keeps the state it
 * started from this way, so a rolled-back step needs no copy to undo it (twin_flow.c). */
void zt_cpu_adamw_g_to(const float *p, const float *m, const float *v, float *p_out, float *m_out, float *v_out,
                       const void *g, zt_dtype g_dtype, size_t n, const zt_adam_step *s, void *out16,
                       zt_dtype out_dtype, int nthreads, int isa);

/* dst[i] = src[i] as fp32, src in dtype (F32, BF16, F16); for 16-bit gradients on the host */
void zt_cpu_to_f32(float *dst, const void *src, size_t n, zt_dtype dtype);
/* dst[i] = src[i] in dtype, rounded to nearest-even as the devices do; for offloaded parameters */
void zt_cpu_from_f32(void *dst, const float *src, size_t n, zt_dtype dtype);

#endif
