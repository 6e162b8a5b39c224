/* pool/block.h: the allocator's data structures - blocks, the free-set
 * tree, the slab that block metadata comes from, and the pointer map.
 *
 * These know nothing of devices, streams or memory sources; pool/device.h
 * builds the allocator out of them.
 *
 *   xs_block_t  a piece of a segment: live (handed to the user), free (in
 *               its pool's free set), pending (freed, waiting for events of
 *               other streams), or - expandable only - free and unmapped.
 *               Address neighbours are linked (prev/next).
 *   xs_tree_t   a free set: an intrusive red-black tree of blocks ordered by
 *               (size, address), for best fit (pool/tree.c).
 *   xs_slab_t   block metadata, never from the hot path's malloc (block.c).
 *   xs_ptrmap_t live address -> block (pool/ptrmap.c).
 */
#ifndef XSEG_POOL_BLOCK_H
#define XSEG_POOL_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "vmm.h"
#include "xseg.h"

#define XS_ALIGN ((size_t)512) /* block size and address alignment */

enum { XS_BLOCK_FREE = 0, XS_BLOCK_LIVE = 1, XS_BLOCK_PENDING = 2 };

typedef struct xs_block_s xs_block_t;
typedef struct xs_segment_s xs_segment_t;

/* ---- intrusive red-black tree of free blocks, keyed (size, addr) ------- */

typedef struct xs_rbnode_s {
  struct xs_rbnode_s *left, *right, *parent;
  int red;
} xs_rbnode_t;

typedef struct xs_tree_s {
  xs_rbnode_t *root;
  size_t count;
  size_t bytes; /* sum of block sizes */
} xs_tree_t;

void xs_tree_insert(xs_tree_t *t, xs_block_t *b);
void xs_tree_remove(xs_tree_t *t, xs_block_t *b);
/* Smallest block with size >= size (lowest address among equals), or NULL. */
xs_block_t *xs_tree_lower_bound(const xs_tree_t *t, size_t size);
xs_block_t *xs_tree_first(const xs_tree_t *t);
xs_block_t *xs_tree_last(const xs_tree_t *t);
xs_block_t *xs_tree_next(const xs_block_t *b);
xs_block_t *xs_tree_prev(const xs_block_t *b);
/* Check colours, order and counts; returns 0 or a static message. */
const char *xs_tree_check(const xs_tree_t *t);

/* ---- blocks ------------------------------------------------------------- */

struct xs_block_s {
  uintptr_t addr;
  size_t size;            /* multiple of XS_ALIGN */
  size_t requested;       /* live: bytes the user asked for */
  xs_block_t *prev, *next; /* address neighbours in the segment, NULL at its ends */
  xs_segment_t *seg;
  xs_rbnode_t node;       /* free-set node (free blocks only) */
  uint64_t free_seq;      /* stream free sequence of the latest free folded in */
  uint64_t alone_since;   /* live: the free (xs_device_t.large_frees) that left it alone on a page it
                             shared with that block, 0: none (expandable.c, exp_note_free) */
  uint64_t trace_id;      /* live: id in the trace file */
  xs_chunk_t *pin;        /* live: the large chunk it pins, charged to it (XS_PIN_DIV) */
  xseg_stream_t *uses;    /* live: other streams recorded with xseg_record_stream */
  uint32_t nuses, capuses;
  uint32_t events;        /* pending: events still to complete */
  uint8_t state;          /* XS_BLOCK_* */
  uint8_t mapped;         /* 1: every page under it is mapped (always for live/binned) */
  uint8_t split_counted;  /* free: counted in inactive_split (it had a neighbour) */
  uint8_t pin_budget;     /* live with a pin: the budget charged, an index of pinned[] */
};

static inline uintptr_t xs_block_end(const xs_block_t *b) { return b->addr + b->size; }
static inline int xs_block_is_free(const xs_block_t *b) {
  return b != NULL && b->state == XS_BLOCK_FREE;
}

/* ---- the slab ------------------------------------------------------------ */

typedef struct xs_slab_s {
  xs_block_t *free_list;
  void **chunks;
  size_t nchunks, capchunks;
  size_t live;
} xs_slab_t;

/* Make sure n blocks can be taken without failing (0 or XSEG_ENOMEM). */
int xs_slab_reserve(xs_slab_t *s, size_t n);
xs_block_t *xs_block_new(xs_slab_t *s); /* NULL only if not reserved and out of memory */
void xs_block_delete(xs_slab_t *s, xs_block_t *b);
void xs_slab_destroy(xs_slab_t *s);

/* ---- the pointer map: live address -> block ------------------------------ */

typedef struct xs_ptrmap_s {
  uintptr_t *keys; /* 0 = empty */
  xs_block_t **vals;
  size_t mask;     /* capacity - 1 */
  size_t count;
} xs_ptrmap_t;

int xs_ptrmap_init(xs_ptrmap_t *m, size_t cap);
void xs_ptrmap_destroy(xs_ptrmap_t *m);
int xs_ptrmap_put(xs_ptrmap_t *m, uintptr_t key, xs_block_t *b); /* 0 or XSEG_ENOMEM */
xs_block_t *xs_ptrmap_get(const xs_ptrmap_t *m, uintptr_t key);
xs_block_t *xs_ptrmap_take(xs_ptrmap_t *m, uintptr_t key);

#endif /* XSEG_POOL_BLOCK_H */
