/* pool/ptrmap.c: the map from a live pointer to its block.
 *
 * xseg_free receives only a pointer; this map finds its block in O(1).
 * Open addressing with linear probing over a power-of-two table, load kept
 * under 1/2; deletion shifts later entries back (no tombstones), so lookups
 * never degrade with churn.  Keys are block addresses, never 0.  Addresses
 * are 512-byte aligned, so the low bits are dropped before hashing.
 */
#include <stdlib.h>

#include "block.h"

static inline size_t slot_of(uintptr_t key, size_t mask) {
  return (size_t)(((uint64_t)(key >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

int xs_ptrmap_init(xs_ptrmap_t *m, size_t cap) {
  size_t n = 64;
  while (n < cap) n <<= 1;
  m->keys = calloc(n, sizeof *m->keys);
  m->vals = calloc(n, sizeof *m->vals);
  if (!m->keys || !m->vals) {
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    return XSEG_ENOMEM;
  }
  m->mask = n - 1;
  m->count = 0;
  return 0;
}

void xs_ptrmap_destroy(xs_ptrmap_t *m) {
  free(m->keys);
  free(m->vals);
  m->keys = NULL;
  m->vals = NULL;
  m->mask = 0;
  m->count = 0;
}

static int rehash(xs_ptrmap_t *m, size_t n) {
  xs_ptrmap_t nm;
  if (xs_ptrmap_init(&nm, n) != 0) return XSEG_ENOMEM;
  for (size_t i = 0; i <= m->mask; i++) {
    if (m->keys[i] == 0) continue;
    size_t s = slot_of(m->keys[i], nm.mask);
    while (nm.keys[s] != 0) s = (s + 1) & nm.mask;
    nm.keys[s] = m->keys[i];
    nm.vals[s] = m->vals[i];
  }
  nm.count = m->count;
  xs_ptrmap_destroy(m);
  *m = nm;
  return 0;
}

int xs_ptrmap_put(xs_ptrmap_t *m, uintptr_t key, xs_block_t *b) {
  if ((m->count + 1) * 2 > m->mask + 1 && rehash(m, (m->mask + 1) * 2) != 0) return XSEG_ENOMEM;
  size_t s = slot_of(key, m->mask);
  while (m->keys[s] != 0 && m->keys[s] != key) s = (s + 1) & m->mask;
  if (m->keys[s] == 0) m->count++;
  m->keys[s] = key;
  m->vals[s] = b;
  return 0;
}

xs_block_t *xs_ptrmap_get(const xs_ptrmap_t *m, uintptr_t key) {
  if (key == 0 || m->keys == NULL) return NULL;
  size_t s = slot_of(key, m->mask);
  while (m->keys[s] != 0) {
    if (m->keys[s] == key) return m->vals[s];
    s = (s + 1) & m->mask;
  }
  return NULL;
}

xs_block_t *xs_ptrmap_take(xs_ptrmap_t *m, uintptr_t key) {
  if (key == 0 || m->keys == NULL) return NULL;
  size_t s = slot_of(key, m->mask);
  while (m->keys[s] != key) {
    if (m->keys[s] == 0) return NULL;
    s = (s + 1) & m->mask;
  }
  xs_block_t *b = m->vals[s];
  /* Backward shift: move up every later entry of the cluster whose home
   * slot is not between the hole and its current slot. */
  size_t hole = s, j = s;
  for (;;) {
    j = (j + 1) & m->mask;
    if (m->keys[j] == 0) break;
    size_t home = slot_of(m->keys[j], m->mask);
    int movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
    if (movable) {
      m->keys[hole] = m->keys[j];
      m->vals[hole] = m->vals[j];
      hole = j;
    }
  }
  m->keys[hole] = 0;
  m->vals[hole] = NULL;
  m->count--;
  return b;
}
