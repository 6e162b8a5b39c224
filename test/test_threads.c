/* test_threads.c: the allocator under concurrent use, in both modes.
 *
 * Eight workers, each on its own stream, allocate and free random sizes,
 * fill every block with a pattern of its own and check it before every
 * free.  A fraction of the blocks goes to another worker through a
 * mutex-protected mailbox, sometimes after xseg_record_stream onto the
 * receiver's stream, so blocks are freed by a thread other than the one
 * that allocated them and frees wait for events of other streams.  Workers
 * now and then hold their own stream (events recorded on it stay pending)
 * and release it.  A ninth thread calls xseg_empty_cache, xseg_stats_json,
 * xseg_snapshot_json, xseg_check_heap and xseg_reset_peak_stats meanwhile.
 * At the end everything is freed: no block may have lost its pattern, the
 * heap must check, and after xseg_empty_cache the backend holds no handle
 * and maps no byte.  Meant to run clean under ThreadSanitizer too
 * (-DXSEG_SANITIZE=thread).
 *
 *   test_threads [seed [iterations per worker]]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "testutil.h"

#define NWORKERS 8
#define MAXOWN 48
#define MAILBOX 128
#define DEFAULT_ITERS 80000
#define DEFAULT_SEED 7771ull

typedef struct tblk_s {
  void *p;
  size_t n;
  uint64_t tag;
} tblk_t;

typedef struct mailbox_s {
  pthread_mutex_t mu;
  tblk_t v[MAILBOX];
  int n;
} mailbox_t;

typedef struct worker_s {
  int id;
  pthread_t th;
  uint64_t rng;
  tblk_t own[MAXOWN];
  int nown;
  int held; /* own stream held */
  uint64_t tag;
  long mallocs, ooms, frees, sent, received, recorded;
} worker_t;

static mailbox_t g_mail[NWORKERS];
static worker_t g_w[NWORKERS];
static atomic_int g_stop;
static atomic_long g_errors;
static long g_iters;
static uint64_t g_seed;
static const char *g_mode;

/* Workers must not touch xtest.h's counters (plain ints): report here. */
#define W_FAIL(...)                                                    \
  do {                                                                 \
    if (atomic_fetch_add(&g_errors, 1) < 20) {                         \
      fprintf(stderr, "test_threads (%s, seed %llu): ", g_mode,       \
              (unsigned long long)g_seed);                             \
      fprintf(stderr, __VA_ARGS__);                                    \
      fputc('\n', stderr);                                             \
    }                                                                  \
  } while (0)

static xseg_stream_t stream_of(int id) { return (xseg_stream_t)(uintptr_t)(0x1000 * (id + 1)); }

static uint64_t rnd(worker_t *w) {
  uint64_t z = (w->rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static size_t rnd_size(worker_t *w) {
  switch (rnd(w) % 8) {
  case 0:
  case 1:
  case 2: return (size_t)(rnd(w) % 4097);
  case 3:
  case 4: return 1 + (size_t)(rnd(w) % MiB);
  case 5:
  case 6: return MiB - 64 * KiB + (size_t)(rnd(w) % (MiB + 128 * KiB));
  default: return 2 * MiB + (size_t)(rnd(w) % (6 * MiB));
  }
}

/* Full pattern up to 16 KiB; beyond, the ends and a word every 64 KiB. */
static void pat_fill(void *p, size_t n, uint64_t tag) {
  if (n <= 16 * KiB) {
    t_fill(p, n, tag);
    return;
  }
  uint64_t *w = p;
  size_t nw = n / 8;
  for (size_t i = 0; i < 32; i++) w[i] = t_word(tag, i);
  for (size_t i = nw - 32; i < nw; i++) w[i] = t_word(tag, i);
  for (size_t i = 8192; i < nw; i += 8192) w[i] = t_word(tag, i);
  for (size_t i = nw * 8; i < n; i++) ((unsigned char *)p)[i] = (unsigned char)tag;
}

static int pat_verify(const void *p, size_t n, uint64_t tag) {
  if (n <= 16 * KiB) return t_verify(p, n, tag);
  const uint64_t *w = p;
  size_t nw = n / 8;
  for (size_t i = 0; i < 32; i++)
    if (w[i] != t_word(tag, i)) return 0;
  for (size_t i = nw - 32; i < nw; i++)
    if (w[i] != t_word(tag, i)) return 0;
  for (size_t i = 8192; i < nw; i += 8192)
    if (w[i] != t_word(tag, i)) return 0;
  for (size_t i = nw * 8; i < n; i++)
    if (((const unsigned char *)p)[i] != (unsigned char)tag) return 0;
  return 1;
}

static void check_and_free(worker_t *w, tblk_t b, const char *whose) {
  if (!pat_verify(b.p, b.n, b.tag))
    W_FAIL("worker %d: %s block %p (%zu bytes, tag %#llx) lost its pattern", w->id, whose, b.p, b.n,
           (unsigned long long)b.tag);
  int rc = xseg_free(b.p);
  if (rc != 0) W_FAIL("worker %d: xseg_free(%p): %d (%s)", w->id, b.p, rc, xseg_last_error());
  w->frees++;
}

/* Take what the others sent: free most of it here, keep some for later. */
static void drain(worker_t *w) {
  tblk_t got[MAILBOX];
  mailbox_t *m = &g_mail[w->id];
  pthread_mutex_lock(&m->mu);
  int n = m->n;
  memcpy(got, m->v, (size_t)n * sizeof got[0]);
  m->n = 0;
  pthread_mutex_unlock(&m->mu);
  for (int i = 0; i < n; i++) {
    w->received++;
    if (w->nown < MAXOWN && rnd(w) % 4 == 0) {
      if (!pat_verify(got[i].p, got[i].n, got[i].tag))
        W_FAIL("worker %d: received block %p lost its pattern", w->id, got[i].p);
      w->own[w->nown++] = got[i];
    } else {
      check_and_free(w, got[i], "received");
    }
  }
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  xs_backend_t *be = t_backend();
  xseg_stream_t me = stream_of(w->id);
  for (long it = 0; it < g_iters; it++) {
    if (it % 4 == 0) drain(w);
    uint64_t k = rnd(w) % 100;
    if (k < 45 && w->nown < MAXOWN) {
      size_t n = rnd_size(w);
      void *p = xseg_malloc(n, 0, me);
      w->mallocs++;
      if (!p) {
        int code = xseg_last_error_code();
        if (code != XSEG_ENOMEM) W_FAIL("worker %d: malloc(%zu) failed with %d: %s", w->id, n, code, xseg_last_error());
        w->ooms++;
        continue;
      }
      if ((uintptr_t)p % 512 != 0) W_FAIL("worker %d: malloc(%zu) = %p is not 512-aligned", w->id, n, p);
      uint64_t tag = ((uint64_t)(w->id + 1) << 48) | ++w->tag;
      pat_fill(p, n, tag);
      w->own[w->nown++] = (tblk_t){p, n, tag};
    } else if (k < 78 && w->nown) {
      int i = (int)(rnd(w) % (uint64_t)w->nown);
      tblk_t b = w->own[i];
      w->own[i] = w->own[--w->nown];
      check_and_free(w, b, "own");
    } else if (k < 92 && w->nown) {
      /* Hand a block to another worker, sometimes declaring its stream. */
      int i = (int)(rnd(w) % (uint64_t)w->nown);
      tblk_t b = w->own[i];
      w->own[i] = w->own[--w->nown];
      int to = (w->id + 1 + (int)(rnd(w) % (NWORKERS - 1))) % NWORKERS;
      if (rnd(w) % 3 == 0) {
        int rc = xseg_record_stream(b.p, stream_of(to));
        if (rc != 0) W_FAIL("worker %d: record_stream(%p): %d (%s)", w->id, b.p, rc, xseg_last_error());
        w->recorded++;
      }
      mailbox_t *m = &g_mail[to];
      pthread_mutex_lock(&m->mu);
      int sent = m->n < MAILBOX;
      if (sent) m->v[m->n++] = b;
      pthread_mutex_unlock(&m->mu);
      if (sent)
        w->sent++;
      else
        check_and_free(w, b, "unsent");
    } else if (k < 95) {
      /* Hold our stream for a while: frees waiting on it stay pending. */
      if (!w->held) {
        xs_host_stream_hold(be, me);
        w->held = 1;
      } else if (rnd(w) % 2) {
        xs_host_stream_complete(be, me);
      } else {
        xs_host_stream_release(be, me);
        w->held = 0;
      }
    } else {
      for (int i = 0; i < w->nown; i++)
        if (!pat_verify(w->own[i].p, w->own[i].n, w->own[i].tag))
          W_FAIL("worker %d: block %p lost its pattern", w->id, w->own[i].p);
    }
  }
  if (w->held) xs_host_stream_release(be, me);
  w->held = 0;
  return NULL;
}

/* The observer: the calls a monitoring thread or a framework would make. */
static void *monitor_main(void *arg) {
  (void)arg;
  static char buf[1 << 16];
  uint64_t r = g_seed ^ 0x5555;
  long rounds = 0;
  while (!atomic_load(&g_stop)) {
    struct timespec ts = {0, 1000000}; /* 1 ms */
    nanosleep(&ts, NULL);
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    switch ((r >> 33) % 5) {
    case 0: {
      int rc = xseg_empty_cache(rounds % 2 ? 0 : -1);
      if (rc != 0) W_FAIL("monitor: empty_cache: %d (%s)", rc, xseg_last_error());
      break;
    }
    case 1: {
      size_t n = xseg_stats_json(0, buf, sizeof buf);
      if (n == 0 || n >= sizeof buf || buf[0] != '{' || buf[n - 1] != '}')
        W_FAIL("monitor: stats_json returned %zu bytes", n);
      break;
    }
    case 2: {
      int rc = xseg_check_heap(-1);
      if (rc != 0) W_FAIL("monitor: check_heap: %s", xseg_last_error());
      break;
    }
    case 3: {
      size_t n = xseg_snapshot_json(0, NULL, 0);
      if (n == 0) W_FAIL("monitor: snapshot_json returned 0");
      break;
    }
    default:
      if (xseg_reset_peak_stats(0) != 0) W_FAIL("monitor: reset_peak_stats: %s", xseg_last_error());
      break;
    }
    rounds++;
  }
  return NULL;
}

/* 1 GiB: enough that most allocations succeed, little enough that the
 * out-of-memory paths (reclaim and remapping, binned segment release) run
 * concurrently too. */
static void stress(const char *mode) {
  char conf[256];
  snprintf(conf, sizeof conf, "%s,host_capacity_mb:1024", mode);
  g_mode = mode;
  XT_REQUIRE(t_init(conf) == 0);
  xs_backend_t *be = t_backend();
  XT_REQUIRE(be != NULL);
  atomic_store(&g_stop, 0);
  long errors0 = atomic_load(&g_errors);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < NWORKERS; i++) {
    pthread_mutex_init(&g_mail[i].mu, NULL);
    g_mail[i].n = 0;
    memset(&g_w[i], 0, sizeof g_w[i]);
    g_w[i].id = i;
    g_w[i].rng = g_seed * 1000003u + (uint64_t)i;
  }
  pthread_t mon;
  XT_REQUIRE(pthread_create(&mon, NULL, monitor_main, NULL) == 0);
  for (int i = 0; i < NWORKERS; i++) XT_REQUIRE(pthread_create(&g_w[i].th, NULL, worker_main, &g_w[i]) == 0);
  for (int i = 0; i < NWORKERS; i++) pthread_join(g_w[i].th, NULL);
  atomic_store(&g_stop, 1);
  pthread_join(mon, NULL);

  /* Everything left: in the workers' hands and in the mailboxes. */
  long mallocs = 0, ooms = 0, sent = 0, recorded = 0;
  for (int i = 0; i < NWORKERS; i++) {
    worker_t *w = &g_w[i];
    for (int j = 0; j < w->nown; j++) check_and_free(w, w->own[j], "left");
    w->nown = 0;
    for (int j = 0; j < g_mail[i].n; j++) check_and_free(w, g_mail[i].v[j], "mailed");
    g_mail[i].n = 0;
    xs_host_stream_release(be, stream_of(i));
    mallocs += w->mallocs;
    ooms += w->ooms;
    sent += w->sent;
    recorded += w->recorded;
    pthread_mutex_destroy(&g_mail[i].mu);
  }
  XT_CHECK_EQ(atomic_load(&g_errors) - errors0, 0);
  XT_CHECK_EQ(xseg_empty_cache(0), 0); /* also finishes the frees that waited on events */
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  T_CHECK_HEAP();
  XT_CHECK_EQ(t_stat(0, "allocation.all.current"), 0);
  XT_CHECK_EQ(t_stat(0, "active.all.current"), 0);
  XT_CHECK_EQ(t_stat(0, "pending_frees.current"), 0);
  XT_CHECK_EQ(t_stat(0, "requested_bytes.all.current"), 0);
  xs_host_counters_t c = t_counters();
  XT_CHECK_EQ(c.handles_live, 0);
  XT_CHECK_EQ(c.mapped_bytes, 0);
  XT_CHECK_EQ(c.mem_allocs_live, 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("     %s: %d workers x %ld iterations: %ld mallocs (%ld out of memory), %ld handed over (%ld recorded), "
         "%.2f s\n",
         mode, NWORKERS, g_iters, mallocs, ooms, sent, recorded,
         (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
}

XT_TEST(threads_expandable) { stress(t_modes[0]); }
XT_TEST(threads_binned) { stress(t_modes[1]); }

int main(int argc, char **argv) {
  g_seed = argc > 1 ? strtoull(argv[1], NULL, 0) : DEFAULT_SEED;
  g_iters = argc > 2 ? atol(argv[2]) : t_scale(DEFAULT_ITERS); /* XSEG_TEST_SCALE shortens sanitizer runs */
  printf("test_threads: seed %llu, %ld iterations per worker\n", (unsigned long long)g_seed, g_iters);
  fflush(stdout);
  XT_RUN(threads_expandable);
  XT_RUN(threads_binned);
  return XT_DONE();
}
