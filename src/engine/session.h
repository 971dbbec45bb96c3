/* session.h — everything one rank needs to run the model for a config: backend, comm, parameter
 * table, ZeRO engine and activations. Shared by train, eval and sample so they build the model
 * the same way. */
#ifndef ZT_SESSION_H
#define ZT_SESSION_H

#include "model/gpt2.h"
#include "comm/comm.h"
#include "config/config.h"
#include "engine/engine.h"

typedef struct zt_session {
    const zt_config *cfg;
    const zt_backend *be;
    zt_comm *comm;         /* host-side comm of the caller (MPI) */
    zt_comm *device_comm;  /* NCCL for a CUDA backend on several ranks, else NULL (the engine uses comm) */
    zt_gpt2_shape shape;
    zt_param_table table;
    zt_engine *engine;
    zt_gpt2 model;
    zt_param_source src;
} zt_session;

/* Picks the backend from cfg->device (auto: CUDA when usable, else CPU). */
const zt_backend *zt_pick_backend(const zt_config *cfg, zt_err *err);
zt_gpt2_shape zt_shape_from_config(const zt_config *cfg);
/* The model's activation checkpointing settings of a config. */
zt_act_ckpt zt_act_ckpt_of(const zt_config *cfg);

/* Builds the session; init_f32 is the full fp32 parameter vector (NULL: GPT-2 init from cfg->seed).
 * Micro-batch shape [B, T]. */
int zt_session_open(zt_session *s, const zt_config *cfg, zt_comm *comm, const float *init_f32, int B, int T,
                    zt_err *err);
void zt_session_close(zt_session *s);

#endif
