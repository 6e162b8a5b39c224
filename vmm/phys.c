/* vmm/phys.c: the only caller of the backend table (vmm/backend.h).
 *
 * Every physical operation of the allocator goes through here, so this file
 * is where calls are timed and counted (the map/unmap/create/release
 * statistics), where the device's memory cap is enforced (held bytes never
 * exceed the limit from per_process_memory_fraction / max_memory_mb), and
 * where a failure becomes a message naming the call, the address, the size
 * and the backend's own error text (xs_vmm_error).  It also keeps the pool
 * of idle events.  Callers hold the device lock.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm.h"

const char *const xs_call_names[XS_CALL__COUNT] = {
    "reserve",      "unreserve",     "create",       "release",     "map",
    "unmap",        "set_access",    "mem_alloc",    "mem_free",    "event_create",
    "event_destroy", "event_record", "event_query",  "event_sync",  "mem_info",
    "export",       "import"};

/* ---- errors and asserts ------------------------------------------------------------ */

static _Thread_local char t_msg[1024];

const char *xs_vmm_error(void) { return t_msg; }

int xs_vmm_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_msg, sizeof t_msg, fmt, ap);
  va_end(ap);
  return code;
}

void xs_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "xseg: internal error: %s:%d: assertion failed: %s\n", file, line, expr);
  abort();
}

static const char *be_err(const xs_vmm_t *v) {
  const char *s = v->be->error_string(v->be);
  return s && *s ? s : "no detail";
}

static inline uint64_t now(const xs_vmm_t *v) { return v->be->now_ns(v->be); }

/* ---- the device ---------------------------------------------------------------------- */

int xs_vmm_device_count(xs_backend_t *be, int *n) {
  int rc = be->device_count(be, n);
  if (rc != 0) return xs_vmm_fail(rc, "%s", be->error_string(be));
  return 0;
}

/* min(fraction x total, max_bytes when set), in whole pages. */
static size_t cap_of(const xs_vmm_t *v, double fraction, size_t max_bytes) {
  double frac = fraction * (double)v->total;
  size_t limit = frac >= (double)v->total ? v->total : (size_t)frac;
  if (max_bytes != 0 && max_bytes < limit) limit = max_bytes;
  return limit / v->gran * v->gran;
}

int xs_vmm_init(xs_vmm_t *v, xs_backend_t *be, int dev, double fraction, size_t max_bytes, int peer_access) {
  memset(v, 0, sizeof *v);
  v->be = be;
  v->dev = dev;
  xs_devinfo_t info;
  int rc = be->device_info(be, dev, &info);
  if (rc != 0) return xs_vmm_fail(rc, "xseg: device %d: cannot query the device: %s", dev, be_err(v));
  if (info.granularity == 0 || (info.granularity & (info.granularity - 1)) != 0)
    return xs_vmm_fail(XSEG_EBACKEND, "xseg: device %d: granularity %zu is not a power of two", dev,
                       info.granularity);
  v->gran = info.granularity;
  v->total = info.total;
  v->vmm = info.vmm;
  snprintf(v->name, sizeof v->name, "%s", info.name);
  v->limit = cap_of(v, fraction, max_bytes);
  v->scrub_ns_per_mib = XS_VMM_SCRUB_NS_PER_MIB;
  xs_vmm_new_start(v); /* unpaced, and the device looked at */
  if (peer_access) {
    int n = 0;
    if (be->device_count(be, &n) == 0) {
      for (int p = 0; p < n && v->npeers < XS_VMM_MAX_PEERS; p++) {
        int can = 0;
        if (p != dev && be->can_access_peer(be, dev, p, &can) == 0 && can) v->peers[v->npeers++] = p;
      }
    }
  }
  return 0;
}

void xs_vmm_set_limit(xs_vmm_t *v, double fraction, size_t max_bytes) { v->limit = cap_of(v, fraction, max_bytes); }

void xs_vmm_look(xs_vmm_t *v) {
  size_t fr = 0, to = 0;
  uint64_t t0 = now(v);
  int rc = v->be->mem_info(v->be, v->dev, &fr, &to);
  v->st.time_look_ns += now(v) - t0;
  v->st.num_looks++;
  if (rc != 0) return;
  size_t used = to > fr ? to - fr : 0;
  v->others = used > v->held ? used - v->held : 0;
  v->unlooked = 0;
}

/* A create or segment allocation succeeded: look again every so often. */
static void created(xs_vmm_t *v) {
  if (++v->unlooked >= XS_VMM_LOOK_EVERY) xs_vmm_look(v);
}

uint64_t xs_vmm_now(const xs_vmm_t *v) { return now(v); }

int xs_vmm_mem_info(xs_vmm_t *v, size_t *free_bytes, size_t *total) {
  int rc = v->be->mem_info(v->be, v->dev, free_bytes, total);
  if (rc != 0) return xs_vmm_fail(rc, "xseg: device %d: querying free memory failed: %s", v->dev, be_err(v));
  return 0;
}

int xs_vmm_can_access_peer(xs_vmm_t *v, int peer, int *can) {
  int rc = v->be->can_access_peer(v->be, v->dev, peer, can);
  if (rc != 0)
    return xs_vmm_fail(rc, "xseg: device %d: asking whether device %d can reach it failed: %s", v->dev, peer,
                       be_err(v));
  return 0;
}

void xs_vmm_add_peer(xs_vmm_t *v, int peer) {
  for (int i = 0; i < v->npeers; i++)
    if (v->peers[i] == peer) return;
  if (v->npeers < XS_VMM_MAX_PEERS) v->peers[v->npeers++] = peer;
}

/* ---- address ranges ------------------------------------------------------------------- */

/* Reserve size bytes of address space (vmm/segment.c builds ranges on it). */
int xs_vmm_reserve(xs_vmm_t *v, size_t size, uintptr_t *addr) {
  int rc = v->be->reserve(v->be, v->dev, size, v->gran, addr);
  if (rc != 0)
    return xs_vmm_fail(rc, "xseg: device %d: reserving %zu bytes of address space failed: %s", v->dev, size,
                       be_err(v));
  v->st.num_reserve++;
  xs_gauge_add(&v->st.reserved_address_bytes, (int64_t)size);
  return 0;
}

int xs_vmm_unreserve(xs_vmm_t *v, uintptr_t addr, size_t size) {
  int rc = v->be->unreserve(v->be, v->dev, addr, size);
  if (rc != 0)
    return xs_vmm_fail(rc, "xseg: device %d: freeing the address range %#lx (+%zu) failed: %s", v->dev,
                       (unsigned long)addr, size, be_err(v));
  v->st.num_unreserve++;
  xs_gauge_add(&v->st.reserved_address_bytes, -(int64_t)size);
  return 0;
}

static int over_limit(const xs_vmm_t *v, size_t size) {
  return v->held > v->limit || size > v->limit - v->held;
}

/* Would size more bytes fit in the device's free memory?  Asked before a
 * create, so that a device at its limit refuses without a driver call: a
 * look (cuMemGetInfo, 5-6.5 us) where the last one says no, since others
 * may have let memory go since. */
static int fits_device(xs_vmm_t *v, size_t size) {
  for (int looked = 0;; looked = 1) {
    size_t dev = xs_vmm_device_room(v);
    if (v->held <= dev && size <= dev - v->held) return 1;
    if (looked) return 0;
    xs_vmm_look(v);
  }
}

/* The driver refused size bytes: look again (others may hold more than
 * last seen), and where the device's free memory still shows them, learn
 * that it shows memory the driver does not give (unseen), so that the
 * next create that large is refused without a call.  On an H100 with the
 * device filled by another allocation, a create of 1014 MiB was refused
 * with 1014 MiB shown free, and xseg asked 730 times per replay for 2 MiB
 * less each time (benchmarks/results/gpu-h100-pacing-at.txt). */
static void refused(xs_vmm_t *v, size_t size) {
  xs_vmm_look(v);
  size_t free_seen = xs_vmm_device_free(v);
  if (free_seen >= size) v->unseen += free_seen - size + v->gran;
}

int xs_vmm_forget_unseen(xs_vmm_t *v) {
  size_t had = v->unseen;
  v->unseen = 0;
  return had > 0;
}

void xs_vmm_new_start(xs_vmm_t *v) {
  v->pacing = 0;
  v->paced = 0;
  v->probe_every = XS_VMM_PACE_PROBE;
  xs_vmm_look(v);
}

static int device_full(const xs_vmm_t *v, size_t size) {
  return xs_vmm_fail(XSEG_ENOMEM,
                     "xseg: device %d: %zu more bytes do not fit in its free memory (%zu bytes held by xseg, %zu "
                     "by others, %zu shown free that the driver refused, of %zu)",
                     v->dev, size, v->held, v->others, v->unseen, v->total);
}

int xs_vmm_mem_alloc(xs_vmm_t *v, size_t size, int tag, uintptr_t *addr) {
  if (over_limit(v, size))
    return xs_vmm_fail(XSEG_ENOMEM, "xseg: device %d: %zu more bytes would pass the limit of %zu bytes", v->dev,
                       size, v->limit);
  if (!fits_device(v, size)) return device_full(v, size);
  uint64_t t0 = now(v);
  int rc = v->be->mem_alloc(v->be, v->dev, size, addr);
  v->st.time_create_ns += now(v) - t0;
  if (rc != 0) {
    v->st.num_create_refused++;
    rc = xs_vmm_fail(rc, "xseg: device %d: allocating a segment of %zu bytes failed: %s", v->dev, size,
                     be_err(v));
    refused(v, size);
    return rc;
  }
  v->held += size;
  created(v);
  v->st.num_device_alloc++;
  v->st.created_bytes += size;
  xs_gauge_add(&v->st.held_bytes, (int64_t)size);
  xs_gauge_add(&v->st.mapped_bytes, (int64_t)size);
  xs_stat_add(v->st.reserved_bytes, tag, (int64_t)size);
  xs_stat_add(v->st.segment, tag, 1);
  return 0;
}

int xs_vmm_mem_free(xs_vmm_t *v, uintptr_t addr, size_t size, int tag) {
  uint64_t t0 = now(v);
  int rc = v->be->mem_free(v->be, v->dev, addr, size);
  v->st.time_release_ns += now(v) - t0;
  if (rc != 0)
    return xs_vmm_fail(rc, "xseg: device %d: freeing the segment %#lx (+%zu) failed: %s", v->dev,
                       (unsigned long)addr, size, be_err(v));
  v->held -= size;
  v->st.num_device_free++;
  v->st.released_bytes += size;
  xs_gauge_add(&v->st.held_bytes, -(int64_t)size);
  xs_gauge_add(&v->st.mapped_bytes, -(int64_t)size);
  xs_stat_add(v->st.reserved_bytes, tag, -(int64_t)size);
  xs_stat_add(v->st.segment, tag, -1);
  return 0;
}

/* ---- pacing creates after releases (vmm.h) ---------------------------------------------- */

/* The device nearly full: where scrubs make creates wait. */
static int device_nearly_full(const xs_vmm_t *v) {
  return xs_vmm_device_free(v) < v->total / XS_VMM_PACE_ROOM_DIV;
}

/* A release of size bytes ended at t: the driver scrubs them after what
 * it was scrubbing already. */
static void scrub_queue(xs_vmm_t *v, size_t size, uint64_t t) {
  if (size <= v->gran) return; /* a single page is given back at once */
  if (v->scrub_end_ns <= t) v->scrubbing = 0;
  v->scrubbing += size;
  uint64_t start = v->scrub_end_ns > t ? v->scrub_end_ns : t;
  v->scrub_end_ns = start + (uint64_t)(size >> 20) * v->scrub_ns_per_mib;
  /* No further ahead than one wait of the driver's: after a release of
   * many GiB (xseg_empty_cache), the creates that follow would otherwise
   * each sleep the most for seconds. */
  if (v->scrub_end_ns > t + XS_VMM_PACE_MAX_NS) v->scrub_end_ns = t + XS_VMM_PACE_MAX_NS;
  v->released_ns = t;
}

/* Before a create of size bytes: sleep out the scrub where creates have
 * been waiting for it (a single page only where the device has no free
 * memory beside what it scrubs: else the driver gives one at once).
 * Returns the nanoseconds slept; *probe set for the unpaced probe. */
static uint64_t pace(xs_vmm_t *v, size_t size, int *probe) {
  *probe = 0;
  /* No clock read while not pacing; and with half the device free the
   * driver has memory beside the scrub. */
  if (!v->pacing || !device_nearly_full(v)) return 0;
  if (size <= v->gran && xs_vmm_device_free(v) >= v->scrubbing + size) return 0; /* a page beside the scrub */
  uint64_t t = now(v);
  if (v->scrub_end_ns <= t) return 0;
  if (++v->paced >= v->probe_every) {
    v->paced = 0;
    *probe = 1;
    return 0;
  }
  uint64_t d = v->scrub_end_ns - t;
  if (d > XS_VMM_PACE_MAX_NS) d = XS_VMM_PACE_MAX_NS;
  v->be->sleep_ns(v->be, d);
  d = now(v) - t;
  v->st.time_paced_ns += d;
  return d;
}

uint64_t xs_vmm_scrub_left(xs_vmm_t *v) {
  if (!v->pacing || !device_nearly_full(v)) return 0;
  uint64_t t = now(v);
  return v->scrub_end_ns > t ? v->scrub_end_ns - t : 0;
}

/* After a create of size bytes that ended at t and took dt ns, slept
 * before it: learn. */
static void paced(xs_vmm_t *v, size_t size, uint64_t t, uint64_t dt, uint64_t slept, int probe) {
  if (!v->be->creates_wait || t - v->released_ns > XS_VMM_PACE_WINDOW_NS || !device_nearly_full(v)) return;
  int waited = dt > XS_VMM_WAITED_NS + (uint64_t)(size >> 20) * XS_VMM_CREATE_NS_PER_MIB;
  if (waited) {
    v->st.num_create_waits++;
    if (!v->pacing) v->probe_every = XS_VMM_PACE_PROBE;
    else if (probe && v->probe_every < XS_VMM_PACE_PROBE_MAX) v->probe_every *= 2; /* still needed: ask less often */
    v->pacing = 1;
    if (slept) v->scrub_ns_per_mib += v->scrub_ns_per_mib / 2;
  } else if (slept) {
    v->scrub_ns_per_mib -= v->scrub_ns_per_mib / 256;
  } else if (probe) {
    v->pacing = 0; /* unpaced and not waiting: the scrubs keep up */
  }
}

/* ---- physical handles ----------------------------------------------------------------- */

int xs_vmm_create(xs_vmm_t *v, size_t size, xs_chunk_t **out) {
  if (over_limit(v, size))
    return xs_vmm_fail(XSEG_ENOMEM, "xseg: device %d: %zu more bytes would pass the limit of %zu bytes", v->dev,
                       size, v->limit);
  if (!fits_device(v, size)) return device_full(v, size);
  xs_chunk_t *c = calloc(1, sizeof *c);
  if (!c) return xs_vmm_fail(XSEG_ENOMEM, "xseg: out of host memory");
  int probe;
  uint64_t slept = pace(v, size, &probe);
  uint64_t t0 = now(v);
  int rc = v->be->create(v->be, v->dev, size, &c->h);
  uint64_t dt = now(v) - t0;
  v->st.time_create_ns += dt;
  if (rc != 0) {
    free(c);
    v->st.num_create_refused++;
    rc = xs_vmm_fail(rc, "xseg: device %d: creating a physical handle of %zu bytes failed: %s", v->dev, size,
                     be_err(v));
    refused(v, size);
    return rc;
  }
  paced(v, size, t0 + dt, dt, slept, probe);
  c->size = size;
  c->created_ns = t0;
  c->fd = -1;
  v->held += size;
  v->st.num_device_alloc++;
  v->st.created_bytes += size;
  xs_gauge_add(&v->st.handles_live, 1);
  xs_gauge_add(&v->st.held_bytes, (int64_t)size);
  created(v);
  *out = c;
  return 0;
}

int xs_vmm_release(xs_vmm_t *v, xs_chunk_t *c) {
  xs_assert_internal(c->vs == NULL);
  uint64_t t0 = now(v);
  int rc = v->be->release(v->be, v->dev, c->h);
  uint64_t t1 = now(v);
  v->st.time_release_ns += t1 - t0;
  if (rc != 0)
    return xs_vmm_fail(rc, "xseg: device %d: releasing a physical handle of %zu bytes failed: %s", v->dev,
                       c->size, be_err(v));
  v->held -= c->size;
  v->st.num_device_free++;
  v->st.released_bytes += c->size;
  scrub_queue(v, c->size, t1);
  xs_gauge_add(&v->st.handles_live, -1);
  xs_gauge_add(&v->st.held_bytes, -(int64_t)c->size);
  if (c->fd >= 0) close(c->fd);
  free(c);
  return 0;
}

/* The owner first, then the peers. */
static int access_list(const xs_vmm_t *v, int *devs) {
  devs[0] = v->dev;
  for (int i = 0; i < v->npeers; i++) devs[1 + i] = v->peers[i];
  return 1 + v->npeers;
}

int xs_vmm_set_access(xs_vmm_t *v, uintptr_t addr, size_t size) {
  int devs[1 + XS_VMM_MAX_PEERS];
  int n = access_list(v, devs);
  uint64_t t0 = now(v);
  int rc = v->be->set_access(v->be, v->dev, addr, size, devs, n);
  v->st.time_set_access_ns += now(v) - t0;
  v->st.num_set_access++;
  if (rc != 0) {
    v->st.num_map_refused++;
    return xs_vmm_fail(rc, "xseg: device %d: setting access to %#lx (+%zu) for %d device(s) failed: %s", v->dev,
                       (unsigned long)addr, size, n, be_err(v));
  }
  return 0;
}

/* A chunk counts as mapped (bytes, and one more segment under its range's
 * tag) from its map until its unmap. */
static void count_mapped(xs_vmm_t *v, const xs_chunk_t *c, int sign) {
  xs_gauge_add(&v->st.mapped_bytes, sign * (int64_t)c->size);
  xs_stat_add(v->st.reserved_bytes, c->vs->tag, sign * (int64_t)c->size);
  xs_stat_add(v->st.segment, c->vs->tag, sign);
}

int xs_vmm_map(xs_vmm_t *v, xs_vseg_t *vs, xs_chunk_t *c, uintptr_t addr) {
  uint64_t t0 = now(v);
  int rc = v->be->map(v->be, v->dev, addr, c->size, c->h);
  v->st.time_map_ns += now(v) - t0;
  if (rc != 0) {
    v->st.num_map_refused++;
    return xs_vmm_fail(rc, "xseg: device %d: mapping %zu bytes at %#lx failed: %s", v->dev, c->size,
                       (unsigned long)addr, be_err(v));
  }
  v->st.num_map++;
  rc = xs_vmm_set_access(v, addr, c->size);
  c->vs = vs;
  c->addr = addr;
  if (rc != 0) {
    /* Leave no mapping behind without access: undo it.  If even that is
     * refused, the chunk stays mapped (c->vs set): counted as mapped, and
     * the caller keeps it aside until an unmap succeeds. */
    t0 = now(v);
    int urc = v->be->unmap(v->be, v->dev, addr, c->size);
    v->st.time_unmap_ns += now(v) - t0;
    if (urc == 0) {
      v->st.num_unmap++;
      c->vs = NULL;
      c->addr = 0;
      return rc;
    }
  }
  count_mapped(v, c, 1);
  return rc;
}

int xs_vmm_unmap(xs_vmm_t *v, xs_chunk_t *c) {
  uint64_t t0 = now(v);
  int rc = v->be->unmap(v->be, v->dev, c->addr, c->size);
  v->st.time_unmap_ns += now(v) - t0;
  if (rc != 0)
    return xs_vmm_fail(rc, "xseg: device %d: unmapping %zu bytes at %#lx failed: %s", v->dev, c->size,
                       (unsigned long)c->addr, be_err(v));
  v->st.num_unmap++;
  count_mapped(v, c, -1);
  c->vs = NULL;
  c->addr = 0;
  return 0;
}

/* ---- sharing with other processes ------------------------------------------------------ */

int xs_vmm_export(xs_vmm_t *v, xs_chunk_t *c, int *fd) {
  if (c->fd < 0) {
    int rc = v->be->export_handle(v->be, v->dev, c->h, &c->fd);
    if (rc != 0) {
      c->fd = -1;
      return xs_vmm_fail(rc, "xseg: device %d: exporting a physical handle of %zu bytes failed: %s", v->dev,
                         c->size, be_err(v));
    }
  }
  *fd = c->fd;
  return 0;
}

void xs_vmm_unimport(xs_vmm_t *v, uintptr_t base, size_t span, const size_t *offs, const size_t *sizes,
                     const xs_handle_t *handles, int n) {
  for (int i = 0; i < n; i++) {
    if (!handles[i]) continue;
    v->be->unmap(v->be, v->dev, base + offs[i], sizes[i]); /* refused only if never mapped */
    v->be->release(v->be, v->dev, handles[i]);
  }
  if (base) v->be->unreserve(v->be, v->dev, base, span);
}

int xs_vmm_import(xs_vmm_t *v, const int *fds, const size_t *offs, const size_t *sizes, int n, size_t span,
                  uintptr_t *base, xs_handle_t *handles) {
  *base = 0;
  for (int i = 0; i < n; i++) handles[i] = 0;
  int rc = v->be->reserve(v->be, v->dev, span, v->gran, base);
  if (rc != 0) {
    *base = 0;
    return xs_vmm_fail(rc, "xseg: device %d: reserving %zu bytes for shared memory failed: %s", v->dev, span,
                       be_err(v));
  }
  for (int i = 0; i < n && rc == 0; i++) {
    if ((rc = v->be->import_handle(v->be, v->dev, fds[i], &handles[i])) != 0) {
      handles[i] = 0;
      rc = xs_vmm_fail(rc, "xseg: device %d: importing shared memory failed: %s", v->dev, be_err(v));
    } else if ((rc = v->be->map(v->be, v->dev, *base + offs[i], sizes[i], handles[i])) != 0) {
      v->be->release(v->be, v->dev, handles[i]);
      handles[i] = 0;
      rc = xs_vmm_fail(rc, "xseg: device %d: mapping shared memory failed: %s", v->dev, be_err(v));
    }
  }
  if (rc == 0 && (rc = xs_vmm_set_access(v, *base, span)) == 0) return 0;
  xs_vmm_unimport(v, *base, span, offs, sizes, handles, n);
  *base = 0;
  return rc;
}

/* ---- events ------------------------------------------------------------------------- */

int xs_vmm_event_get(xs_vmm_t *v, xs_event_t *ev) {
  if (v->nevents > 0) {
    *ev = v->events[--v->nevents];
    return 0;
  }
  int rc = v->be->event_create(v->be, v->dev, ev);
  if (rc != 0) return xs_vmm_fail(rc, "xseg: device %d: creating an event failed: %s", v->dev, be_err(v));
  return 0;
}

void xs_vmm_event_put(xs_vmm_t *v, xs_event_t ev) {
  if (v->nevents == v->capevents) {
    size_t n = v->capevents ? v->capevents * 2 : 16;
    xs_event_t *e = realloc(v->events, n * sizeof *e);
    if (!e) {
      v->be->event_destroy(v->be, v->dev, ev);
      return;
    }
    v->events = e;
    v->capevents = n;
  }
  v->events[v->nevents++] = ev;
}

int xs_vmm_event_record(xs_vmm_t *v, xs_event_t ev, xseg_stream_t s) {
  int rc = v->be->event_record(v->be, v->dev, ev, s);
  if (rc != 0)
    return xs_vmm_fail(rc, "xseg: device %d: recording an event on stream %p failed: %s", v->dev, (void *)s,
                       be_err(v));
  return 0;
}

int xs_vmm_event_query(xs_vmm_t *v, xs_event_t ev) {
  int rc = v->be->event_query(v->be, v->dev, ev);
  if (rc != 0 && rc != XSEG_ENOTREADY)
    return xs_vmm_fail(rc, "xseg: device %d: querying an event failed: %s", v->dev, be_err(v));
  return rc;
}

int xs_vmm_event_sync(xs_vmm_t *v, xs_event_t ev) {
  int rc = v->be->event_sync(v->be, v->dev, ev);
  if (rc != 0) return xs_vmm_fail(rc, "xseg: device %d: waiting for an event failed: %s", v->dev, be_err(v));
  return 0;
}

static void destroy_events(xs_vmm_t *v) {
  for (size_t i = 0; i < v->nevents; i++) v->be->event_destroy(v->be, v->dev, v->events[i]);
  free(v->events);
  v->events = NULL;
  v->nevents = v->capevents = 0;
}

void xs_vmm_fini(xs_vmm_t *v) {
  xs_vmm_unstick(v);
  xs_vmm_cache_release(v, 0);
  destroy_events(v);
}

/* ---- statistics ------------------------------------------------------------------------ */

void xs_vmm_reset_peaks(xs_vmm_stats_t *s) {
#define RESET_POOLED(name, help) \
  for (int t = 0; t < XS_STAT_NTYPES; t++) s->name[t].peak = s->name[t].current;
  XS_VMM_POOLED(RESET_POOLED)
#undef RESET_POOLED
#define RESET_GAUGE(name, help) s->name.peak = s->name.current;
  XS_VMM_GAUGES(RESET_GAUGE)
#undef RESET_GAUGE
}

void xs_vmm_reset_accumulated(xs_vmm_stats_t *s) {
#define RESET_POOLED(name, help) \
  for (int t = 0; t < XS_STAT_NTYPES; t++) s->name[t].allocated = s->name[t].freed = 0;
  XS_VMM_POOLED(RESET_POOLED)
#undef RESET_POOLED
#define RESET_COUNTER(name, help) s->name = 0;
  XS_VMM_COUNTERS(RESET_COUNTER)
#undef RESET_COUNTER
}
