/* device_observer.c — the process's one device observer (backend.h): set by the engine when it
 * opens a trace, read by the backends' threads on every item, so it is one atomic pointer. */
#include "backend/backend.h"

static const zt_device_observer *g_observer;

void zt_device_observe(const zt_device_observer *obs) { __atomic_store_n(&g_observer, obs, __ATOMIC_RELEASE); }

const zt_device_observer *zt_device_observer_now(void) { return __atomic_load_n(&g_observer, __ATOMIC_ACQUIRE); }
