/* vmm/release.c: large physical handles released on a thread of their own.
 *
 * A conversion (pool/expandable.c:convert) gives a large handle back
 * before it makes the pieces that replace it, and cuMemRelease of a large
 * handle is the dearest call the allocator makes: 250-400 us for 512 MiB
 * on an H100 (driver 580), against 50-70 us to create, map and give access
 * to a 64 MiB one.  While the device has room the pieces do not need the
 * memory being released, and the driver runs a release on a second thread
 * beside the first thread's calls: making 64 MiB handles while 512 MiB ones
 * were released on a second thread cost 58-81 us a handle made, against
 * 47-71 with no release and 305-441 with the releases inline (five rounds,
 * benchmarks/driver_probe.c overlap, benchmarks/results/gpu-h100-driver-
 * probe-overlap.txt).  For 2 MiB handles the second thread gained nothing,
 * so only handles of at least XS_VMM_LATER_MIN go there.
 *
 * Accounting.  A handle handed over leaves `held` at once, so what the
 * allocator decides never depends on when the thread gets to it, and is
 * counted in `pending` until a collect sees it released (the held_bytes
 * gauge and handles_live keep it until then: the memory is still the
 * device's; num_device_free counts it when given, its time is added when
 * collected).  The cap counts held and pending together: a create that
 * would pass it waits for the releases first (xs_vmm_drain), and so does
 * one the driver refuses.  A look at the device's free memory that a
 * release overlapped cannot tell whether that memory was counted, so it
 * is not taken (the next create looks again) rather than waited for: a
 * look comes every few creates, and waiting would put most releases back
 * on the allocating thread.  empty_cache, a trim and the end of the device
 * drain.  A release that fails puts the handle back in the cache: nothing
 * is lost, and the next release of the cache, in the calling thread,
 * reports the error.
 *
 * One lock, `mu`, guards the queue and the results; the thread does not
 * hold it across a release.  The device lock (pool/) is outside it.  After
 * a fork the child has no thread: it releases inline and leaves the
 * parent's queue alone.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "vmm.h"

struct xs_releaser_s {
  xs_backend_t *be;
  int dev;
  pid_t pid; /* the process whose thread this is */
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t work, idle;
  xs_chunk_t *queue;        /* handed over, not yet taken */
  uint64_t started, ended;  /* releases begun and ended, ever */
  int stop;
  /* Results since the last collect. */
  size_t done_bytes;
  uint64_t done_n, done_ns;
  xs_chunk_t *failed; /* refused by the driver: back to the cache */
};

static void *run(void *arg) {
  xs_releaser_t *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!r->queue && !r->stop) pthread_cond_wait(&r->work, &r->mu);
    if (!r->queue) break; /* stopping with nothing left */
    xs_chunk_t *c = r->queue;
    r->queue = c->next;
    c->next = NULL;
    r->started++;
    pthread_mutex_unlock(&r->mu);
    uint64_t t0 = r->be->now_ns(r->be);
    int rc = r->be->release(r->be, r->dev, c->h);
    uint64_t ns = r->be->now_ns(r->be) - t0;
    if (rc == 0 && c->fd >= 0) close(c->fd);
    pthread_mutex_lock(&r->mu);
    if (rc == 0) {
      r->done_bytes += c->size;
      r->done_n++;
      r->done_ns += ns;
      free(c);
    } else {
      c->next = r->failed;
      r->failed = c;
    }
    r->ended++;
    pthread_cond_broadcast(&r->idle);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/* The running releaser of this process, or NULL. */
static xs_releaser_t *live(const xs_vmm_t *v) {
  xs_releaser_t *r = v->rel;
  return r && r->pid == getpid() ? r : NULL;
}

/* The releaser, started at first use; NULL where it cannot run (then
 * releases are made inline). */
static xs_releaser_t *releaser(xs_vmm_t *v) {
  xs_releaser_t *r = v->rel;
  if (r) return live(v);
  if (v->rel_failed || !(r = calloc(1, sizeof *r))) return NULL;
  r->be = v->be;
  r->dev = v->dev;
  r->pid = getpid();
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->work, NULL);
  pthread_cond_init(&r->idle, NULL);
  /* Signals stay with the program's own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&r->th, NULL, run, r);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&r->idle);
    pthread_cond_destroy(&r->work);
    pthread_mutex_destroy(&r->mu);
    free(r);
    v->rel_failed = 1; /* no thread to be had: inline from now on */
    return NULL;
  }
  v->rel = r;
  return r;
}

/* Take the thread's results into v.  r->mu held. */
static void collect_locked(xs_vmm_t *v, xs_releaser_t *r) {
  if (r->done_n) {
    v->pending -= r->done_bytes;
    v->npending -= r->done_n;
    xs_gauge_add(&v->st.handles_releasing, -(int64_t)r->done_n);
    xs_gauge_add(&v->st.releasing_bytes, -(int64_t)r->done_bytes);
    v->st.time_release_ns += r->done_ns;
    xs_gauge_add(&v->st.handles_live, -(int64_t)r->done_n);
    xs_gauge_add(&v->st.held_bytes, -(int64_t)r->done_bytes);
    r->done_bytes = 0;
    r->done_n = r->done_ns = 0;
  }
  while (r->failed) {
    xs_chunk_t *c = r->failed;
    r->failed = c->next;
    v->pending -= c->size;
    v->npending--;
    xs_gauge_add(&v->st.handles_releasing, -1);
    xs_gauge_add(&v->st.releasing_bytes, -(int64_t)c->size);
    v->held += c->size;
    xs_vmm_cache_put(v, c);
  }
}

int xs_vmm_release_later(xs_vmm_t *v, xs_chunk_t *c) {
  xs_assert_internal(c->vs == NULL);
  /* Only where the memory is not wanted back at once: the handles that
   * replace this one fit beside it within the room. */
  xs_releaser_t *r = NULL;
  if (!v->later || c->size < XS_VMM_LATER_MIN || v->held + v->pending + c->size > xs_vmm_room(v) ||
      (r = releaser(v)) == NULL)
    return xs_vmm_release(v, c);
  v->held -= c->size;
  v->pending += c->size;
  v->npending++;
  /* Counted when given, as a call is when made: a pass of a benchmark
   * counts the releases its own conversions asked for. */
  v->st.num_device_free++;
  v->st.num_thread_releases++;
  xs_gauge_add(&v->st.handles_releasing, 1);
  xs_gauge_add(&v->st.releasing_bytes, (int64_t)c->size);
  pthread_mutex_lock(&r->mu);
  c->next = r->queue;
  r->queue = c;
  pthread_cond_signal(&r->work);
  pthread_mutex_unlock(&r->mu);
  return 0;
}

void xs_vmm_collect(xs_vmm_t *v) {
  xs_releaser_t *r = v->pending ? live(v) : NULL;
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  collect_locked(v, r);
  pthread_mutex_unlock(&r->mu);
}

void xs_vmm_drain(xs_vmm_t *v) {
  xs_releaser_t *r = v->pending ? live(v) : NULL;
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  while (r->queue || r->started != r->ended) pthread_cond_wait(&r->idle, &r->mu);
  collect_locked(v, r);
  pthread_mutex_unlock(&r->mu);
}

int xs_vmm_quiet_mem_info(xs_vmm_t *v, size_t *free_bytes, size_t *total) {
  xs_releaser_t *r = v->pending ? live(v) : NULL;
  if (!r) return v->be->mem_info(v->be, v->dev, free_bytes, total);
  pthread_mutex_lock(&r->mu);
  uint64_t began = r->started, quiet = r->started == r->ended;
  pthread_mutex_unlock(&r->mu);
  int rc = quiet ? v->be->mem_info(v->be, v->dev, free_bytes, total) : XSEG_ENOTREADY;
  pthread_mutex_lock(&r->mu);
  if (rc == 0 && r->started != began) rc = XSEG_ENOTREADY; /* one began meanwhile */
  collect_locked(v, r); /* what ended before the query, and only that, if rc == 0 */
  pthread_mutex_unlock(&r->mu);
  return rc;
}

void xs_vmm_releaser_stop(xs_vmm_t *v) {
  xs_releaser_t *r = v->rel;
  if (!r) return;
  v->rel = NULL;
  if (r->pid != getpid()) return; /* a forked child: the thread is the parent's */
  pthread_mutex_lock(&r->mu);
  r->stop = 1;
  pthread_cond_signal(&r->work);
  pthread_mutex_unlock(&r->mu);
  pthread_join(r->th, NULL);
  collect_locked(v, r); /* the thread has ended: no lock needed */
  pthread_cond_destroy(&r->idle);
  pthread_cond_destroy(&r->work);
  pthread_mutex_destroy(&r->mu);
  free(r);
}
