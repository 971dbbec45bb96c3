/* grads_lane.h — private to src/engine/: the host thread that brings reduced gradient buckets down
 * to the host as backward goes on (stages 2-3 with the whole optimizer shard on the host, where the
 * engine sends the gradients there: engine.c, gradients_to_host; as ZeRO-Offload copies each bucket
 * into the host's gradient buffer). It owns its thread, its queue and
 * the host staging buffers the pieces come down into; the caller (zero_comm.c) says where in
 * the shard each piece goes, and how a piece is added there (the engine's hook into Twin-Flow). */
#ifndef ZT_GRADS_LANE_H
#define ZT_GRADS_LANE_H

#include "engine/engine_facts.h"
#include "engine/zero_formula.h"

typedef struct grads_lane grads_lane;

/* adds n values of a host buffer into the host gradients at shard offset off; flags: GRADS_LAND_*
 * (engine_facts.h) */
typedef void (*grads_land_fn)(void *owner, size_t off, const void *host_src, size_t n, int flags);

/* the lane, with GRADS_STAGING (zero_formula.h) staging buffers of max_elems each (pinned with offload_optimizer.pin_memory, counted as
 * host comm memory), or NULL when out of host memory */
grads_lane *grads_lane_open(const engine_facts *f, size_t max_elems, void *owner, grads_land_fn land);
void grads_lane_close(grads_lane *g); /* after grads_lane_drain; NULL does nothing */

/* Queues n reduced elements at device address src for shard offset off, and returns its ticket. The
 * lane's D2H is not ordered after queued device work: the caller synchronized after src was last
 * written, and leaves src alone until the ticket is done. Pieces land in the order queued; flags go to
 * the land function. */
long grads_lane_push(grads_lane *g, const void *src, size_t off, size_t n, int flags);
/* waits until the piece of `ticket` (and every one before it) has been read from the device (its
 * source may be written again), or with `landed` added into the host gradients; traced on the main
 * lane as `what` when it waits */
void grads_lane_wait(grads_lane *g, long ticket, int landed, const char *what);
void grads_lane_drain(grads_lane *g); /* every piece queued so far has landed */

#endif
