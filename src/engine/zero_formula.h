/* zero_formula.h — per-rank model-state bytes of each ZeRO stage (Rajbhandari et al. 2020,
 * section 5), shared by the engine's accounting check and `zerotrain estimate`. */
#ifndef ZT_ZERO_FORMULA_H
#define ZT_ZERO_FORMULA_H

#include <stddef.h>

/* The partition: total elements padded to world * shard, shard a multiple of align. */
static inline size_t zt_zero_shard(size_t total, int world, size_t align) {
    size_t per = (total + (size_t)world - 1) / (size_t)world;
    return (per + align - 1) / align * align;
}

/* Model-state bytes per rank for Ψ = world * shard padded parameters, compute dtype of P bytes and
 * K bytes of optimizer state per parameter (fp32 master + m + v = 12; on fp32 backends the master
 * aliases the parameters, K = 8):
 *   stage 0: (2P + K) Ψ    stage 1: 2P Ψ + K Ψ/N    stage 2: P Ψ + (P + K) Ψ/N    stage 3: (2P + K) Ψ/N
 * With P = 2 and K = 12 these are the paper's 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N and 16Ψ/N. */
static inline size_t zt_zero_model_state_bytes(int stage, size_t P, size_t K, size_t shard, int world) {
    size_t psi = shard * (size_t)world;
    switch (stage) {
    case 0: return (2 * P + K) * psi;
    case 1: return 2 * P * psi + K * shard;
    case 2: return P * psi + (P + K) * shard;
    default: return (2 * P + K) * shard;
    }
}

#endif
