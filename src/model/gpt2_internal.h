/* gpt2_internal.h — private to the model (gpt2.c, gpt2_params.c): the order of one block's tensors
 * in the parameter table, which the table lays out (gpt2_params.c) and forward and backward read
 * (gpt2.c). A block's first tensor is table entry 2 + P_PER_BLOCK * layer (after wte and wpe). */
#ifndef ZT_GPT2_INTERNAL_H
#define ZT_GPT2_INTERNAL_H

enum { /* tensors of one block, in table order */
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB,
    P_PER_BLOCK
};

#endif
