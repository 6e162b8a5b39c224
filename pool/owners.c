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

#include "device.h"

#define GRANULE_SHIFT 21
#define LEAF_SHIFT 30
#define LEAF_SIZE (1u << (LEAF_SHIFT - GRANULE_SHIFT))
#define TOP_SIZE ((size_t)1 << (47 - LEAF_SHIFT))
#define ENTRY_ANY 0xFF

static unsigned char *top[TOP_SIZE];
static int degraded; /* a leaf could not be made: every lookup reads ANY */

static unsigned char *leaf_for(size_t i) {
  unsigned char *leaf = __atomic_load_n(&top[i], __ATOMIC_ACQUIRE);
  if (leaf) return leaf;
  unsigned char *fresh = calloc(LEAF_SIZE, 1);
  if (!fresh) return NULL;
  if (__atomic_compare_exchange_n(&top[i], &leaf, fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return fresh;
  free(fresh); /* another device made it first */
  return leaf;
}

/* Mark one granule as used by `device` (or by several). */
static int mark(unsigned char *e, unsigned char want) {
  unsigned char cur = __atomic_load_n(e, __ATOMIC_ACQUIRE);
  for (;;) {
    unsigned char next = cur == 0 || cur == want ? want : ENTRY_ANY;
    if (next == cur) return 0;
    if (__atomic_compare_exchange_n(e, &cur, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 0;
  }
}

void xs_owners_add(int device, uintptr_t lo, uintptr_t hi) {
  if (hi <= lo) return;
  unsigned char want = device >= 0 && device < ENTRY_ANY - 1 ? (unsigned char)(device + 1) : ENTRY_ANY;
  for (uintptr_t g = lo >> GRANULE_SHIFT; g <= (hi - 1) >> GRANULE_SHIFT; g++) {
    size_t i = g >> (LEAF_SHIFT - GRANULE_SHIFT);
    if (i >= TOP_SIZE) return; /* reads ANY there */
    unsigned char *leaf = leaf_for(i);
    if (!leaf) {
      /* Out of host memory: this range cannot be entered, so every lookup
       * searches every device from now on. */
      __atomic_store_n(&degraded, 1, __ATOMIC_RELEASE);
      return;
    }
    mark(&leaf[g & (LEAF_SIZE - 1)], want);
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
