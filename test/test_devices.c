/* test_devices.c: devices never wait on each other.
 *
 * Device 0's lock is held (a walk of device 0 whose callback blocks) while
 * another thread works on device 1: allocations, frees (which must find
 * their device without asking device 0), record_stream, base_allocation,
 * statistics, cache and memory queries.  If any of them took device 0's
 * lock, that thread could not finish until the walk ends; the test waits
 * up to a minute for it and then names what blocked.  Also: the address
 * directory (pool/owners.c) names the right device for every live block,
 * and frees still work for pointers on every device.
 */
#include <pthread.h>
#include <time.h>

#include "device.h"
#include "testutil.h"

enum { NDEV = 4, WORK_OPS = 4000 };

typedef struct gate_s {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int holding; /* the walk of device 0 is inside its callback */
  int release; /* let it go */
  int done;    /* the worker on device 1 finished */
  const char *step; /* what the worker is doing */
} gate_t;

static gate_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, "starting"};

static void gate_set(int *field, int v) {
  pthread_mutex_lock(&gate.mu);
  *field = v;
  pthread_cond_broadcast(&gate.cv);
  pthread_mutex_unlock(&gate.mu);
}

static void note(const char *step) {
  pthread_mutex_lock(&gate.mu);
  gate.step = step;
  pthread_mutex_unlock(&gate.mu);
}

/* Inside xseg_walk(0): device 0's lock is held until released. */
static int hold_segment(void *arg, const xseg_segment_info_t *s) {
  (void)arg;
  (void)s;
  pthread_mutex_lock(&gate.mu);
  gate.holding = 1;
  pthread_cond_broadcast(&gate.cv);
  while (!gate.release) pthread_cond_wait(&gate.cv, &gate.mu);
  pthread_mutex_unlock(&gate.mu);
  return 1; /* one segment is enough */
}

static void *walker(void *arg) {
  (void)arg;
  xseg_walker_t w = {hold_segment, NULL};
  xseg_walk(0, &w, NULL);
  return NULL;
}

static int fails;

/* Everything a thread driving device 1 does, while device 0 is locked. */
static void *device1_work(void *arg) {
  void **kept = arg; /* blocks made on device 1 before the walk */
  void *ring[16] = {0};
  uint64_t r = 77;
  note("malloc and free");
  for (int i = 0; i < WORK_OPS; i++) {
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t sz = (r >> 60) ? 512 + (r >> 33) % 65536 : 1 + (r >> 33) % (6u << 20);
    int k = i % 16;
    if (ring[k] && xseg_free(ring[k]) != 0) fails++;
    ring[k] = xseg_malloc(sz, 1, NULL);
    if (!ring[k]) fails++;
  }
  note("record_stream");
  if (xseg_record_stream(kept[0], (xseg_stream_t)(uintptr_t)0x77) != 0) fails++;
  note("base_allocation");
  void *base;
  size_t size;
  if (xseg_base_allocation((char *)kept[1] + 100, &base, &size) != 0 || base != kept[1]) fails++;
  note("statistics");
  char buf[1 << 14];
  if (xseg_stats_json(1, buf, sizeof buf) == 0) fails++;
  xseg_device_stats_t st = {.struct_size = sizeof st};
  if (xseg_device_stats(1, &st) != 0 || st.allocation[0].current < 2) fails++;
  if (xseg_reset_peak_stats(1) != 0) fails++;
  note("cache and memory queries");
  size_t largest, fr, total;
  if (xseg_cache_info(1, &largest) != 0 || xseg_mem_info(1, &fr, &total) != 0) fails++;
  note("frees of the kept blocks");
  for (int k = 0; k < 16; k++)
    if (xseg_free(ring[k]) != 0) fails++;
  for (int k = 0; k < 2; k++)
    if (xseg_free(kept[k]) != 0) fails++;
  note("empty_cache of device 1");
  if (xseg_empty_cache(1) != 0) fails++;
  gate_set(&gate.done, 1);
  return NULL;
}

/* Wait up to `secs` for gate.done; 1 if it came. */
static int wait_done(int secs) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += secs;
  pthread_mutex_lock(&gate.mu);
  int rc = 0;
  while (!gate.done && rc == 0) rc = pthread_cond_timedwait(&gate.cv, &gate.mu, &until);
  int done = gate.done;
  pthread_mutex_unlock(&gate.mu);
  return done;
}

static void no_device_waits_for_another(const char *mode) {
  char conf[256];
  snprintf(conf, sizeof conf, "%s,host_devices:%d,host_capacity_mb:512", mode, NDEV);
  XT_REQUIRE(t_init(conf) == 0);
  void *zero = xseg_malloc(3 << 20, 0, NULL); /* device 0 needs a segment to walk */
  void *kept[2] = {xseg_malloc(5 << 20, 1, NULL), xseg_malloc(4096, 1, NULL)};
  XT_REQUIRE(zero && kept[0] && kept[1]);
  gate.holding = gate.release = gate.done = 0;
  fails = 0;
  pthread_t tw, t1;
  XT_REQUIRE(pthread_create(&tw, NULL, walker, NULL) == 0);
  pthread_mutex_lock(&gate.mu);
  while (!gate.holding) pthread_cond_wait(&gate.cv, &gate.mu);
  pthread_mutex_unlock(&gate.mu);
  XT_REQUIRE(pthread_create(&t1, NULL, device1_work, kept) == 0);
  int done = wait_done(60);
  pthread_mutex_lock(&gate.mu);
  const char *step = gate.step;
  pthread_mutex_unlock(&gate.mu);
  XT_CHECK_MSG(done, "%s: device 1's work (%s) waited on device 0's lock for a minute", mode, step);
  gate_set(&gate.release, 1); /* a blocked worker finishes now */
  pthread_join(tw, NULL);
  pthread_join(t1, NULL);
  XT_CHECK_MSG(fails == 0, "%s: %d of device 1's calls failed: %s", mode, fails, xseg_last_error());
  XT_CHECK_EQ(xseg_free(zero), 0);
  XT_CHECK_EQ(xseg_check_heap(-1), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(expandable_devices_never_wait_on_each_other) { no_device_waits_for_another(t_modes[0]); }
XT_TEST(binned_devices_never_wait_on_each_other) { no_device_waits_for_another(t_modes[1]); }

/* The directory names each live block's device; pointers xseg never made
 * are refused with a message, on any device count. */
static void directory_names_owners(const char *mode) {
  char conf[256];
  snprintf(conf, sizeof conf, "%s,host_devices:%d,host_capacity_mb:256", mode, NDEV);
  XT_REQUIRE(t_init(conf) == 0);
  void *p[NDEV][8];
  for (int d = 0; d < NDEV; d++)
    for (int k = 0; k < 8; k++) {
      p[d][k] = xseg_malloc((size_t)(k + 1) * 700 * KiB, d, NULL);
      XT_REQUIRE(p[d][k] != NULL);
      int o = xs_owner_of((uintptr_t)p[d][k]);
      XT_CHECK_MSG(o == d || o == XS_OWNER_ANY, "%s: block %p of device %d read as device %d", mode, p[d][k], d, o);
    }
  int local = 0;
  char here;
  XT_CHECK_EQ(xs_owner_of((uintptr_t)&local), XS_OWNER_NONE);
  XT_CHECK(xseg_free(&here) == XSEG_EINVAL);
  XT_CHECK(strstr(xseg_last_error(), "not a pointer returned by xseg_malloc") != NULL);
  for (int d = NDEV - 1; d >= 0; d--)
    for (int k = 0; k < 8; k++) XT_CHECK_EQ(xseg_free(p[d][k]), 0);
  XT_CHECK_EQ(xseg_check_heap(-1), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  XT_CHECK_EQ(xs_owner_of((uintptr_t)p[0][0]), XS_OWNER_NONE); /* cleared at shutdown */
}

XT_TEST(directory_names_owners_expandable) { directory_names_owners(t_modes[0]); }
XT_TEST(directory_names_owners_binned) { directory_names_owners(t_modes[1]); }

/* Ranges entered into the directory directly, at addresses no segment
 * uses: each granule of a range reads its device, from its first to its
 * last, across 1 GiB leaves made fresh by that range or made before; a
 * granule two devices entered reads ANY; the granules beside a range read
 * NONE. */
XT_TEST(directory_marks_exact_ranges) {
  const uintptr_t G = (uintptr_t)2 << 20, L = (uintptr_t)1 << 30;
  const uintptr_t base = (uintptr_t)0x3f0000000000ull; /* 1 GiB aligned, far from any mapping */
  /* Device 2: from 3 granules into a leaf to 5 granules into the third
   * leaf after it (two fresh leaves wholly, two in part), ending mid-granule. */
  const uintptr_t lo = base + 3 * G, hi = base + 3 * L + 4 * G + 100;
  xs_owners_add(2, lo, hi);
  XT_CHECK_EQ(xs_owner_of(lo - 1), XS_OWNER_NONE);
  XT_CHECK_EQ(xs_owner_of(lo), 2);
  XT_CHECK_EQ(xs_owner_of(base + L - 1), 2);
  XT_CHECK_EQ(xs_owner_of(base + 2 * L), 2);
  XT_CHECK_EQ(xs_owner_of(hi - 1), 2);
  XT_CHECK_EQ(xs_owner_of(base + 3 * L + 5 * G), XS_OWNER_NONE);
  int wrong = 0;
  for (uintptr_t a = lo; a < hi; a += G / 2) wrong += xs_owner_of(a) != 2;
  XT_CHECK_EQ(wrong, 0);
  /* Device 3 over the last granule of device 2 and on into that leaf,
   * which exists now: the shared granule reads ANY, the rest 3. */
  xs_owners_add(3, base + 3 * L + 4 * G, base + 3 * L + 9 * G);
  XT_CHECK_EQ(xs_owner_of(base + 3 * L + 3 * G), 2);
  XT_CHECK_EQ(xs_owner_of(base + 3 * L + 4 * G), XS_OWNER_ANY);
  XT_CHECK_EQ(xs_owner_of(base + 3 * L + 5 * G), 3);
  XT_CHECK_EQ(xs_owner_of(base + 3 * L + 9 * G), XS_OWNER_NONE);
  /* The same device again changes nothing. */
  xs_owners_add(2, lo, base + 4 * G);
  XT_CHECK_EQ(xs_owner_of(lo), 2);
  xs_owners_reset();
  XT_CHECK_EQ(xs_owner_of(lo), XS_OWNER_NONE);
}

int main(void) {
  XT_RUN(directory_marks_exact_ranges);
  XT_RUN(expandable_devices_never_wait_on_each_other);
  XT_RUN(binned_devices_never_wait_on_each_other);
  XT_RUN(directory_names_owners_expandable);
  XT_RUN(directory_names_owners_binned);
  return XT_DONE();
}
