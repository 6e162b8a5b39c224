/* test/testutil.h: helpers shared by the allocator tests: (re)initialising
 * the library on the host backend, data patterns, and the host backend's
 * counters.  Header-only, static functions.
 */
#ifndef XSEG_TEST_TESTUTIL_H
#define XSEG_TEST_TESTUTIL_H

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host_backend.h"
#include "init.h"
#include "xseg.h"
#include "xtest.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* Iteration counts scaled by XSEG_TEST_SCALE (percent, default 100), so
 * sanitizer builds can run the same tests shorter. */
static inline long t_scale(long n) {
  const char *e = getenv("XSEG_TEST_SCALE");
  long pct = e ? strtol(e, NULL, 10) : 100;
  if (pct <= 0) pct = 100;
  long r = n * pct / 100;
  return r > 0 ? r : 1;
}

/* The two modes every allocator test runs in. */
static const char *const t_modes[2] = {"expandable_segments:True", "expandable_segments:False"};

/* Initialise on the host backend with extra configuration; 0 on success. */
static inline int t_init(const char *extra) {
  char conf[1024];
  snprintf(conf, sizeof conf, "backend:host,%s", extra ? extra : "");
  int rc = xseg_init(conf);
  if (rc != 0) fprintf(stderr, "xseg_init(\"%s\"): %s\n", conf, xseg_last_error());
  return rc;
}

static inline xs_backend_t *t_backend(void) { return xs_current_backend(); }

static inline xs_host_counters_t t_counters(void) {
  xs_host_counters_t c;
  memset(&c, 0, sizeof c);
  xs_backend_t *b = t_backend();
  if (b && xs_host_is(b)) xs_host_counters(b, -1, &c);
  return c;
}

/* A cheap, position-dependent pattern: word i of a block tagged t. */
static inline uint64_t t_word(uint64_t tag, size_t i) { return (tag * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull); }

static inline void t_fill(void *p, size_t n, uint64_t tag) {
  uint64_t *w = p;
  for (size_t i = 0; i < n / 8; i++) w[i] = t_word(tag, i);
  unsigned char *c = p;
  for (size_t i = n / 8 * 8; i < n; i++) c[i] = (unsigned char)tag;
}

static inline int t_verify(const void *p, size_t n, uint64_t tag) {
  const uint64_t *w = p;
  for (size_t i = 0; i < n / 8; i++)
    if (w[i] != t_word(tag, i)) return 0;
  const unsigned char *c = p;
  for (size_t i = n / 8 * 8; i < n; i++)
    if (c[i] != (unsigned char)tag) return 0;
  return 1;
}

/* Heap check with the message on failure. */
#define T_CHECK_HEAP()                                                       \
  do {                                                                       \
    int rc_ = xseg_check_heap(-1);                                           \
    XT_CHECK_MSG(rc_ == 0, "heap check: %s", xseg_last_error());             \
  } while (0)

/* A JSON number at a dotted path of xseg_stats_json's output, e.g.
 * "allocated_bytes.all.current".  Good enough for our own flat output;
 * test_stats parses the JSON properly. */
static inline long long t_json_num(const char *buf, const char *path);
static inline long long t_stat(int dev, const char *path) {
  static char buf[1 << 16];
  if (xseg_stats_json(dev, buf, sizeof buf) >= sizeof buf) return -1;
  long long v = t_json_num(buf, path);
  return v == LLONG_MIN ? -1 : v;
}

/* The number after a dotted path's keys in JSON text, found key by key
 * with strstr; LLONG_MIN if a key is missing. */
static inline long long t_json_num(const char *buf, const char *path) {
  const char *p = buf, *s = path;
  char key[128];
  while (*s) {
    const char *dot = strchr(s, '.');
    size_t n = dot ? (size_t)(dot - s) : strlen(s);
    snprintf(key, sizeof key, "\"%.*s\":", (int)n, s);
    p = strstr(p, key);
    if (!p) return LLONG_MIN;
    p += strlen(key);
    s += n + (dot ? 1 : 0);
  }
  return strtoll(p, NULL, 10);
}

/* A seeded generator (splitmix64) for the randomized tests: set t_rng to
 * the seed, then draw. */
static uint64_t t_rng;
static inline uint64_t t_rnd64(void) {
  uint64_t z = (t_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline uint64_t t_below(uint64_t n) { return t_rnd64() % n; }

/* Run fn(arg) in a child process, so that a crash (an allocator assert, a
 * write to a page it left unmapped) fails only that case, with its name,
 * and the other cases still run.  The child's checks and failures come back
 * through a shared page and count as ours; a crash counts as a failure.
 * Returns 1 if the child finished, 0 if it crashed.  Without a shared page
 * fn runs in this process. */
typedef struct t_child_s {
  int checks, failures, done;
} t_child_t;

static inline int t_forked(void (*fn)(void *), void *arg, const char *what) {
  static t_child_t *sh;
  if (!sh) {
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) sh = NULL;
  }
  if (!sh) {
    fn(arg);
    return 1;
  }
  memset(sh, 0, sizeof *sh);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    xt_checks = xt_failures = 0;
    fn(arg);
    sh->checks = xt_checks;
    sh->failures = xt_failures;
    sh->done = 1;
    fflush(stdout);
    fflush(stderr);
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    XT_CHECK_MSG(0, "%s: cannot run the child: %s", what, strerror(errno));
    return 0;
  }
  xt_checks += sh->checks + 1;
  xt_failures += sh->failures;
  if (!sh->done) {
    xt_failures++;
    fprintf(stderr, "%s: CRASHED (%s %d)\n", what, WIFSIGNALED(status) ? "signal" : "exit",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  return sh->done;
}

#endif /* XSEG_TEST_TESTUTIL_H */
