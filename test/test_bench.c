/* test_bench.c: xseg-bench's layers, each linked alone.
 *
 * Built twice (test/CMakeLists.txt).  test_bench links frag.c, trace.c and
 * clock.c and none of cuda_alt.c or main.c, so a call from the replay
 * layer into the GPU's allocators fails to link; it tests the bisection.
 * test_bench_cuda_alt (BENCH_CUDA_ALT) links cuda_alt.c and clock.c alone,
 * so a call back into frag.c fails to link the same way.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "xtest.h"

#ifdef BENCH_CUDA_ALT

/* Without a GPU every entry point fails cleanly; with one, a tiny replay
 * through cuMemAlloc runs.  Either way the layer stands alone. */
XT_TEST(cuda_alt_alone) {
  ev_t ev[2] = {{0, 1, 0, 4096}, {0, 0, 0, 0}};
  trace_t t = {.name = "tiny", .ev = ev, .nev = 2, .nslots = 1, .peak_live = 4096, .allocs = 1, .frees = 1,
               .nstreams = 1};
  replay_t r = replay_cuda(&t, 0);
  if (gpu_open() != 0) {
    XT_CHECK(!r.ok);
    XT_CHECK_EQ(gpu_free_bytes(), 0);
    XT_CHECK(gpu_new_stream() == NULL);
  } else {
    XT_CHECK(r.ok);
  }
}

int main(void) {
  XT_RUN(cuda_alt_alone);
  return XT_DONE();
}

#else

/* ---- the bisection ------------------------------------------------------------------------ */

typedef struct fits_s {
  size_t need; /* smallest budget that fits, MiB; 0: nothing fits */
  int calls;
} fits_t;

static int fits_from(void *ctx, size_t mb) {
  fits_t *f = ctx;
  f->calls++;
  return f->need && mb >= f->need;
}

XT_TEST(bisection_finds_the_threshold) {
  const size_t peaks[] = {1, 100, 4665, 8192, 60019};
  for (size_t p = 0; p < sizeof peaks / sizeof peaks[0]; p++) {
    size_t peak = peaks[p];
    const size_t needs[] = {peak, peak + 1, peak + peak / 100 + 3, peak + peak / 16 + 7, 3 * peak + 5, 15 * peak};
    for (size_t n = 0; n < sizeof needs / sizeof needs[0]; n++) {
      fits_t f = {needs[n], 0};
      int replays = 0;
      size_t got = min_budget_mb((uint64_t)peak << 20, 2, fits_from, &f, &replays);
      XT_CHECK_MSG(got >= needs[n] && got < needs[n] + 2, "peak %zu need %zu: got %zu", peak, needs[n], got);
      XT_CHECK_EQ(replays, f.calls);
      XT_CHECK_MSG(replays < 40, "peak %zu need %zu: %d replays", peak, needs[n], replays);
    }
  }
}

/* A trace that fits nowhere (every replay fails) ends the search at 16 x
 * the peak; the limit once moved with the bisection and never stopped it. */
XT_TEST(bisection_gives_up) {
  fits_t f = {0, 0};
  int replays = 0;
  XT_CHECK_EQ(min_budget_mb((uint64_t)4096 << 20, 2, fits_from, &f, &replays), 0);
  XT_CHECK_MSG(replays < 40, "%d replays", replays);
}

int main(void) {
  XT_RUN(bisection_finds_the_threshold);
  XT_RUN(bisection_gives_up);
  return XT_DONE();
}

#endif
