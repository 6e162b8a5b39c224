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

/* ---- replay (frag.c) --------------------------------------------------------- */

typedef struct replay_s {
  int ok;             /* 1: every allocation succeeded */
  size_t failed_at;   /* event index of the first failure */
  double seconds;     /* wall time of the replay */
  uint64_t held_peak; /* xseg's held_bytes.peak */
} replay_t;

/* Replay through xseg under configuration `conf` (xseg_init). */
replay_t replay_xseg(const trace_t *t, const char *conf, int keep_running);

/* Smallest host_capacity_mb (a multiple of step_mb) in which the trace
 * replays under `conf`, by bisection.  Returns 0 if even hi_mb fails. */
size_t min_budget_mb(const trace_t *t, const char *conf, size_t step_mb, int *replays);

/* ---- output -------------------------------------------------------------------- */

typedef struct opts_s {
  int host;       /* host backend */
  int quick;
  const char *json;
  const char *extra; /* more configuration for every run */
} opts_t;

extern FILE *g_json; /* NULL when --json not given */
void json_begin(const char *section);
void json_end(void);

double now_s(void);

#endif
