/* vmm/phys.c: the only caller of the backend table (vmm/backend.h).
 *
 * Every physical operation of the allocator goes through here, so this file
 * is where calls are timed and counted (the map/unmap/create/release
 * statistics), where the device's memory cap is enforced (held bytes never
 * exceed the limit from per_process_memory_fraction / max_memory_mb), and
 * where a failure becomes a message naming the call, the address, the size
 * and the backend's own error text.  It also keeps the pool of idle events.
 * Callers hold the device lock.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *const xs_call_names[XS_CALL__COUNT] = {
    "reserve",      "unreserve",     "create",       "release",     "map",
    "unmap",        "set_access",    "mem_alloc",    "mem_free",    "event_create",
    "event_destroy", "event_record", "event_query",  "event_sync",  "mem_info"};

static const char *be_err(xs_device_t *d) {
  const char *s = d->phys.be->error_string(d->phys.be);
  return s && *s ? s : "no detail";
}

static inline uint64_t now(xs_device_t *d) { return d->phys.be->now_ns(d->phys.be); }

int xs_phys_init(xs_device_t *d, xs_backend_t *be, int dev, const xs_config_t *cfg) {
  xs_phys_t *ph = &d->phys;
  memset(ph, 0, sizeof *ph);
  ph->be = be;
  ph->dev = dev;
  xs_devinfo_t info;
  int rc = be->device_info(be, dev, &info);
  if (rc != 0) return xs_error(rc, "xseg: device %d: cannot query the device: %s", dev, be_err(d));
  if (info.granularity == 0 || (info.granularity & (info.granularity - 1)) != 0)
    return xs_error(XSEG_EBACKEND, "xseg: device %d: granularity %zu is not a power of two", dev,
                    info.granularity);
  ph->gran = info.granularity;
  ph->total = info.total;
  ph->vmm = info.vmm;
  double frac = cfg->memory_fraction * (double)info.total;
  size_t limit = frac >= (double)info.total ? info.total : (size_t)frac;
  if (cfg->max_memory != 0 && cfg->max_memory < limit) limit = cfg->max_memory;
  ph->limit = limit / ph->gran * ph->gran;
  if (cfg->peer_access) {
    int n = 0;
    if (be->device_count(be, &n) == 0) {
      for (int p = 0; p < n && ph->npeers < 64; p++) {
        int can = 0;
        if (p != dev && be->can_access_peer(be, dev, p, &can) == 0 && can) ph->peers[ph->npeers++] = p;
      }
    }
  }
  return 0;
}

int xs_phys_reserve(xs_device_t *d, size_t size, uintptr_t *addr) {
  xs_backend_t *be = d->phys.be;
  int rc = be->reserve(be, d->phys.dev, size, d->phys.gran, addr);
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: reserving %zu bytes of address space failed: %s", d->id,
                    size, be_err(d));
  d->stats.num_reserve++;
  xs_gauge_add(&d->stats.reserved_address_bytes, (int64_t)size);
  return 0;
}

int xs_phys_unreserve(xs_device_t *d, uintptr_t addr, size_t size) {
  xs_backend_t *be = d->phys.be;
  int rc = be->unreserve(be, d->phys.dev, addr, size);
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: freeing the address range %#lx (+%zu) failed: %s", d->id,
                    (unsigned long)addr, size, be_err(d));
  d->stats.num_unreserve++;
  xs_gauge_add(&d->stats.reserved_address_bytes, -(int64_t)size);
  return 0;
}

int xs_phys_create(xs_device_t *d, size_t size, xs_chunk_t **out) {
  xs_phys_t *ph = &d->phys;
  if (ph->held > ph->limit || size > ph->limit - ph->held)
    return xs_error(XSEG_ENOMEM, "xseg: device %d: %zu more bytes would pass the limit of %zu bytes",
                    d->id, size, ph->limit);
  xs_chunk_t *c = calloc(1, sizeof *c);
  if (!c) return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  uint64_t t0 = now(d);
  int rc = ph->be->create(ph->be, ph->dev, size, &c->h);
  d->stats.time_create_ns += now(d) - t0;
  if (rc != 0) {
    free(c);
    return xs_error(rc, "xseg: device %d: creating a physical handle of %zu bytes failed: %s", d->id,
                    size, be_err(d));
  }
  c->size = size;
  c->created_ns = t0;
  ph->held += size;
  d->stats.num_device_alloc++;
  xs_gauge_add(&d->stats.handles_live, 1);
  xs_gauge_add(&d->stats.held_bytes, (int64_t)size);
  *out = c;
  return 0;
}

int xs_phys_release(xs_device_t *d, xs_chunk_t *c) {
  xs_phys_t *ph = &d->phys;
  xs_assert_internal(c->seg == NULL);
  uint64_t t0 = now(d);
  int rc = ph->be->release(ph->be, ph->dev, c->h);
  d->stats.time_release_ns += now(d) - t0;
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: releasing a physical handle of %zu bytes failed: %s", d->id,
                    c->size, be_err(d));
  ph->held -= c->size;
  d->stats.num_device_free++;
  xs_gauge_add(&d->stats.handles_live, -1);
  xs_gauge_add(&d->stats.held_bytes, -(int64_t)c->size);
  free(c);
  return 0;
}

/* The owner first, then the peers. */
static int access_list(xs_device_t *d, int *devs) {
  devs[0] = d->phys.dev;
  for (int i = 0; i < d->phys.npeers; i++) devs[1 + i] = d->phys.peers[i];
  return 1 + d->phys.npeers;
}

int xs_phys_set_access(xs_device_t *d, uintptr_t addr, size_t size) {
  xs_phys_t *ph = &d->phys;
  int devs[65];
  int n = access_list(d, devs);
  uint64_t t0 = now(d);
  int rc = ph->be->set_access(ph->be, ph->dev, addr, size, devs, n);
  d->stats.time_set_access_ns += now(d) - t0;
  d->stats.num_set_access++;
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: setting access to %#lx (+%zu) for %d device(s) failed: %s",
                    d->id, (unsigned long)addr, size, n, be_err(d));
  return 0;
}

int xs_phys_map(xs_device_t *d, xs_segment_t *seg, xs_chunk_t *c, uintptr_t addr) {
  xs_phys_t *ph = &d->phys;
  uint64_t t0 = now(d);
  int rc = ph->be->map(ph->be, ph->dev, addr, c->size, c->h);
  d->stats.time_map_ns += now(d) - t0;
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: mapping %zu bytes at %#lx failed: %s", d->id, c->size,
                    (unsigned long)addr, be_err(d));
  d->stats.num_map++;
  rc = xs_phys_set_access(d, addr, c->size);
  c->seg = seg;
  c->addr = addr;
  if (rc != 0) {
    /* Leave no mapping behind without access: undo it.  If even that is
     * refused, the chunk stays mapped (c->seg set): counted as mapped, and
     * the caller keeps it aside until an unmap succeeds. */
    t0 = now(d);
    int urc = ph->be->unmap(ph->be, ph->dev, addr, c->size);
    d->stats.time_unmap_ns += now(d) - t0;
    if (urc == 0) {
      d->stats.num_unmap++;
      c->seg = NULL;
      c->addr = 0;
      return rc;
    }
  }
  xs_gauge_add(&d->stats.mapped_bytes, (int64_t)c->size);
  int cls = seg->pool->cls;
  xs_stat_add(d->stats.reserved_bytes, cls, (int64_t)c->size);
  xs_stat_add(d->stats.segment, cls, 1);
  return rc;
}

int xs_phys_unmap(xs_device_t *d, xs_chunk_t *c) {
  xs_phys_t *ph = &d->phys;
  uint64_t t0 = now(d);
  int rc = ph->be->unmap(ph->be, ph->dev, c->addr, c->size);
  d->stats.time_unmap_ns += now(d) - t0;
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: unmapping %zu bytes at %#lx failed: %s", d->id, c->size,
                    (unsigned long)c->addr, be_err(d));
  d->stats.num_unmap++;
  int cls = c->seg->pool->cls;
  xs_gauge_add(&d->stats.mapped_bytes, -(int64_t)c->size);
  xs_stat_add(d->stats.reserved_bytes, cls, -(int64_t)c->size);
  xs_stat_add(d->stats.segment, cls, -1);
  c->seg = NULL;
  c->addr = 0;
  return 0;
}

int xs_phys_mem_alloc(xs_device_t *d, size_t size, uintptr_t *addr) {
  xs_phys_t *ph = &d->phys;
  if (ph->held > ph->limit || size > ph->limit - ph->held)
    return xs_error(XSEG_ENOMEM, "xseg: device %d: %zu more bytes would pass the limit of %zu bytes",
                    d->id, size, ph->limit);
  uint64_t t0 = now(d);
  int rc = ph->be->mem_alloc(ph->be, ph->dev, size, addr);
  d->stats.time_create_ns += now(d) - t0;
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: allocating a segment of %zu bytes failed: %s", d->id, size,
                    be_err(d));
  ph->held += size;
  d->stats.num_device_alloc++;
  xs_gauge_add(&d->stats.held_bytes, (int64_t)size);
  xs_gauge_add(&d->stats.mapped_bytes, (int64_t)size);
  return 0;
}

int xs_phys_mem_free(xs_device_t *d, uintptr_t addr, size_t size) {
  xs_phys_t *ph = &d->phys;
  uint64_t t0 = now(d);
  int rc = ph->be->mem_free(ph->be, ph->dev, addr, size);
  d->stats.time_release_ns += now(d) - t0;
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: freeing the segment %#lx (+%zu) failed: %s", d->id,
                    (unsigned long)addr, size, be_err(d));
  ph->held -= size;
  d->stats.num_device_free++;
  xs_gauge_add(&d->stats.held_bytes, -(int64_t)size);
  xs_gauge_add(&d->stats.mapped_bytes, -(int64_t)size);
  return 0;
}

int xs_phys_mem_info(xs_device_t *d, size_t *free_bytes, size_t *total) {
  xs_phys_t *ph = &d->phys;
  int rc = ph->be->mem_info(ph->be, ph->dev, free_bytes, total);
  if (rc != 0) return xs_error(rc, "xseg: device %d: querying free memory failed: %s", d->id, be_err(d));
  return 0;
}

/* ---- events ------------------------------------------------------------------- */

int xs_phys_event_get(xs_device_t *d, xs_event_t *ev) {
  if (d->nevents > 0) {
    *ev = d->events[--d->nevents];
    return 0;
  }
  xs_phys_t *ph = &d->phys;
  int rc = ph->be->event_create(ph->be, ph->dev, ev);
  if (rc != 0) return xs_error(rc, "xseg: device %d: creating an event failed: %s", d->id, be_err(d));
  return 0;
}

void xs_phys_event_put(xs_device_t *d, xs_event_t ev) {
  if (d->nevents == d->capevents) {
    size_t n = d->capevents ? d->capevents * 2 : 16;
    xs_event_t *e = realloc(d->events, n * sizeof *e);
    if (!e) {
      d->phys.be->event_destroy(d->phys.be, d->phys.dev, ev);
      return;
    }
    d->events = e;
    d->capevents = n;
  }
  d->events[d->nevents++] = ev;
}

int xs_phys_event_record(xs_device_t *d, xs_event_t ev, xseg_stream_t s) {
  xs_phys_t *ph = &d->phys;
  int rc = ph->be->event_record(ph->be, ph->dev, ev, s);
  if (rc != 0)
    return xs_error(rc, "xseg: device %d: recording an event on stream %p failed: %s", d->id, (void *)s,
                    be_err(d));
  return 0;
}

int xs_phys_event_query(xs_device_t *d, xs_event_t ev) {
  xs_phys_t *ph = &d->phys;
  int rc = ph->be->event_query(ph->be, ph->dev, ev);
  if (rc != 0 && rc != XSEG_ENOTREADY)
    return xs_error(rc, "xseg: device %d: querying an event failed: %s", d->id, be_err(d));
  return rc;
}

int xs_phys_event_sync(xs_device_t *d, xs_event_t ev) {
  xs_phys_t *ph = &d->phys;
  int rc = ph->be->event_sync(ph->be, ph->dev, ev);
  if (rc != 0) return xs_error(rc, "xseg: device %d: waiting for an event failed: %s", d->id, be_err(d));
  return 0;
}

void xs_phys_destroy_events(xs_device_t *d) {
  xs_phys_t *ph = &d->phys;
  for (size_t i = 0; i < d->nevents; i++) ph->be->event_destroy(ph->be, ph->dev, d->events[i]);
  free(d->events);
  d->events = NULL;
  d->nevents = d->capevents = 0;
}
