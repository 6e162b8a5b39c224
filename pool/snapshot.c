/* pool/snapshot.c: the snapshot (xseg_snapshot_json): every segment of a
 * device with its pages - runs of one chunk each, unmapped runs merged -
 * and its blocks, as JSON (docs/metrics.md, "The snapshot").
 *
 * A walker like the checker (check.c): it reads under the device lock and
 * changes nothing.
 */
#include <inttypes.h>
#include <stdio.h>

#include "device.h"

static const char *state_name(const xs_block_t *b) {
  if (b->state == XS_BLOCK_LIVE) return "live";
  if (b->state == XS_BLOCK_PENDING) return "pending";
  return b->mapped ? "free" : "unmapped";
}

size_t xs_snapshot_device(xs_device_t *d, char *buf, size_t len) {
  xs_sbuf_t b = {buf, 0, len};
  xs_sbuf_put(&b, "{\"device\":%d,\"mode\":\"%s\",\"page_size\":%zu,\"segments\":[", d->id,
       d->strat->name, d->vmm.gran);
  int firstseg = 1;
  for (size_t i = 0; i < d->nstreams; i++) {
    xs_stream_t *st = d->streams[i];
    for (int k = 0; k < XS_NCLASS; k++) {
      for (xs_segment_t *seg = st->pools[k].segs; seg; seg = seg->next) {
        xs_sbuf_put(&b, "%s{\"address\":%" PRIuPTR ",\"size\":%zu,\"stream\":%" PRIuPTR ",\"pool\":\"%s\","
                 "\"mapped_bytes\":%zu,\"pages\":[",
             firstseg ? "" : ",", seg->vs.base, seg->vs.size, (uintptr_t)st->s, k == XS_SMALL ? "small" : "large",
             seg->vs.mapped);
        firstseg = 0;
        /* Pages as runs of one chunk each, unmapped runs merged. */
        if (seg->binned) {
          xs_sbuf_put(&b, "{\"address\":%" PRIuPTR ",\"size\":%zu,\"mapped\":true}", seg->vs.base, seg->vs.size);
        } else {
          int firstpage = 1;
          for (size_t p = 0; p < seg->vs.npages;) {
            xs_chunk_t *c = seg->vs.pages[p].chunk;
            size_t n = 1;
            if (c)
              n = c->size / seg->vs.page;
            else
              while (p + n < seg->vs.npages && !seg->vs.pages[p + n].chunk) n++;
            xs_sbuf_put(&b, "%s{\"address\":%" PRIuPTR ",\"size\":%zu,\"mapped\":%s}", firstpage ? "" : ",",
                 seg->vs.base + p * seg->vs.page, n * seg->vs.page, c ? "true" : "false");
            firstpage = 0;
            p += n;
          }
        }
        xs_sbuf_put(&b, "],\"blocks\":[");
        for (xs_block_t *bl = seg->head; bl; bl = bl->next) {
          xs_sbuf_put(&b, "%s{\"address\":%" PRIuPTR ",\"size\":%zu,\"requested_size\":%zu,\"state\":\"%s\","
                   "\"stream\":%" PRIuPTR "}",
               bl == seg->head ? "" : ",", bl->addr, bl->size, bl->requested, state_name(bl), (uintptr_t)st->s);
        }
        xs_sbuf_put(&b, "]}");
      }
    }
  }
  xs_sbuf_put(&b, "],\"cached_handles\":[");
  for (xs_chunk_t *c = d->vmm.cache; c; c = c->next) xs_sbuf_put(&b, "%s%zu", c == d->vmm.cache ? "" : ",", c->size);
  xs_sbuf_put(&b, "]}");
  return xs_sbuf_finish(&b);
}

/* ---- the walk (xseg_walk) ------------------------------------------------------------------- */

static int walk_run(const xs_segment_t *seg, const xs_block_t *first, const xs_block_t *end, const xseg_walker_t *w,
                    void *arg) {
  const xs_stream_t *st = seg->pool->st;
  xseg_segment_info_t si = {first->addr, 0, st->s, seg->pool->cls == XS_LARGE, !seg->binned, st->pool};
  for (const xs_block_t *b = first; b != end; b = b->next) si.size += b->size;
  int rc = w->segment ? w->segment(arg, &si) : 0;
  for (const xs_block_t *b = first; b != end && rc == 0; b = b->next) {
    xseg_block_info_t bi = {b->addr, b->size, b->requested,
                            b->state == XS_BLOCK_LIVE ? XSEG_BLOCK_LIVE
                            : b->state == XS_BLOCK_PENDING ? XSEG_BLOCK_PENDING : XSEG_BLOCK_FREE};
    rc = w->block ? w->block(arg, &bi) : 0;
  }
  return rc;
}

/* Segments as PyTorch's snapshot shows them: each maximal run of mapped
 * blocks of an xseg segment (a binned segment is one run). */
int xs_walk_device(xs_device_t *d, const xseg_walker_t *w, void *arg) {
  for (size_t i = 0; i < d->nstreams; i++) {
    for (int k = 0; k < XS_NCLASS; k++) {
      for (const xs_segment_t *seg = d->streams[i]->pools[k].segs; seg; seg = seg->next) {
        const xs_block_t *b = seg->head;
        while (b) {
          if (!b->mapped) {
            b = b->next;
            continue;
          }
          const xs_block_t *e = b;
          while (e && e->mapped) e = e->next;
          int rc = walk_run(seg, b, e, w, arg);
          if (rc != 0) return rc;
          b = e;
        }
      }
    }
  }
  return 0;
}
