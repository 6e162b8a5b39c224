/* test_steady.c: a repeating workload reaches a state that calls the driver
 * no more.
 *
 * The host backend counts every call by kind.  Each scenario runs one
 * fixed sequence of allocations and frees (the same sizes, in the same
 * order, each pass) with memory to spare; after a few warm-up passes, a
 * pass must make no create, release, map, unmap, set-access, cuMemAlloc or
 * cuMemFree call at all, in either mode.  The
 * scenarios are shaped like the workloads users repeat: a training step
 * (activations freed in reverse), generation with a cache that grows by one
 * token, and sizes drawn once at random and then replayed.  Every pass also
 * checks the data at both ends of every block, and the heap, so "no driver
 * call" cannot come from handing out memory twice.  And after
 * xseg_empty_cache with nothing live, a workload repeated in the same
 * process gets every address it got the first time.
 */
#include "testutil.h"

enum { MAX_LIVE = 512, WARM_PASSES = 7, STEADY_PASSES = 4 };

static const xs_call_t memory_calls[] = {XS_CALL_CREATE, XS_CALL_RELEASE, XS_CALL_MAP, XS_CALL_UNMAP,
                                         XS_CALL_SET_ACCESS, XS_CALL_MEM_ALLOC, XS_CALL_MEM_FREE};

static uint64_t memory_call_count(void) {
  xs_host_counters_t c = t_counters();
  uint64_t n = 0;
  for (size_t i = 0; i < sizeof memory_calls / sizeof memory_calls[0]; i++) n += c.calls[memory_calls[i]];
  return n;
}

/* One step of a workload: op > 0 allocates op bytes into slot `slot`;
 * op == 0 frees slot `slot`. */
typedef struct step_s {
  size_t bytes;
  int slot;
} step_t;

typedef struct workload_s {
  step_t steps[4096];
  int n;
} workload_t;

static void push(workload_t *w, size_t bytes, int slot) {
  XT_REQUIRE(w->n < (int)(sizeof w->steps / sizeof w->steps[0]));
  w->steps[w->n++] = (step_t){bytes, slot};
}

/* The pattern goes into the first and last 64 KiB of a block (all of a
 * smaller one): enough to catch two live blocks sharing memory, at a cost
 * that does not grow with block size. */
#define EDGE (64 * KiB)
static void mark_edges(void *p, size_t n, uint64_t tag) {
  if (n <= 2 * EDGE) {
    t_fill(p, n, tag);
    return;
  }
  size_t tail = (n - EDGE) & ~(size_t)7; /* 8-byte aligned, as blocks are */
  t_fill(p, EDGE, tag);
  t_fill((char *)p + tail, n - tail, tag + 1);
}
static int edges_intact(const void *p, size_t n, uint64_t tag) {
  if (n <= 2 * EDGE) return t_verify(p, n, tag);
  size_t tail = (n - EDGE) & ~(size_t)7;
  return t_verify(p, EDGE, tag) && t_verify((const char *)p + tail, n - tail, tag + 1);
}

/* Run one pass; every block is checked before it is freed.  where, if not
 * NULL, gets the address of each allocation, in order. */
static void run_pass(const workload_t *w, uint64_t pass, void **where) {
  static void *ptr[MAX_LIVE];
  static size_t len[MAX_LIVE];
  for (int i = 0; i < w->n; i++) {
    const step_t *s = &w->steps[i];
    if (s->bytes) {
      XT_REQUIRE(ptr[s->slot] == NULL);
      ptr[s->slot] = xseg_malloc(s->bytes, 0, NULL);
      XT_REQUIRE(ptr[s->slot] != NULL);
      if (where) *where++ = ptr[s->slot];
      len[s->slot] = s->bytes;
      mark_edges(ptr[s->slot], s->bytes, 2 * (pass * MAX_LIVE + (uint64_t)s->slot));
    } else {
      XT_REQUIRE(ptr[s->slot] != NULL);
      XT_CHECK_MSG(edges_intact(ptr[s->slot], len[s->slot], 2 * (pass * MAX_LIVE + (uint64_t)s->slot)),
                   "pass %llu step %d: slot %d lost its data", (unsigned long long)pass, i, s->slot);
      XT_CHECK_EQ(xseg_free(ptr[s->slot]), 0);
      ptr[s->slot] = NULL;
    }
  }
  for (int k = 0; k < MAX_LIVE; k++) XT_CHECK_MSG(ptr[k] == NULL, "slot %d still live after a pass", k);
  T_CHECK_HEAP();
}

/* Warm up, then require passes with no memory call of the driver. */
/* What pass `pass` called, by kind, into buf (for a failure's message). */
static void describe_calls(const xs_host_counters_t *c0, const xs_host_counters_t *c1, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof memory_calls / sizeof memory_calls[0] && at < len; i++) {
    uint64_t n = c1->calls[memory_calls[i]] - c0->calls[memory_calls[i]];
    if (n) at += (size_t)snprintf(buf + at, len - at, " %s %llu", xs_call_names[memory_calls[i]], (unsigned long long)n);
  }
}

/* Warm up (WARM_PASSES), then require STEADY_PASSES passes with no memory
 * call of the driver.  The warm-up lets conversions settle: a pass can
 * place a request on memory that another size left, and cut it (at most a
 * few passes, since conversions only refine handles; docs/design.md,
 * "Handle sizing").  A pin defers a conversion rather than saving it for
 * good: random sizes, pinned where the device holds a surplus
 * (XS_SURPLUS_DIV), made 957, 376, 14, 70 and 17 calls in passes 1-5 and
 * none from the sixth (1,195, 327, 41, 25 and none from the fifth without
 * surplus pins); since a pinned chunk takes no guest where another place
 * exists (XS_GUEST_LOOK), 943, 334, 118, 33, 22, 58 and 8 in passes 1-7
 * and none from the eighth.  How many calls the second pass of a recorded trace
 * makes is what `xseg-bench passes` reports. */
static void expect_steady(const char *what, const workload_t *w, const char *mode) {
  char conf[256];
  snprintf(conf, sizeof conf, "%s,host_capacity_mb:16384", mode);
  XT_REQUIRE(t_init(conf) == 0);
  uint64_t pass = 0;
  for (int i = 0; i < WARM_PASSES; i++) run_pass(w, ++pass, NULL);
  for (int i = 0; i < STEADY_PASSES; i++) {
    xs_host_counters_t c0 = t_counters();
    uint64_t before = memory_call_count();
    long long grows = t_stat(0, "num_grows"), conversions = t_stat(0, "num_conversions");
    run_pass(w, ++pass, NULL);
    uint64_t calls = memory_call_count() - before;
    if (calls) {
      char kinds[256];
      xs_host_counters_t c1 = t_counters();
      describe_calls(&c0, &c1, kinds, sizeof kinds);
      XT_CHECK_MSG(0, "%s (%s): pass %llu of %d steps called the driver %llu times:%s (%lld grows, %lld conversions)",
                   what, mode, (unsigned long long)pass, w->n, (unsigned long long)calls, kinds,
                   t_stat(0, "num_grows") - grows, t_stat(0, "num_conversions") - conversions);
    }
  }
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* A training step: weights stay; activations of a dozen layers are made
 * going forward and freed in reverse with their gradients, and the batch
 * alternates between two sizes the way a last partial batch does. */
static void training(workload_t *w) {
  int slot = 0;
  for (int l = 0; l < 12; l++) push(w, (size_t)(3 + l % 4) * MiB + 4096 * (size_t)l, slot++);
  int first_act = slot;
  for (int batch = 0; batch < 2; batch++) {
    size_t scale = batch ? 3 : 4;
    for (int l = 0; l < 24; l++) push(w, scale * (size_t)(256 + 96 * (l % 5)) * KiB + 512 * (size_t)l, first_act + l);
    for (int l = 23; l >= 0; l--) {
      push(w, scale * (size_t)(64 + 32 * (l % 3)) * KiB, first_act + 24);
      push(w, 0, first_act + l);
      push(w, 0, first_act + 24);
    }
  }
  for (int l = 0; l < 12; l++) push(w, 0, l);
}

/* Generation: a key/value cache grows by one token a step (a new, larger
 * block each step, the old one freed after the copy), with small scratch
 * blocks in between. */
static void generation(workload_t *w) {
  size_t per_token = 96 * KiB;
  int cache = 0, scratch = 1;
  push(w, 16 * per_token, cache);
  for (int t = 17; t <= 80; t++) {
    int next = cache == 0 ? 2 : 0;
    push(w, (size_t)t * per_token, next);
    push(w, 0, cache);
    cache = next;
    push(w, 8 * KiB + (size_t)t * 64, scratch);
    push(w, 0, scratch);
  }
  push(w, 0, cache);
}

/* Sizes drawn once at random (tiny to 64 MiB), live sets of up to 200,
 * freed in random order, then replayed identically. */
static void random_sizes(workload_t *w) {
  uint64_t seed = 0x5eedULL;
  int live[MAX_LIVE], n = 0;
  unsigned char used[MAX_LIVE] = {0};
  for (int i = 0; i < 1200; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t r = seed >> 17;
    if (n < 200 && (n == 0 || r % 3 != 0)) {
      size_t sizes[] = {1 + r % 4096, 1 + r % MiB, 1 + r % (8 * MiB), 1 + r % (64 * MiB)};
      int slot = 0;
      while (used[slot]) slot++;
      used[slot] = 1;
      push(w, sizes[(r >> 20) % 4], slot);
      live[n++] = slot;
    } else {
      int k = (int)((r >> 8) % (uint64_t)n);
      push(w, 0, live[k]);
      used[live[k]] = 0;
      live[k] = live[--n];
    }
  }
  while (n) push(w, 0, live[--n]);
}

static void run_all(void (*build)(workload_t *), const char *what) {
  static workload_t w;
  w.n = 0;
  build(&w);
  for (int m = 0; m < 2; m++) expect_steady(what, &w, t_modes[m]);
}

/* After xseg_empty_cache with nothing live (a new start), the same
 * workload gets the same addresses as in a fresh process: nothing the last
 * workload taught the allocator (how it frees, which sizes it repeats)
 * decides where the next one's blocks go.  A training step teaches that
 * neighbours are freed together, and random sizes then place by that;
 * host backend, in both modes. */
static void training_then_random(workload_t *w) {
  training(w);
  for (int k = 0; k < 2; k++) random_sizes(w);
}

XT_TEST(a_new_start_places_as_a_fresh_process) {
  static workload_t w;
  static void *fresh[4096], *again[4096];
  w.n = 0;
  training_then_random(&w);
  int nalloc = 0;
  for (int i = 0; i < w.n; i++) nalloc += w.steps[i].bytes != 0;
  XT_REQUIRE(nalloc <= 4096);
  for (int m = 0; m < 2; m++) {
    char conf[256];
    snprintf(conf, sizeof conf, "%s,host_capacity_mb:16384", t_modes[m]);
    XT_REQUIRE(t_init(conf) == 0);
    run_pass(&w, 1, fresh);
    XT_CHECK_EQ(xseg_empty_cache(0), 0);
    for (int pass = 2; pass <= 3; pass++) {
      run_pass(&w, (uint64_t)pass, again);
      XT_CHECK_EQ(xseg_empty_cache(0), 0);
      int moved = 0, first = -1;
      for (int i = 0; i < nalloc; i++)
        if (again[i] != fresh[i]) {
          if (first < 0) first = i;
          moved++;
        }
      XT_CHECK_MSG(moved == 0,
                   "%s, pass %d after a new start: %d of %d allocations at other addresses than in the first "
                   "pass (the first: allocation %d)",
                   t_modes[m], pass, moved, nalloc, first);
    }
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

XT_TEST(training_step_repeats_without_driver_calls) { run_all(training, "training step"); }
XT_TEST(generation_repeats_without_driver_calls) { run_all(generation, "generation"); }
XT_TEST(random_sizes_repeat_without_driver_calls) { run_all(random_sizes, "random sizes"); }

int main(void) {
  XT_RUN(training_step_repeats_without_driver_calls);
  XT_RUN(generation_repeats_without_driver_calls);
  XT_RUN(random_sizes_repeat_without_driver_calls);
  XT_RUN(a_new_start_places_as_a_fresh_process);
  return XT_DONE();
}
