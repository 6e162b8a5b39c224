/* pool/init.h: the library's global state (pool/init.c), as the public API
 * and the tests reach it. */
#ifndef XSEG_POOL_INIT_H
#define XSEG_POOL_INIT_H

#include "device.h"

/* Initialise from XSEG_ALLOC_CONF if not done yet: 0, or the error of the
 * failed initialisation (set again for this thread). */
int xs_ensure_init(void);
/* The device's allocator, created on first use; NULL with the error set. */
xs_device_t *xs_device_get(int dev);
/* Devices of the backend in use; only after xs_ensure_init succeeded. */
int xs_ndevices(void);
/* Device dev (in [0, xs_ndevices())) if its allocator exists, else NULL. */
xs_device_t *xs_device_ready(int dev);
const char *xs_backend_name(void);
/* Run fn on the live block holding address p (p may point inside it), under
 * its device's lock, asking only devices that may own p (pool/owners.c);
 * fn's result, or -1 if no live block holds p.  In pool/api.c. */
int xs_on_block_holding(uintptr_t p, int (*fn)(xs_device_t *, xs_block_t *, void *), void *arg);
const xs_config_t *xs_global_config(void);

/* For tests and benchmarks: the backend in use (they reach the host
 * backend's controls), and device dev if initialised, without creating it. */
xs_backend_t *xs_current_backend(void);
xs_device_t *xs_device_peek(int dev);

#endif /* XSEG_POOL_INIT_H */
