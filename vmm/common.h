/* vmm/common.h: the few helpers every layer of xseg uses - asserts,
 * rounding and the counter types statistics are made of.
 *
 * It sits at the bottom of the include graph: it includes nothing of xseg
 * but the public header, so vmm/ and pool/ can both use it and every arrow
 * still points down (docs/design.md, "Layers").
 */
#ifndef XSEG_VMM_COMMON_H
#define XSEG_VMM_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* ---- asserts (STYLE.md item 6) ------------------------------------------ */

/* Print the failed expression and abort: only for states the allocator
 * itself must never reach, never for a caller's mistake. */
void xs_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define xs_assert(e) ((e) ? (void)0 : xs_assert_fail(#e, __FILE__, __LINE__))
#if defined(XSEG_DEBUG_CHECKS)
#define xs_assert_internal(e) xs_assert(e)
#define XS_DEBUG_CHECKS 1
#else
#define xs_assert_internal(e) ((void)0)
#define XS_DEBUG_CHECKS 0
#endif

/* ---- rounding -------------------------------------------------------------- */

/* x rounded up to a multiple of a (a > 0; the caller rules out overflow). */
static inline size_t xs_round_up(size_t x, size_t a) {
  /* Pages and alignments are powers of two: a mask, not a 64-bit divide. */
  return (a & (a - 1)) == 0 ? (x + a - 1) & ~(a - 1) : (x + a - 1) / a * a;
}

/* ---- counters ---------------------------------------------------------------- */

/* Torch-style statistics come as arrays over .all and two classes (small
 * and large pool in torch's words), each with .current / .peak /
 * .allocated / .freed. */
enum { XS_STAT_ALL = 0, XS_STAT_SMALL = 1, XS_STAT_LARGE = 2, XS_STAT_NTYPES = 3 };

typedef struct xs_stat_s {
  int64_t current, peak, allocated, freed;
} xs_stat_t;

/* A level with its high-water mark. */
typedef struct xs_gauge_s {
  int64_t current, peak;
} xs_gauge_t;

static inline void xs_stat_one(xs_stat_t *s, int64_t n) {
  s->current += n;
  if (n > 0) {
    s->allocated += n;
    if (s->current > s->peak) s->peak = s->current;
  } else {
    s->freed += -n;
  }
}

/* Add n (may be negative) to .all and to class cls (0 or 1). */
static inline void xs_stat_add(xs_stat_t s[XS_STAT_NTYPES], int cls, int64_t n) {
  xs_stat_one(&s[XS_STAT_ALL], n);
  xs_stat_one(&s[1 + cls], n);
}

static inline void xs_gauge_add(xs_gauge_t *g, int64_t n) {
  g->current += n;
  if (g->current > g->peak) g->peak = g->current;
}

#endif /* XSEG_VMM_COMMON_H */
