/* benchmarks/bench.h: what the parts of xseg-bench share. */
#ifndef XSEG_BENCH_H
#define XSEG_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xseg.h"

/* ---- traces (trace.c) ---------------------------------------------------- */

typedef struct ev_s {
  uint32_t slot;   /* dense index of the allocation id */
  uint8_t alloc;   /* 1 alloc, 0 free */
  uint8_t stream;  /* 0 = default stream */
  uint64_t bytes;  /* alloc only */
} ev_t;

typedef struct trace_s {
  char name[128];
  ev_t *ev;
  size_t nev;
  size_t nslots;       /* distinct ids */
  uint64_t peak_live;  /* max over time of the requested bytes live */
  uint64_t allocs, frees;
  int nstreams;        /* highest stream number + 1 */
} trace_t;

/* Load a trace; 0 or -1 with a message on stderr. */
int trace_load(const char *path, trace_t *t);
void trace_free(trace_t *t);

/* What a replay reports, whichever allocator ran it (frag.c, cuda_alt.c). */
typedef struct replay_s {
  int ok;             /* 1: every allocation succeeded */
  size_t failed_at;   /* event index of the first failure */
  double seconds;     /* wall time of the replay */
  uint64_t held_peak; /* xseg's held_bytes.peak (xseg replays only) */
} replay_t;

/* ---- xseg replay and budgets (frag.c) -------------------------------------------------- */

/* --lag K (host backend): stream work completes only every K events. */
extern int bench_lag;

/* Replay through xseg under configuration `conf` (xseg_init). */
replay_t replay_xseg(const trace_t *t, const char *conf, int keep_running);

/* Does the trace replay in a budget of budget_mb MiB?  The caller decides
 * what "the budget" means and which allocator runs. */
typedef int (*budget_fits_fn)(void *ctx, size_t budget_mb);

/* Smallest budget (a multiple of step_mb) for which fits() holds, by
 * bisection between the peak and 16 x the peak; 0 if none fits. */
size_t min_budget_mb(uint64_t peak_live, size_t step_mb, budget_fits_fn fits, void *ctx, int *replays);

/* ---- the GPU's own allocators (cuda_alt.c) ------------------------------------------ */

int gpu_open(void);
void gpu_describe(char *buf, size_t len);
size_t gpu_free_bytes(void);
void *gpu_new_stream(void);
int gpu_fill(size_t budget, uint64_t *handle);
void gpu_unfill(uint64_t handle);
double gpu_time_malloc_free(size_t size, int reps, double *free_s); /* seconds per call */
replay_t replay_cuda(const trace_t *t, int kind); /* 0: cuMemAlloc, 1: cuMemAllocAsync */

/* ---- micro-benchmarks (micro.c) ----------------------------------------------------- */

typedef struct latency_s {
  size_t size;
  double median_ns, p99_ns;
} latency_t;

typedef struct scale_s {
  size_t live;
  double pair_ns, churn_ns;
} scale_t;

typedef struct growth_s {
  size_t size;
  int count;
  double median_us, gbps;
} growth_t;

int bench_latency(const char *conf, const size_t *sizes, int nsizes, int samples, latency_t *out);
int bench_scale(const char *conf, size_t live, int samples, scale_t *out);
int bench_growth(const char *conf, size_t size, size_t total, growth_t *out);
/* streams: one per thread (real CUDA streams on the GPU; any distinct
 * values on the host backend). */
int bench_threads(const char *conf, int nthreads, int ops, void *const *streams, double *mops);
double pct(double *v, size_t n, double q);

/* ---- the clock (clock.c) ---------------------------------------------------------------- */

double now_s(void); /* CLOCK_MONOTONIC, seconds */

#endif
