/* vmm/host_backend.h: controls of the host backend for tests, CI and
 * simulation.  The backend itself is reached through vmm/backend.h; these
 * calls let a test read its counters, inject faults and decide when the
 * work on a stream completes.
 *
 * Model of "device" memory: each simulated device owns one memfd of
 * `capacity` bytes cut into chunks of `granularity` bytes.  A handle is a
 * list of chunks (not necessarily contiguous, as physical pages on a GPU
 * are not); mapping it mmaps those chunks back to back, so data survives
 * unmapping and mapping elsewhere.  Unmapped and not-yet-accessible ranges
 * are PROT_NONE: touching them faults, as a GPU kernel would.
 *
 * Model of streams: a stream is any pointer value.  Work on a stream
 * completes at once unless the test holds the stream; while held, events
 * recorded on it stay pending until xs_host_stream_complete() or
 * xs_host_stream_release().  event_sync on a pending event completes the
 * stream up to that event (the simulated GPU catches up) and is counted
 * in `waits`, so a test can tell whether the allocator blocked.
 */
#ifndef XSEG_VMM_HOST_BACKEND_H
#define XSEG_VMM_HOST_BACKEND_H

#include "backend.h"

typedef struct xs_host_counters_s {
  uint64_t calls[XS_CALL__COUNT];  /* successful and failed calls per kind */
  uint64_t failed[XS_CALL__COUNT]; /* of which failed (injected or refused) */
  uint64_t handles_live;           /* created and not released */
  uint64_t handle_bytes;           /* physical bytes held (released-but-mapped included) */
  uint64_t mapped_bytes;           /* bytes currently mapped */
  uint64_t mappings_live;          /* number of live mappings */
  uint64_t reservations_live;      /* address ranges reserved */
  uint64_t reserved_bytes;         /* bytes of address ranges reserved */
  uint64_t mem_allocs_live;        /* mem_alloc blocks not yet freed */
  uint64_t events_live;            /* events created and not destroyed */
  uint64_t waits;                  /* event_sync calls that had to wait */
  uint64_t scrub_waits;            /* creates that waited for released memory to be scrubbed */
} xs_host_counters_t;

/* The host backend behind `b`, or NULL if `b` is another kind. */
int xs_host_is(const xs_backend_t *b);

/* Counters summed over all devices (dev < 0) or for one device. */
void xs_host_counters(xs_backend_t *b, int dev, xs_host_counters_t *out);

/* Make the n-th call of `kind` from now (n >= 1) fail with `code`
 * (XSEG_EBACKEND, XSEG_ENOMEM, ...).  With `sticky`, that call and every
 * later one of the kind fail until xs_host_fail_clear().  A failing call has
 * no effect. */
void xs_host_fail(xs_backend_t *b, xs_call_t kind, uint64_t n, int code, int sticky);
void xs_host_fail_clear(xs_backend_t *b);

/* Model the driver's scrub of released memory (off until called): the
 * chunks of a released handle of more than one granule come back
 * ns_per_mib per MiB after the release, one release after another, and a
 * create that needs chunks still being scrubbed sleeps wait_ns (the
 * driver waits about 7 ms on an H100 although a 64 MiB scrub takes under
 * 0.1 ms) and is counted in scrub_waits.  Released
 * single granules are not scrubbed (a large handle made of released 2 MiB
 * handles did not wait, gpu-h100-driver-probe-release.txt); a single
 * granule created where every free chunk is still being scrubbed waits as
 * a larger create does (gpu-h100-page-waits.txt), and one created beside
 * free memory does not.  0, 0 turns it off. */
void xs_host_scrub(xs_backend_t *b, uint64_t ns_per_mib, uint64_t wait_ns);

/* Modelled time: every call advances the backend's clock (now_ns) by
 * what it costs on a GPU (a base, and some per MiB of the handle or range),
 * and a sleep (sleep_ns, the scrub's wait) advances it instead of
 * sleeping, so that a replay's time on the backend's clock is what the
 * same calls, waits and sleeps take on that GPU; the host's own time runs
 * beside it.  Off until called; NULL turns it off (the time modelled so
 * far stays on the clock). */
typedef struct xs_host_costs_s {
  uint64_t create_ns, create_ns_mib;
  /* Where a create leaves less than full_mib MiB of the device free, it
   * costs these instead: a single granule page_full_ns, a larger handle
   * create_full_ns and create_full_ns_mib per MiB (0: as above). */
  uint64_t full_mib, page_full_ns, create_full_ns, create_full_ns_mib;
  uint64_t release_ns, release_ns_mib;
  uint64_t map_ns;
  uint64_t unmap_ns, unmap_ns_mib;
  uint64_t access_ns, access_ns_mib;
  uint64_t refused_ns;  /* a create refused for want of memory */
  uint64_t mem_info_ns;
} xs_host_costs_t;
extern const xs_host_costs_t xs_host_h100_costs;
void xs_host_model_time(xs_backend_t *b, const xs_host_costs_t *costs);
/* While time is modelled, let the backend's clock count modelled time
 * only, not the host's (on 1, off 0): what the allocator decides from the
 * clock (pacing, the scrub) then does not depend on how busy the host is,
 * as tests need; a replay timed as an H100 would take it keeps the host's
 * time, which is the allocator's own work. */
void xs_host_model_clock(xs_backend_t *b, int on);

/* Keep `bytes` of each device's free memory from creates while its free
 * figure (mem_info) still shows them, as the CUDA driver keeps a little
 * for itself: a create that would need them is refused.  0: off. */
void xs_host_hide(xs_backend_t *b, size_t bytes);

/* Streams. */
void xs_host_stream_hold(xs_backend_t *b, xseg_stream_t s);     /* work stays pending */
void xs_host_stream_complete(xs_backend_t *b, xseg_stream_t s); /* finish pending work */
void xs_host_stream_release(xs_backend_t *b, xseg_stream_t s);  /* finish and stop holding */
/* 1 if every event recorded on `s` so far has completed. */
int xs_host_stream_idle(xs_backend_t *b, xseg_stream_t s);

#endif /* XSEG_VMM_HOST_BACKEND_H */
