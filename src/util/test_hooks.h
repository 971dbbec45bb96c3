/* test_hooks.h — the fault injections tests use to reach failure paths that cannot be caused from
 * outside on the CPU backend, all in one place and all read from the environment:
 *   ZEROTRAIN_INJECT_OVERFLOW="3,7"  an fp16 gradient overflow (an inf in the reduced gradients) at
 *                                    those 1-based steps, on every rank (test/t_loss_scale.py)
 * Nothing else in the program reads ZEROTRAIN_INJECT_*. */
#ifndef ZT_TEST_HOOKS_H
#define ZT_TEST_HOOKS_H

/* 1 when ZEROTRAIN_INJECT_OVERFLOW lists `step` (1-based). */
int zt_test_hook_overflow_at(long step);

#endif
