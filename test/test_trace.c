/* test_trace.c: the trace recorder (trace_file:PATH, docs/metrics.md,
 * "Trace format").
 *
 *  - A random sequence over several streams (NULL included), with frees,
 *    record_stream/pending frees and failed allocations, is recorded; the
 *    file is read back mid-run (after the flush at_exit does) and after
 *    xseg_shutdown.  Every line must be `a <id> <bytes> [stream]`,
 *    `f <id> [stream]` or a `#` comment; ids are unique among live
 *    allocations (and, as the recorder numbers them, increasing); the sizes,
 *    the frees, the stream numbers and the live set must be what the test
 *    did.  Replaying the trace through xseg_malloc/xseg_free after a fresh
 *    initialisation gives the same requested_bytes and allocation counts.
 *  - Threads on their own streams, enough lines to fill the 256 KiB buffer
 *    several times: each stream's subsequence is that thread's.
 *  - A process that exits without xseg_shutdown leaves a complete trace.
 *  - An unwritable trace_file makes initialisation fail, naming the key.
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "trace.h"

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap + 1);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  *len = n;
  return buf;
}

/* ---- reading a trace -------------------------------------------------------- */

typedef struct tev_s {
  char kind;            /* 'a' or 'f' */
  unsigned long long id;
  unsigned long long bytes;
  int stream;           /* 'a': 0 when absent; 'f': -1 when absent */
} tev_t;

typedef struct trace_s {
  tev_t *ev;
  size_t n, cap;
  int comments;
} trace_t;

/* A decimal number without sign or leading zeros, ending at a space or the
 * end of the line. */
static int rd_num(const char **p, const char *end, unsigned long long *out) {
  const char *s = *p;
  if (s >= end || *s < '0' || *s > '9') return 0;
  if (*s == '0' && s + 1 < end && s[1] >= '0' && s[1] <= '9') return 0;
  unsigned long long v = 0;
  while (s < end && *s >= '0' && *s <= '9') {
    unsigned d = (unsigned)(*s - '0');
    if (v > (~0ull - d) / 10) return 0;
    v = v * 10 + d;
    s++;
  }
  *p = s;
  *out = v;
  return 1;
}

/* Parse a whole trace strictly; 0 with a message on the first bad line. */
static int parse_trace(const char *text, size_t len, trace_t *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  if (len == 0 || text[len - 1] != '\n') {
    snprintf(err, errlen, "the trace does not end with a newline");
    return 0;
  }
  const char *p = text, *end = text + len;
  int line = 0;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    line++;
    if (*p == '#') {
      t->comments++;
      p = nl + 1;
      continue;
    }
    tev_t e = {0, 0, 0, -1};
    const char *s = p;
    int ok = 0;
    if ((*s == 'a' || *s == 'f') && s + 1 < nl && s[1] == ' ') {
      e.kind = *s;
      s += 2;
      ok = rd_num(&s, nl, &e.id);
      if (ok && e.kind == 'a') ok = s < nl && *s++ == ' ' && rd_num(&s, nl, &e.bytes);
      if (ok && s < nl) {
        unsigned long long st = 0;
        ok = *s++ == ' ' && rd_num(&s, nl, &st) && st >= 1 && st < 100000;
        e.stream = (int)st;
      } else if (e.kind == 'a') {
        e.stream = 0;
      }
      ok = ok && s == nl;
    }
    if (!ok) {
      snprintf(err, errlen, "line %d is not an event: \"%.*s\"", line, (int)(nl - p), p);
      free(t->ev);
      t->ev = NULL;
      return 0;
    }
    if (t->n == t->cap) {
      t->cap = t->cap ? t->cap * 2 : 1024;
      t->ev = realloc(t->ev, t->cap * sizeof *t->ev);
      if (!t->ev) abort();
    }
    t->ev[t->n++] = e;
    p = nl + 1;
  }
  return 1;
}

static int read_trace(const char *path, trace_t *t) {
  size_t len;
  char *text = slurp(path, &len);
  XT_CHECK_MSG(text != NULL, "cannot read %s", path);
  if (!text) return 0;
  char err[300];
  int ok = parse_trace(text, len, t, err, sizeof err);
  XT_CHECK_MSG(ok, "%s: %s", path, err);
  XT_CHECK_MSG(!ok || strncmp(text, "#", 1) == 0, "%s: no header comment", path);
  free(text);
  return ok;
}

/* ---- what the test did -------------------------------------------------------- */

#define NSTR 5
#define HELD ((xseg_stream_t)0x7000) /* recorded on, never allocates */
static const xseg_stream_t g_str[NSTR] = {NULL, (xseg_stream_t)0x100, (xseg_stream_t)0x200,
                                         (xseg_stream_t)0x300, (xseg_stream_t)0x400};
#define MAXLIVE 64
#define NOPS 2500

typedef struct done_s {
  char kind;
  unsigned long long id, bytes;
  int stream; /* the stream's number in the trace */
} done_t;

static struct {
  done_t *log;
  size_t n, cap;
  struct {
    void *p;
    unsigned long long id;
    size_t n;
  } live[MAXLIVE];
  int nlive;
  int number[NSTR]; /* the trace's number of each stream, 0 until first used */
  int nnumbers;
  unsigned long long next_id;
} T;

static void log_event(char kind, unsigned long long id, unsigned long long bytes, int stream) {
  if (T.n == T.cap) {
    T.cap = T.cap ? T.cap * 2 : 1024;
    T.log = realloc(T.log, T.cap * sizeof *T.log);
    if (!T.log) abort();
  }
  T.log[T.n++] = (done_t){kind, id, bytes, stream};
}


static size_t rnd_size(void) {
  uint64_t k = t_below(10);
  if (k < 1) return (size_t)t_below(2);
  if (k < 5) return (size_t)t_below(8192);
  if (k < 8) return (size_t)t_below(2 * MiB);
  return 2 * MiB + (size_t)t_below(30 * MiB);
}

/* Run NOPS random operations, logging what the trace must say. */
static void run_sequence(uint64_t seed) {
  t_rng = seed;
  int nops = (int)t_scale(NOPS);
  for (int op = 0; op < nops; op++) {
    uint64_t k = t_below(100);
    if (k < 50 && T.nlive < MAXLIVE) {
      int st = (int)t_below(NSTR);
      size_t n = rnd_size();
      void *p = xseg_malloc(n, 0, g_str[st]);
      XT_CHECK_MSG(p != NULL, "malloc(%zu): %s", n, xseg_last_error());
      if (!p) continue;
      if (st != 0 && T.number[st] == 0) T.number[st] = ++T.nnumbers;
      unsigned long long id = ++T.next_id;
      T.live[T.nlive].p = p;
      T.live[T.nlive].id = id;
      T.live[T.nlive].n = n;
      T.nlive++;
      log_event('a', id, n, T.number[st]);
    } else if (k < 90 && T.nlive > 0) {
      int i = (int)t_below((uint64_t)T.nlive);
      if (t_below(4) == 0) {
        /* A cross-stream use: the free is recorded now, even though the
         * block stays pending until the held stream completes. */
        XT_CHECK_EQ(xseg_record_stream(T.live[i].p, HELD), 0);
      }
      XT_CHECK_EQ(xseg_free(T.live[i].p), 0);
      log_event('f', T.live[i].id, 0, -1);
      T.live[i] = T.live[--T.nlive];
    } else if (k < 93) {
      /* Failed allocations are not recorded. */
      XT_CHECK(xseg_malloc(64 * GiB, 0, g_str[t_below(NSTR)]) == NULL);
    } else if (k < 95) {
      xs_host_stream_complete(t_backend(), HELD);
    } else if (k < 97) {
      XT_CHECK_EQ(xseg_empty_cache(0), 0);
    } else {
      XT_CHECK_EQ(xseg_free(NULL), 0); /* not an event */
    }
  }
}

/* The trace holds exactly the logged events, in order. */
static void check_against_log(const trace_t *t) {
  XT_CHECK_MSG(t->n == T.n, "the trace has %zu events, the test did %zu", t->n, T.n);
  size_t n = t->n < T.n ? t->n : T.n;
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; i++) {
    const tev_t *e = &t->ev[i];
    const done_t *d = &T.log[i];
    int ok = e->kind == d->kind && e->id == d->id;
    if (d->kind == 'a') ok = ok && e->bytes == d->bytes && e->stream == d->stream;
    XT_CHECK_MSG(ok, "event %zu: trace says %c %llu %llu [%d], the test did %c %llu %llu [%d]", i, e->kind, e->id,
                 e->bytes, e->stream, d->kind, d->id, d->bytes, d->stream);
    bad += !ok;
  }
}

/* The trace on its own: ids unique among live allocations (and increasing,
 * as the recorder numbers them), a free names a live id, a free's optional
 * stream is its allocation's.  Returns the live ids at the end in *live. */
static int check_consistency(const trace_t *t, unsigned long long *live, int *nlive, int max) {
  int n = 0, bad = 0;
  unsigned long long last = 0;
  struct {
    unsigned long long id;
    int stream;
  } set[4096];
  for (size_t i = 0; i < t->n && bad < 5; i++) {
    const tev_t *e = &t->ev[i];
    int at = -1;
    for (int j = 0; j < n; j++)
      if (set[j].id == e->id) at = j;
    if (e->kind == 'a') {
      XT_CHECK_MSG(at < 0, "event %zu: id %llu allocated while live", i, e->id);
      XT_CHECK_MSG(e->id > last, "event %zu: id %llu after %llu", i, e->id, last);
      bad += at >= 0 || e->id <= last;
      last = e->id;
      if (n < 4096) {
        set[n].id = e->id;
        set[n++].stream = e->stream;
      }
    } else {
      XT_CHECK_MSG(at >= 0, "event %zu: free of id %llu, not live", i, e->id);
      bad += at < 0;
      if (at >= 0) {
        XT_CHECK_MSG(e->stream < 0 || e->stream == set[at].stream, "event %zu: free on stream %d, allocated on %d", i,
                     e->stream, set[at].stream);
        set[at] = set[--n];
      }
    }
  }
  *nlive = n < max ? n : max;
  for (int j = 0; j < *nlive; j++) live[j] = set[j].id;
  return bad;
}

static int cmp_ull(const void *a, const void *b) {
  unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
  return x < y ? -1 : x > y;
}

/* Replay t through the allocator; the blocks still live are left in out. */
typedef struct replayed_s {
  long long requested, alloc_cur, alloc_allocated, alloc_freed, req_allocated;
} replayed_t;

static replayed_t counts_now(void) {
  replayed_t r;
  r.requested = t_stat(0, "requested_bytes.all.current");
  r.alloc_cur = t_stat(0, "allocation.all.current");
  r.alloc_allocated = t_stat(0, "allocation.all.allocated");
  r.alloc_freed = t_stat(0, "allocation.all.freed");
  r.req_allocated = t_stat(0, "requested_bytes.all.allocated");
  return r;
}

static replayed_t replay(const trace_t *t) {
  replayed_t r = {-1, -1, -1, -1, -1};
  if (t_init("") != 0) {
    XT_CHECK(!"replay: initialisation failed");
    return r;
  }
  /* ids to pointers: the trace's ids are small and increasing. */
  unsigned long long maxid = 0;
  for (size_t i = 0; i < t->n; i++)
    if (t->ev[i].id > maxid) maxid = t->ev[i].id;
  void **ptr = calloc(maxid + 1, sizeof *ptr);
  if (!ptr) abort();
  for (size_t i = 0; i < t->n; i++) {
    const tev_t *e = &t->ev[i];
    if (e->kind == 'a') {
      xseg_stream_t s = e->stream > 0 ? (xseg_stream_t)(uintptr_t)(0x10000 * (uintptr_t)e->stream) : NULL;
      ptr[e->id] = xseg_malloc((size_t)e->bytes, 0, s);
      XT_CHECK_MSG(ptr[e->id] != NULL, "replay: malloc(%llu): %s", e->bytes, xseg_last_error());
    } else {
      XT_CHECK_EQ(xseg_free(ptr[e->id]), 0);
      ptr[e->id] = NULL;
    }
  }
  r = counts_now();
  for (unsigned long long i = 0; i <= maxid; i++)
    if (ptr[i]) xseg_free(ptr[i]);
  free(ptr);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  return r;
}

static void check_replay(const trace_t *t, replayed_t want) {
  replayed_t got = replay(t);
  XT_CHECK_EQ(got.requested, want.requested);
  XT_CHECK_EQ(got.alloc_cur, want.alloc_cur);
  XT_CHECK_EQ(got.alloc_allocated, want.alloc_allocated);
  XT_CHECK_EQ(got.alloc_freed, want.alloc_freed);
  XT_CHECK_EQ(got.req_allocated, want.req_allocated);
}

static void tmp_path(char *out, size_t n, const char *what) {
  snprintf(out, n, "/tmp/xseg-test-trace-%ld-%s.trace", (long)getpid(), what);
  unlink(out);
}

XT_TEST(random_sequence_is_recorded) {
  for (uint64_t seed = 1; seed <= 3; seed++) {
    char path[128], conf[256];
    tmp_path(path, sizeof path, "seq");
    snprintf(conf, sizeof conf, "trace_file:%s", path);
    memset(&T, 0, sizeof T);
    XT_REQUIRE(t_init(conf) == 0);
    xs_host_stream_hold(t_backend(), HELD);
    run_sequence(0x7ace0000ull + seed);
    replayed_t at_mid = counts_now();
    XT_CHECK(at_mid.alloc_cur == T.nlive && T.nlive > 0);

    /* Mid-run, as at exit: flushed, still open. */
    xs_trace_flush();
    trace_t t;
    if (read_trace(path, &t)) {
      check_against_log(&t);
      unsigned long long live[MAXLIVE], want[MAXLIVE];
      int nlive = 0;
      XT_CHECK_EQ(check_consistency(&t, live, &nlive, MAXLIVE), 0);
      XT_CHECK_EQ(nlive, T.nlive);
      for (int i = 0; i < T.nlive; i++) want[i] = T.live[i].id;
      qsort(live, (size_t)nlive, sizeof live[0], cmp_ull);
      qsort(want, (size_t)T.nlive, sizeof want[0], cmp_ull);
      XT_CHECK(nlive == T.nlive && memcmp(live, want, (size_t)nlive * sizeof live[0]) == 0);
      /* Every stream but NULL has a number, given in order of first use. */
      int seen[NSTR + 1] = {0}, maxno = 0, order_ok = 1;
      for (size_t i = 0; i < t.n; i++)
        if (t.ev[i].kind == 'a' && t.ev[i].stream > 0) {
          if (!seen[t.ev[i].stream]) order_ok &= t.ev[i].stream == maxno + 1;
          seen[t.ev[i].stream] = 1;
          if (t.ev[i].stream > maxno) maxno = t.ev[i].stream;
        }
      XT_CHECK(order_ok);
      XT_CHECK_EQ(maxno, NSTR - 1);
      XT_CHECK_EQ(t.comments, 1);
      free(t.ev);
    }

    /* Free the rest, let the pending blocks go, shut down: the full trace. */
    for (int i = T.nlive - 1; i >= 0; i--) {
      XT_CHECK_EQ(xseg_free(T.live[i].p), 0);
      log_event('f', T.live[i].id, 0, -1);
    }
    xs_host_stream_release(t_backend(), HELD);
    /* Completed pending frees are collected at the next malloc or
     * empty_cache: collect them before the counts are read. */
    XT_CHECK_EQ(xseg_empty_cache(0), 0);
    replayed_t at_end = counts_now();
    XT_CHECK_EQ(xseg_shutdown(), 0);
    if (read_trace(path, &t)) {
      check_against_log(&t);
      unsigned long long live[1];
      int nlive = -1;
      XT_CHECK_EQ(check_consistency(&t, live, &nlive, 1), 0);
      XT_CHECK_EQ(nlive, 0);
      /* Replays: the whole trace, and the part up to the mid-run point. */
      check_replay(&t, at_end);
      size_t full = t.n;
      t.n = full - (size_t)T.nlive;
      check_replay(&t, at_mid);
      t.n = full;
      free(t.ev);
    }
    unlink(path);
    free(T.log);
  }
}

/* ---- threads --------------------------------------------------------------- */

#define NTHREADS 4
#define THREAD_OPS 20000

typedef struct thr_s {
  int idx;
  xseg_stream_t s;
  size_t sizes[THREAD_OPS];
  int nsizes;
  int fails;
} thr_t;

static void *thread_main(void *arg) {
  thr_t *th = arg;
  uint64_t x = 0xabcdef00ull + (uint64_t)th->idx;
  void *live[16] = {0};
  for (int i = 0; i < THREAD_OPS; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    int slot = (int)((x >> 33) % 16);
    if (live[slot]) {
      if (xseg_free(live[slot]) != 0) th->fails++;
      live[slot] = NULL;
    } else {
      size_t n = (size_t)((x >> 20) % 100000);
      live[slot] = xseg_malloc(n, 0, th->s);
      if (!live[slot]) th->fails++;
      else th->sizes[th->nsizes++] = n;
    }
  }
  for (int i = 0; i < 16; i++)
    if (live[i] && xseg_free(live[i]) != 0) th->fails++;
  return NULL;
}

XT_TEST(threads_fill_the_buffer) {
  char path[128], conf[256];
  tmp_path(path, sizeof path, "thr");
  snprintf(conf, sizeof conf, "trace_file:%s", path);
  XT_REQUIRE(t_init(conf) == 0);
  static thr_t th[NTHREADS];
  pthread_t tid[NTHREADS];
  /* Thread 0 uses the NULL stream; the others their own.  Streams get
   * numbers in order of first use, so start them one at a time. */
  for (int i = 0; i < NTHREADS; i++) {
    th[i].idx = i;
    th[i].s = i == 0 ? NULL : (xseg_stream_t)(uintptr_t)(0x100 * (uintptr_t)i);
    th[i].nsizes = 0;
    th[i].fails = 0;
  }
  for (int i = 0; i < NTHREADS; i++) {
    void *first = xseg_malloc(7, 0, th[i].s); /* fixes the stream's number: i */
    XT_REQUIRE(first);
    XT_CHECK_EQ(xseg_free(first), 0);
  }
  for (int i = 0; i < NTHREADS; i++) XT_REQUIRE(pthread_create(&tid[i], NULL, thread_main, &th[i]) == 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(tid[i], NULL);
  for (int i = 0; i < NTHREADS; i++) XT_CHECK_EQ(th[i].fails, 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  size_t len = 0;
  char *text = slurp(path, &len);
  XT_REQUIRE(text);
  XT_CHECK_MSG(len > (256u << 10) * 2, "trace of %zu bytes: the buffer was never full twice", len);
  free(text);
  trace_t t;
  if (read_trace(path, &t)) {
    unsigned long long live[1];
    int nlive = -1;
    XT_CHECK_EQ(check_consistency(&t, live, &nlive, 1), 0);
    XT_CHECK_EQ(nlive, 0);
    /* Per stream, the sizes are that thread's, in its order. */
    for (int i = 0; i < NTHREADS; i++) {
      int k = -1, ok = 1; /* -1: the probe allocation of 7 bytes first */
      for (size_t e = 0; e < t.n; e++) {
        if (t.ev[e].kind != 'a' || t.ev[e].stream != i) continue;
        unsigned long long want = k < 0 ? 7 : (k < th[i].nsizes ? th[i].sizes[k] : ~0ull);
        ok &= t.ev[e].bytes == want;
        k++;
      }
      XT_CHECK_MSG(ok && k == th[i].nsizes, "thread %d: %d sizes in the trace, %d made", i, k, th[i].nsizes);
    }
    free(t.ev);
  }
  unlink(path);
}

/* ---- exit without shutdown ----------------------------------------------------- */

XT_TEST(flushed_at_exit) {
  char path[128], conf[256];
  tmp_path(path, sizeof path, "exit");
  snprintf(conf, sizeof conf, "trace_file:%s", path);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  XT_REQUIRE(pid >= 0);
  if (pid == 0) {
    if (t_init(conf) != 0) _exit(2);
    void *a = xseg_malloc(100, 0, NULL);
    void *b = xseg_malloc(2 * MiB, 0, (xseg_stream_t)0x100);
    void *c = xseg_malloc(0, 0, NULL);
    if (!a || !b || !c || xseg_free(a) != 0) _exit(3);
    void *d = xseg_malloc(5000, 0, (xseg_stream_t)0x200);
    if (!d || xseg_free(c) != 0) _exit(4);
    exit(0); /* b and d stay live; the atexit handler flushes */
  }
  int status = 0;
  XT_REQUIRE(waitpid(pid, &status, 0) == pid);
  XT_REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  size_t len = 0;
  char *text = slurp(path, &len);
  XT_REQUIRE(text);
  const char *body = text;
  while (*body == '#') body = strchr(body, '\n') + 1;
  const char *want = "a 1 100\na 2 2097152 1\na 3 0\nf 1\na 4 5000 2\nf 3\n";
  XT_CHECK_MSG(strcmp(body, want) == 0, "trace after exit:\n%s", text);
  free(text);
  unlink(path);
}

/* ---- a bad path ------------------------------------------------------------------ */

XT_TEST(unwritable_trace_file_fails_initialisation) {
  char conf[256], dir[128];
  snprintf(dir, sizeof dir, "/tmp/xseg-test-no-such-dir-%ld", (long)getpid());
  const char *paths[2] = {dir, "/tmp"}; /* a missing directory; a directory */
  for (int i = 0; i < 2; i++) {
    char path[200];
    if (i == 0)
      snprintf(path, sizeof path, "%s/t.trace", paths[0]);
    else
      snprintf(path, sizeof path, "%s", paths[1]);
    snprintf(conf, sizeof conf, "backend:host,trace_file:%s", path);
    int rc = xseg_init(conf);
    XT_CHECK(rc != 0);
    const char *msg = xseg_last_error();
    XT_CHECK_MSG(strstr(msg, "trace_file") != NULL && strstr(msg, path) != NULL, "message: %s", msg);
    /* Nothing is allocated under a configuration that failed. */
    XT_CHECK(xseg_malloc(100, 0, NULL) == NULL);
    XT_CHECK_MSG(strstr(xseg_last_error(), "trace_file") != NULL, "later calls say: %s", xseg_last_error());
    /* A valid configuration recovers. */
    XT_REQUIRE(t_init("") == 0);
    void *p = xseg_malloc(100, 0, NULL);
    XT_CHECK(p != NULL);
    XT_CHECK_EQ(xseg_free(p), 0);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

int main(void) {
  XT_RUN(random_sequence_is_recorded);
  XT_RUN(threads_fill_the_buffer);
  XT_RUN(flushed_at_exit);
  XT_RUN(unwritable_trace_file_fails_initialisation);
  return XT_DONE();
}
