/* benchmarks/clock.c: the one clock every part of xseg-bench times with.
 *
 * A file of its own so that the layers that time things (micro.c, frag.c,
 * cuda_alt.c, main.c) depend on it and not on each other.  CLOCK_MONOTONIC:
 * immune to clock adjustments, and about 20 ns a read, which is why
 * micro.c times batches rather than single calls.
 */
#include <time.h>

#include "bench.h"

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
