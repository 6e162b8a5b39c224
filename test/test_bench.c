/* test_bench.c: xseg-bench's layers, each linked alone.
 *
 * Built twice (test/CMakeLists.txt).  test_bench links frag.c, conf.c,
 * trace.c and clock.c and none of cuda_alt.c or main.c, so a call from the
 * replay layer into the GPU's allocators fails to link; it tests the
 * bisection, the configuration merge and the trace lookup.
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
      XT_CHECK_MSG(replays < 40 + 16, "peak %zu need %zu: %d replays", peak, needs[n], replays); /* bisection, then 16 budgets up */
    }
  }
}

/* A trace whose replay fits in a budget but fails in some just above it
 * (the path of a replay depends on its budget): the figure is where the
 * budgets fit for good, not the lucky edge bisection may meet first. */
typedef struct holes_s {
  size_t need;     /* fits from here up, but for the holes */
  size_t holes[3]; /* budgets at or above need that fail */
  int calls;
} holes_t;

static int fits_holes(void *ctx, size_t mb) {
  holes_t *h = ctx;
  h->calls++;
  for (int i = 0; i < 3; i++)
    if (mb == h->holes[i]) return 0;
  return mb >= h->need;
}

XT_TEST(bisection_skips_budgets_that_fit_by_luck) {
  /* Fits at 4754; fails at 4756, 4760 and 4770; fits from 4772 up. */
  holes_t h = {4754, {4756, 4760, 4770}, 0};
  int replays = 0;
  XT_CHECK_EQ(min_budget_mb((uint64_t)4718 << 20, 2, fits_holes, &h, &replays), 4772);
  XT_CHECK_EQ(replays, h.calls);
  /* A hole further up than the window looks is not seen: the window is
   * what the figure promises (16 budgets 2 MiB apart for this peak). */
  holes_t far = {4754, {4790, 0, 0}, 0};
  XT_CHECK_EQ(min_budget_mb((uint64_t)4718 << 20, 2, fits_holes, &far, &replays), 4754);
  /* One hole right above the edge: the next budget that fits. */
  holes_t one = {4754, {4756, 0, 0}, 0};
  XT_CHECK_EQ(min_budget_mb((uint64_t)4718 << 20, 2, fits_holes, &one, &replays), 4758);
}

/* A trace that fits nowhere (every replay fails) ends the search at 16 x
 * the peak; the limit once moved with the bisection and never stopped it. */
XT_TEST(bisection_gives_up) {
  fits_t f = {0, 0};
  int replays = 0;
  XT_CHECK_EQ(min_budget_mb((uint64_t)4096 << 20, 2, fits_from, &f, &replays), 0);
  XT_CHECK_MSG(replays < 40, "%d replays", replays);
}

/* ---- the configuration merge --------------------------------------------------------------- */

static char *text_of(const conf_t *c) {
  static char buf[1024];
  conf_text(c, buf, sizeof buf);
  return buf;
}

XT_TEST(conf_merges_by_key_and_layer) {
  conf_t c = {0};
  XT_CHECK_EQ(conf_add(&c, "backend:host,host_capacity_mb:16384", CONF_BENCH), 0);
  XT_CHECK_EQ(conf_add(&c, "verbose:1, roundup_power2_divisions : [256:1, 512:2,>:8] ,host_capacity_mb:8192,",
                       CONF_ENV),
              0);
  XT_CHECK_EQ(conf_add(&c, "host_capacity_mb:4096", CONF_OPTION), 0);
  /* A lower layer added later changes nothing the user set. */
  XT_CHECK_EQ(conf_add(&c, "host_capacity_mb:1,verbose:0,max_split_size_mb:64", CONF_BENCH), 0);
  XT_CHECK(!strcmp(text_of(&c), "backend:host,host_capacity_mb:4096,verbose:1,"
                                "roundup_power2_divisions:[256:1,512:2,>:8],max_split_size_mb:64"));
  int src = -1;
  XT_CHECK(!strcmp(conf_get(&c, "roundup_power2_divisions", &src), "[256:1,512:2,>:8]"));
  XT_CHECK_EQ(src, CONF_ENV);
  XT_CHECK(!strcmp(conf_get(&c, "host_capacity_mb", &src), "4096"));
  XT_CHECK_EQ(src, CONF_OPTION);
  XT_CHECK(conf_get(&c, "trace_file", NULL) == NULL);

  char d[1024];
  conf_describe(&c, d, sizeof d);
  XT_CHECK_MSG(!strcmp(d, "backend:host (xseg-bench), max_split_size_mb:64 (xseg-bench), verbose:1 (XSEG_ALLOC_CONF), "
                          "roundup_power2_divisions:[256:1,512:2,>:8] (XSEG_ALLOC_CONF), host_capacity_mb:4096 (--conf)"),
               "%s", d);

  /* A run: a section's default sits under the user's keys, what it
   * measures over them. */
  char *run;
  XT_CHECK_EQ(conf_run_text(&c, "host_capacity_mb:65536,page_size_mb:4", "expandable_segments:False,verbose:0", &run), 0);
  XT_CHECK_MSG(!strcmp(run, "backend:host,host_capacity_mb:4096,verbose:0,roundup_power2_divisions:[256:1,512:2,>:8],"
                            "max_split_size_mb:64,page_size_mb:4,expandable_segments:False"),
               "%s", run);
  /* The library takes the merged text as it is. */
  XT_CHECK_EQ(xseg_init(run), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  free(run);
  conf_free(&c);
}

XT_TEST(conf_check_uses_the_library_parser) {
  XT_CHECK_EQ(conf_check("verbose:1,roundup_power2_divisions:[1:2,>:4]", "test"), 0);
  XT_CHECK_EQ(conf_check("", "test"), 0);
  XT_CHECK(conf_check("foo:bar", "test") != 0);
  XT_CHECK(conf_check("roundup_power2_divisions:[1:2", "test") != 0);
  XT_CHECK(conf_check("host_capacity_mb:0", "test") != 0);
}

/* ---- traces ---------------------------------------------------------------------------------- */

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

XT_TEST(traces_by_name_and_path) {
  char dir[] = "/tmp/xseg-test-bench-XXXXXX";
  XT_REQUIRE(mkdtemp(dir) != NULL);
  char file[128], path[4096], sub[160];
  snprintf(file, sizeof file, "%s/tiny.trace", dir);
  write_file(file, "# a trace\na 1 3145728\na 2 1048576 1\nf 1\na 3 2097152\nf 2 1\nf 3\n");

  XT_CHECK_EQ(trace_find("tiny", dir, path, sizeof path), 0); /* the name a table prints */
  XT_CHECK(!strcmp(path, file));
  XT_CHECK_EQ(trace_find("tiny.trace", dir, path, sizeof path), 0);
  XT_CHECK(!strcmp(path, file));
  XT_CHECK_EQ(trace_find(file, "/nonexistent", path, sizeof path), 0); /* a path */
  XT_CHECK(!strcmp(path, file));
  XT_CHECK(trace_find("nosuch", dir, path, sizeof path) != 0);
  XT_CHECK(trace_find("/nonexistent/tiny", dir, path, sizeof path) != 0); /* a path is not looked up */
  snprintf(sub, sizeof sub, "%s/sub", dir);
  XT_CHECK_EQ(mkdir(sub, 0700), 0);
  XT_CHECK(trace_find(sub, dir, path, sizeof path) != 0); /* a directory is not a trace */

  trace_t t;
  XT_REQUIRE(trace_load(file, &t) == 0);
  XT_CHECK(!strcmp(t.name, "tiny"));
  XT_CHECK_EQ(t.nev, 6);
  XT_CHECK_EQ(t.peak_live, 4u << 20);
  XT_CHECK_EQ(t.nstreams, 2);
  trace_prefix(&t, 3); /* a 1, a 2, f 1 */
  XT_CHECK_EQ(t.nev, 3);
  XT_CHECK_EQ(t.peak_live, 4u << 20);
  XT_CHECK_EQ(t.allocs, 2);
  XT_CHECK_EQ(t.frees, 1);
  trace_prefix(&t, 1);
  XT_CHECK_EQ(t.peak_live, 3u << 20);
  XT_CHECK_EQ(t.nstreams, 1);
  trace_free(&t);

  rmdir(sub);
  remove(file);
  rmdir(dir);
}

int main(void) {
  XT_RUN(bisection_finds_the_threshold);
  XT_RUN(bisection_skips_budgets_that_fit_by_luck);
  XT_RUN(bisection_gives_up);
  XT_RUN(conf_merges_by_key_and_layer);
  XT_RUN(conf_check_uses_the_library_parser);
  XT_RUN(traces_by_name_and_path);
  return XT_DONE();
}

#endif
