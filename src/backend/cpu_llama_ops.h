/* cpu_llama_ops.h — the CPU backend's ops for the Llama family other than attention (cpu_llama_ops.c):
 * RMSNorm forward and backward, the rotary embedding, SwiGLU forward and backward. backend_cpu.c puts
 * them in its table; backend.h says what each computes. fp32 tensors (the CPU's compute dtype). */
#ifndef ZT_CPU_LLAMA_OPS_H
#define ZT_CPU_LLAMA_OPS_H

void zt_cpu_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *w, float eps, int N, int C);
void zt_cpu_rmsnorm_backward(void *dinp, void *dw, const void *dout, const void *inp, const void *w, const float *rstd,
                             int N, int C);
void zt_cpu_rope(void *qkv, const float *cos_sin, int B, int T, int NH, int NKV, int HD, int inverse);
void zt_cpu_swiglu_forward(void *out, const void *inp, int N, int inter);
void zt_cpu_swiglu_backward(void *dinp, const void *inp, const void *dout, int N, int inter);

#endif
