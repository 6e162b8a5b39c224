/* pool/ipc.c: sharing memory with other processes (xseg_ipc_*), the way
 * torch.multiprocessing passes CUDA tensors.
 *
 * The sender describes the physical handles under a live block: the
 * chunks covering its pages, each exported once as a POSIX descriptor
 * (vmm/phys.c: xs_vmm_export), with their offsets in the range they span.
 * The handle carries the sender's pid and its descriptor numbers; the
 * receiver takes its own copies with pidfd_getfd(2), imports them, and
 * maps them back to back in a fresh range of its own device
 * (xs_vmm_import).  Receivers' ranges are kept in a list under their own
 * lock, apart from the allocator's pools: it is the sender's memory.
 *
 * Handle layout (little-endian, as both ends are this library on one
 * machine): "XSEGIPC1", u32 count, i32 pid, u64 span, then per chunk
 * i32 fd, u32 pad, u64 offset, u64 size.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "init.h"

#define IPC_MAGIC "XSEGIPC1"
#define IPC_MAX_CHUNKS 65536

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

typedef struct ipc_head_s {
  char magic[8];
  uint32_t count;
  int32_t pid;
  uint64_t span;
} ipc_head_t;

typedef struct ipc_ent_s {
  int32_t fd;
  uint32_t pad;
  uint64_t off, size;
} ipc_ent_t;

/* ---- exporting ------------------------------------------------------------------------------ */

/* The chunks covering block b's pages: first and the count, and the span. */
static int covering(const xs_block_t *b, xs_chunk_t **first, size_t *n, uintptr_t *lo, uintptr_t *hi) {
  const xs_vseg_t *vs = &b->seg->vs;
  uintptr_t end = xs_block_end(b);
  *n = 0;
  *first = NULL;
  for (uintptr_t x = b->addr; x < end;) {
    xs_chunk_t *c = xs_vseg_chunk_at(vs, x);
    if (!c) return xs_error(XSEG_ECORRUPT, "xseg: a live block at %#lx has an unmapped page", (unsigned long)x);
    if (!*first) {
      *first = c;
      *lo = c->addr;
    }
    *hi = c->addr + c->size;
    (*n)++;
    x = c->addr + c->size;
  }
  return 0;
}

typedef struct export_args_s {
  void *buf;
  size_t *len, *offset;
} export_args_t;

/* Export live block b (device d's lock held); arg: the caller's buffers. */
static int export_locked(xs_device_t *d, xs_block_t *b, void *arg) {
  const export_args_t *a = arg;
  void *buf = a->buf;
  size_t *len = a->len, *offset = a->offset;
  if (b->seg->binned)
    return xs_error(XSEG_ENOTSUP, "xseg: sharing memory with another process needs expandable segments "
                                  "(device %d runs the binned pool)", d->id);
  xs_chunk_t *first;
  size_t n;
  uintptr_t lo = 0, hi = 0;
  int rc = covering(b, &first, &n, &lo, &hi);
  if (rc != 0) return rc;
  size_t need = sizeof(ipc_head_t) + n * sizeof(ipc_ent_t);
  if (*len < need) {
    *len = need;
    return xs_error(XSEG_ERANGE, "xseg: xseg_ipc_export: the handle needs %zu bytes", need);
  }
  ipc_head_t head = {IPC_MAGIC, (uint32_t)n, (int32_t)getpid(), hi - lo};
  memcpy(buf, &head, sizeof head);
  ipc_ent_t *e = (ipc_ent_t *)((char *)buf + sizeof head);
  size_t i = 0;
  for (uintptr_t x = lo; x < hi; i++) {
    xs_chunk_t *c = xs_vseg_chunk_at(&b->seg->vs, x);
    int fd;
    if ((rc = xs_error_vmm(xs_vmm_export(&d->vmm, c, &fd))) != 0) return rc;
    ipc_ent_t ent = {fd, 0, c->addr - lo, c->size};
    memcpy(&e[i], &ent, sizeof ent);
    x = c->addr + c->size;
  }
  *len = need;
  *offset = b->addr - lo;
  return 0;
}

int xseg_ipc_export(void *ptr, void *buf, size_t *len, size_t *offset) {
  if (!ptr || !buf || !len || !offset) return xs_error(XSEG_EINVAL, "xseg: xseg_ipc_export: NULL argument");
  if (xs_ensure_init() != 0) return xseg_last_error_code();
  /* The receiver reads our descriptors with pidfd_getfd, which needs leave
   * to ptrace us; under Yama's ptrace_scope 1 only our ancestors have it,
   * so a child receiving from its parent would be refused. */
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  export_args_t a = {buf, len, offset};
  int rc = xs_on_block_holding((uintptr_t)ptr, export_locked, &a);
  if (rc >= 0) return rc;
  return xs_error(XSEG_EINVAL, "xseg: xseg_ipc_export(%p): not inside a live allocation", ptr);
}

/* ---- opening ---------------------------------------------------------------------------------- */

/* A range mapped from another process's handle. */
typedef struct ipc_map_s {
  struct ipc_map_s *next;
  int dev, n;
  uintptr_t base;
  size_t span;
  size_t *offs, *sizes;
  xs_handle_t *handles;
} ipc_map_t;

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_map_t *ipc_maps;

static void map_free(ipc_map_t *m) {
  free(m->offs);
  free(m->sizes);
  free(m->handles);
  free(m);
}

/* Copies of the sender's descriptors, in fds[]; -1 where none was taken. */
static int take_fds(const ipc_head_t *h, const ipc_ent_t *e, int *fds) {
  for (uint32_t i = 0; i < h->count; i++) fds[i] = -1;
  int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)h->pid, 0);
  if (pidfd < 0)
    return xs_error(errno == ENOSYS ? XSEG_ENOTSUP : XSEG_EINVAL,
                    "xseg: xseg_ipc_open: pidfd_open(%d) failed (%s): the process that shared the memory must "
                    "still run, on a kernel of 5.6 or later", (int)h->pid, strerror(errno));
  int rc = 0;
  for (uint32_t i = 0; i < h->count && rc == 0; i++) {
    ipc_ent_t ent;
    memcpy(&ent, &e[i], sizeof ent);
    fds[i] = (int)syscall(SYS_pidfd_getfd, pidfd, ent.fd, 0);
    if (fds[i] < 0)
      rc = xs_error(XSEG_EBACKEND,
                    "xseg: xseg_ipc_open: pidfd_getfd(pid %d, fd %d) failed (%s): this process may not take the "
                    "sender's descriptors (ptrace permission, see docs/pytorch.md)", (int)h->pid, ent.fd,
                    strerror(errno));
  }
  close(pidfd);
  return rc;
}

static int parse(const void *buf, size_t len, ipc_head_t *h, const ipc_ent_t **e) {
  if (!buf || len < sizeof *h) return xs_error(XSEG_EINVAL, "xseg: xseg_ipc_open: a handle of %zu bytes is too short", len);
  memcpy(h, buf, sizeof *h);
  if (memcmp(h->magic, IPC_MAGIC, 8) != 0)
    return xs_error(XSEG_EINVAL, "xseg: xseg_ipc_open: not a handle of this xseg version (the other process must "
                                 "use xseg too)");
  if (h->count == 0 || h->count > IPC_MAX_CHUNKS || len != sizeof *h + h->count * sizeof(ipc_ent_t))
    return xs_error(XSEG_EINVAL, "xseg: xseg_ipc_open: a malformed handle (%u chunks in %zu bytes)", h->count, len);
  *e = (const ipc_ent_t *)((const char *)buf + sizeof *h);
  return 0;
}

int xseg_ipc_open(const void *buf, size_t len, int device, void **base) {
  if (!base) return xs_error(XSEG_EINVAL, "xseg: xseg_ipc_open: base is NULL");
  ipc_head_t h;
  const ipc_ent_t *e = NULL;
  int rc = parse(buf, len, &h, &e);
  if (rc != 0) return rc;
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  ipc_map_t *m = calloc(1, sizeof *m);
  int *fds = calloc(h.count, sizeof *fds);
  if (m) {
    m->offs = calloc(h.count, sizeof *m->offs);
    m->sizes = calloc(h.count, sizeof *m->sizes);
    m->handles = calloc(h.count, sizeof *m->handles);
  }
  if (!m || !fds || !m->offs || !m->sizes || !m->handles) {
    if (m) map_free(m);
    free(fds);
    return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  }
  m->dev = device;
  m->n = (int)h.count;
  m->span = h.span;
  for (uint32_t i = 0; i < h.count; i++) {
    ipc_ent_t ent;
    memcpy(&ent, &e[i], sizeof ent);
    m->offs[i] = ent.off;
    m->sizes[i] = ent.size;
  }
  rc = take_fds(&h, e, fds);
  if (rc == 0) {
    pthread_mutex_lock(&d->lock);
    rc = xs_error_vmm(xs_vmm_import(&d->vmm, fds, m->offs, m->sizes, m->n, m->span, &m->base, m->handles));
    pthread_mutex_unlock(&d->lock);
  }
  for (uint32_t i = 0; i < h.count; i++)
    if (fds[i] >= 0) close(fds[i]); /* the imported handles keep the memory */
  free(fds);
  if (rc != 0) {
    map_free(m);
    return rc;
  }
  pthread_mutex_lock(&ipc_lock);
  m->next = ipc_maps;
  ipc_maps = m;
  pthread_mutex_unlock(&ipc_lock);
  *base = (void *)m->base;
  return 0;
}

int xseg_ipc_close(void *base) {
  pthread_mutex_lock(&ipc_lock);
  ipc_map_t **l = &ipc_maps;
  while (*l && (*l)->base != (uintptr_t)base) l = &(*l)->next;
  ipc_map_t *m = *l;
  if (m) *l = m->next;
  pthread_mutex_unlock(&ipc_lock);
  if (!m) return xs_error(XSEG_EINVAL, "xseg: xseg_ipc_close(%p): not a range xseg_ipc_open returned", base);
  xs_device_t *d = xs_device_get(m->dev);
  if (d) {
    pthread_mutex_lock(&d->lock);
    xs_vmm_unimport(&d->vmm, m->base, m->span, m->offs, m->sizes, m->handles, m->n);
    pthread_mutex_unlock(&d->lock);
  }
  map_free(m);
  return d ? 0 : xseg_last_error_code();
}
