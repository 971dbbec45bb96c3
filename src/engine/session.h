/* session.h — everything one rank needs to run the model for a config: backend, comm, parameter
 * table, ZeRO engine and activations. Shared by train, eval and sample so they build the model
 * the same way. */
#ifndef ZT_SESSION_H
#define ZT_SESSION_H

#include "model/gpt2.h"
#include "comm/comm.h"
#include "config/config.h"
#include "engine/engine.h"

/* Tensor parallelism lays the ranks out tensor-parallel inner: world rank w is tensor-parallel rank
 * w % tp of data-parallel rank w / tp, so a tensor-parallel group is tp consecutive ranks (one node).
 * The ZeRO engine works over the data-parallel group of its tensor-parallel rank; the model's
 * all-reduces run over the tensor-parallel group. */
typedef struct zt_session {
    const zt_config *cfg;
    const zt_backend *be;
    zt_comm *comm;         /* host-side comm of the caller (MPI): every rank */
    int tp_size, tp_rank, dp_rank, dp_world;
    zt_comm *dp_comm;      /* host comm of the data-parallel group (comm itself when tp_size is 1) */
    zt_comm *tp_comm;      /* host comm of the tensor-parallel group (NULL when tp_size is 1) */
    zt_comm *device_comm;  /* the data-parallel group's comm on device buffers (NCCL, host-staged or one-rank); NULL
                              where device memory is host memory (the engine uses dp_comm) */
    zt_comm *tp_device_comm; /* the same for the tensor-parallel group (NULL when tp_size is 1 or memory is host) */
    zt_gpt2_shape shape;
    zt_param_table whole;  /* the whole model's table (init, imports, checkpoints' whole tensors) */
    zt_param_table table;  /* this rank's part of it (the same as whole when tp_size is 1) */
    zt_engine *engine;
    zt_gpt2 model;
    zt_param_source src;
} zt_session;

/* Picks the backend from cfg->device (auto: CUDA when usable, else CPU). */
const zt_backend *zt_pick_backend(const zt_config *cfg, zt_err *err);
zt_gpt2_shape zt_shape_from_config(const zt_config *cfg);
/* The inverse: CFG's model keys set to describe SHAPE (zt_shape_from_config(cfg) gives SHAPE back). */
void zt_shape_to_config(const zt_gpt2_shape *shape, zt_config *cfg);
/* The model's activation checkpointing settings of a config. */
zt_act_ckpt zt_act_ckpt_of(const zt_config *cfg);

/* Builds the session; init_f32 is the full fp32 parameter vector (NULL: GPT-2 init from cfg->seed, made
 * range by range as the engine fills its parts).
 * Micro-batch shape [B, T]. */
int zt_session_open(zt_session *s, const zt_config *cfg, zt_comm *comm, const float *init_f32, int B, int T,
                    zt_err *err);
void zt_session_close(zt_session *s);

#endif
