/* pool/owners.c: which device an address belongs to, without a lock.
 *
 * xseg_free(p) must find the device whose segment holds p.  Asking each
 * device in turn means taking each device's lock, so a thread freeing on
 * one GPU would wait while another GPU's allocator is busy.  This is a
 * two-level radix table over the user address space by 2 MiB granule (the
 * driver's granularity on current GPUs): a top array by 1 GiB, leaves of
 * 512 one-byte entries made on first use.  An entry holds the device + 1,
 * 0 for none, or ANY once two devices have had segments there (address
 * space reused after a segment was freed, or segments smaller than a
 * granule side by side); then the caller looks in each device, as before.
 *
 * Entries are set when a segment is made, before any pointer in it is
 * handed out, and never cleared while xseg runs (xs_owners_reset at
 * shutdown).  Writers use compare-and-swap, readers plain acquire loads:
 * no lock is shared between devices.  Addresses above 2^47 (none on
 * x86-64 and AArch64 user space today) read ANY.
 */
#include <stdlib.h>
#include <string.h>

#include "device.h"

#define GRANULE_SHIFT 21
#define LEAF_SHIFT 30
#define LEAF_SIZE (1u << (LEAF_SHIFT - GRANULE_SHIFT))
#define TOP_SIZE ((size_t)1 << (47 - LEAF_SHIFT))
#define ENTRY_ANY 0xFF

static unsigned char *top[TOP_SIZE];
static int degraded; /* a leaf could not be made: every lookup reads ANY */

/* Mark one granule as used by `device` (or by several). */
static void mark(unsigned char *e, unsigned char want) {
  unsigned char cur = __atomic_load_n(e, __ATOMIC_ACQUIRE);
  for (;;) {
    unsigned char next = cur == 0 || cur == want ? want : ENTRY_ANY;
    if (next == cur) return;
    if (__atomic_compare_exchange_n(e, &cur, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
  }
}

/* Mark entries [a, b) of top-level slot i.  A segment reserves the whole
 * device's size (vmm/segment.c), 70,000 granules on a 141 GiB GPU: a leaf
 * nobody has made yet is filled before it is published, with no atomic
 * operation per entry (one per entry took about 0.2 ms a segment, paid by
 * the first allocation of each pool); a published leaf, which another
 * device may be writing, is marked entry by entry.  0, or -1 if no leaf
 * could be made. */
static int mark_leaf(size_t i, size_t a, size_t b, unsigned char want) {
  unsigned char *leaf = __atomic_load_n(&top[i], __ATOMIC_ACQUIRE);
  if (!leaf) {
    unsigned char *fresh = calloc(LEAF_SIZE, 1);
    if (!fresh) return -1;
    memset(fresh + a, want, b - a);
    if (__atomic_compare_exchange_n(&top[i], &leaf, fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 0;
    free(fresh); /* another device published one first: mark that */
  }
  for (size_t k = a; k < b; k++) mark(&leaf[k], want);
  return 0;
}

void xs_owners_add(int device, uintptr_t lo, uintptr_t hi) {
  if (hi <= lo) return;
  unsigned char want = device >= 0 && device < ENTRY_ANY - 1 ? (unsigned char)(device + 1) : ENTRY_ANY;
  const uintptr_t g_end = ((hi - 1) >> GRANULE_SHIFT) + 1;
  for (uintptr_t g = lo >> GRANULE_SHIFT; g < g_end;) {
    size_t i = g >> (LEAF_SHIFT - GRANULE_SHIFT);
    if (i >= TOP_SIZE) return; /* reads ANY there */
    const uintptr_t first = (uintptr_t)i << (LEAF_SHIFT - GRANULE_SHIFT); /* the leaf's first granule */
    const uintptr_t stop = g_end < first + LEAF_SIZE ? g_end : first + LEAF_SIZE;
    if (mark_leaf(i, g - first, stop - first, want) != 0) {
      /* Out of host memory: this range cannot be entered, so every lookup
       * searches every device from now on. */
      __atomic_store_n(&degraded, 1, __ATOMIC_RELEASE);
      return;
    }
    g = stop;
  }
}

int xs_owner_of(uintptr_t addr) {
  size_t i = addr >> LEAF_SHIFT;
  if (i >= TOP_SIZE || __atomic_load_n(&degraded, __ATOMIC_ACQUIRE)) return XS_OWNER_ANY;
  const unsigned char *leaf = __atomic_load_n(&top[i], __ATOMIC_ACQUIRE);
  if (!leaf) return XS_OWNER_NONE;
  unsigned char e = __atomic_load_n(&leaf[(addr >> GRANULE_SHIFT) & (LEAF_SIZE - 1)], __ATOMIC_ACQUIRE);
  return e == 0 ? XS_OWNER_NONE : e == ENTRY_ANY ? XS_OWNER_ANY : (int)e - 1;
}

void xs_owners_reset(void) {
  __atomic_store_n(&degraded, 0, __ATOMIC_RELEASE);
  for (size_t i = 0; i < TOP_SIZE; i++) {
    unsigned char *leaf = __atomic_exchange_n(&top[i], NULL, __ATOMIC_ACQ_REL);
    free(leaf);
  }
}
