/* test_tree.c: the free-set tree and the pointer map against simple
 * reference models, over random operation sequences.
 */
#include "block.h"
#include "xtest.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

#define N 4000

/* Reference: the smallest (size, addr) with size >= s among members. */
static xs_block_t *ref_lower_bound(xs_block_t *v, const int *in, size_t s) {
  xs_block_t *best = NULL;
  for (int i = 0; i < N; i++) {
    if (!in[i] || v[i].size < s) continue;
    if (!best || v[i].size < best->size || (v[i].size == best->size && v[i].addr < best->addr)) best = &v[i];
  }
  return best;
}

XT_TEST(tree_matches_reference) {
  static xs_block_t v[N];
  static int in[N];
  xs_tree_t t = {0};
  size_t count = 0, bytes = 0;
  for (int i = 0; i < N; i++) {
    v[i].addr = (uintptr_t)(i + 1) * 4096;
    v[i].size = (size_t)(next() % 64 + 1) * 512; /* many equal sizes: ties by address */
  }
  for (int step = 0; step < 40000; step++) {
    int i = (int)(next() % N);
    if (in[i]) {
      xs_tree_remove(&t, &v[i]);
      in[i] = 0;
      count--;
      bytes -= v[i].size;
    } else {
      xs_tree_insert(&t, &v[i]);
      in[i] = 1;
      count++;
      bytes += v[i].size;
    }
    if (step % 97 == 0) {
      const char *why = xs_tree_check(&t);
      XT_CHECK_MSG(why == NULL, "%s", why);
      size_t s = (size_t)(next() % 70) * 512;
      XT_CHECK(xs_tree_lower_bound(&t, s) == ref_lower_bound(v, in, s));
    }
    XT_CHECK_EQ(t.count, count);
  }
  XT_CHECK_EQ(t.bytes, bytes);
  /* In-order walk is sorted and complete, forwards and backwards. */
  size_t seen = 0;
  for (xs_block_t *b = xs_tree_first(&t), *prev = NULL; b; prev = b, b = xs_tree_next(b)) {
    if (prev) XT_CHECK(prev->size < b->size || (prev->size == b->size && prev->addr < b->addr));
    seen++;
  }
  XT_CHECK_EQ(seen, count);
  seen = 0;
  for (xs_block_t *b = xs_tree_last(&t); b; b = xs_tree_prev(b)) seen++;
  XT_CHECK_EQ(seen, count);
  XT_CHECK(xs_tree_lower_bound(&t, SIZE_MAX) == NULL);
}

XT_TEST(ptrmap_matches_reference) {
  static xs_block_t v[N];
  static int in[N];
  xs_ptrmap_t m;
  XT_REQUIRE(xs_ptrmap_init(&m, 16) == 0);
  size_t count = 0;
  for (int step = 0; step < 200000; step++) {
    int i = (int)(next() % N);
    /* Clustered keys, as 512-aligned block addresses are. */
    uintptr_t key = (uintptr_t)0x7f0000000000ull + (uintptr_t)i * 512;
    if (in[i]) {
      XT_CHECK(xs_ptrmap_get(&m, key) == &v[i]);
      XT_CHECK(xs_ptrmap_take(&m, key) == &v[i]);
      XT_CHECK(xs_ptrmap_get(&m, key) == NULL);
      in[i] = 0;
      count--;
    } else {
      XT_CHECK(xs_ptrmap_get(&m, key) == NULL);
      XT_CHECK(xs_ptrmap_take(&m, key) == NULL);
      XT_CHECK_EQ(xs_ptrmap_put(&m, key, &v[i]), 0);
      in[i] = 1;
      count++;
    }
  }
  XT_CHECK_EQ(m.count, count);
  for (int i = 0; i < N; i++) {
    uintptr_t key = (uintptr_t)0x7f0000000000ull + (uintptr_t)i * 512;
    XT_CHECK(xs_ptrmap_get(&m, key) == (in[i] ? &v[i] : NULL));
  }
  XT_CHECK(xs_ptrmap_get(&m, 0) == NULL);
  xs_ptrmap_destroy(&m);
}

int main(void) {
  XT_RUN(tree_matches_reference);
  XT_RUN(ptrmap_matches_reference);
  return XT_DONE();
}
