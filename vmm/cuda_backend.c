/* vmm/cuda_backend.c: the backend contract (vmm/backend.h) on the CUDA
 * driver API.
 *
 * The library never links libcuda: libcuda.so.1 is dlopen'ed at first use
 * and every entry point resolved by its versioned name, so xseg loads on
 * machines without a driver and fails there with XSEG_ENODRIVER.  Only
 * <cuda.h> is needed at build time, for the prototypes and types.
 *
 * Work happens in each device's primary context, the one the CUDA runtime
 * and PyTorch use.  It is retained once per device and made current only
 * for the duration of a call when the caller has another (or no) context
 * current, so the caller's context stack is left as it was.  The driver's
 * error name and text are kept per thread for error_string().
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#if CUDA_VERSION < 10020
#error "xseg's CUDA backend needs the headers of CUDA 10.2 or later (virtual memory management API)"
#endif

/* ---- the driver, loaded once per process -------------------------------- */

/* Every entry point used, as (field, exported symbol).  The symbols are the
 * versioned names <cuda.h> maps the plain ones to; the pointer types come
 * from the prototypes, so a signature mismatch is a compile error. */
#define CU_ENTRY_POINTS(X)                                     \
  X(Init, cuInit)                                              \
  X(GetErrorName, cuGetErrorName)                              \
  X(GetErrorString, cuGetErrorString)                          \
  X(DeviceGetCount, cuDeviceGetCount)                          \
  X(DeviceGet, cuDeviceGet)                                    \
  X(DeviceGetAttribute, cuDeviceGetAttribute)                  \
  X(DeviceGetName, cuDeviceGetName)                            \
  X(DeviceTotalMem, cuDeviceTotalMem_v2)                       \
  X(DeviceCanAccessPeer, cuDeviceCanAccessPeer)                \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)          \
  X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)     \
  X(CtxGetCurrent, cuCtxGetCurrent)                            \
  X(CtxPushCurrent, cuCtxPushCurrent_v2)                       \
  X(CtxPopCurrent, cuCtxPopCurrent_v2)                         \
  X(MemGetInfo, cuMemGetInfo_v2)                               \
  X(MemAlloc, cuMemAlloc_v2)                                   \
  X(MemFree, cuMemFree_v2)                                     \
  X(MemGetAllocationGranularity, cuMemGetAllocationGranularity) \
  X(MemAddressReserve, cuMemAddressReserve)                    \
  X(MemAddressFree, cuMemAddressFree)                          \
  X(MemCreate, cuMemCreate)                                    \
  X(MemRelease, cuMemRelease)                                  \
  X(MemMap, cuMemMap)                                          \
  X(MemUnmap, cuMemUnmap)                                      \
  X(MemSetAccess, cuMemSetAccess)                              \
  X(MemExportToShareableHandle, cuMemExportToShareableHandle)  \
  X(MemImportFromShareableHandle, cuMemImportFromShareableHandle) \
  X(EventCreate, cuEventCreate)                                \
  X(EventDestroy, cuEventDestroy_v2)                           \
  X(EventRecord, cuEventRecord)                                \
  X(EventQuery, cuEventQuery)                                  \
  X(EventSynchronize, cuEventSynchronize)

#define CU_DECLARE(field, sym) __typeof__(&sym) field;
static struct {
  CU_ENTRY_POINTS(CU_DECLARE)
} cu;
#undef CU_DECLARE

/* Outcome of loading, written once under drv_once and read-only after. */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_rc;          /* 0 or XSEG_ENODRIVER */
static int drv_ndev;        /* devices the driver sees (0 after CUDA_ERROR_NO_DEVICE) */
static char drv_msg[384];   /* why drv_rc is not 0 */

static _Thread_local char cu_err[512];

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cu_err, sizeof cu_err, fmt, ap);
  va_end(ap);
  return code;
}

static int cu_code(CUresult r) {
  switch (r) {
  case CUDA_SUCCESS: return 0;
  case CUDA_ERROR_OUT_OF_MEMORY: return XSEG_ENOMEM;
  case CUDA_ERROR_NOT_READY: return XSEG_ENOTREADY;
  case CUDA_ERROR_NO_DEVICE:
  case CUDA_ERROR_INVALID_DEVICE: return XSEG_ENODEV;
  case CUDA_ERROR_NOT_SUPPORTED: return XSEG_ENOTSUP;
  default: return XSEG_EBACKEND;
  }
}

/* "CUDA_ERROR_X: description", from the driver itself. */
static void cu_describe(CUresult r, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (cu.GetErrorName == NULL || cu.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (cu.GetErrorString == NULL || cu.GetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  if (name != NULL)
    snprintf(buf, len, "%s: %s", name, text ? text : "(no description)");
  else
    snprintf(buf, len, "CUresult %d (unknown to this driver)", (int)r);
}

/* Record a failed driver call as "<call>: <name>: <text>" and map it. */
static int cu_fail(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cu_fail(CUresult r, const char *fmt, ...) {
  char what[256], why[224];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cu_describe(r, why, sizeof why);
  snprintf(cu_err, sizeof cu_err, "%s: %s", what, why);
  return cu_code(r);
}

static void drv_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *e = dlerror();
    snprintf(drv_msg, sizeof drv_msg,
             "libcuda.so.1 could not be loaded (%s): no NVIDIA driver on this machine",
             e ? e : "no reason given");
    drv_rc = XSEG_ENODRIVER;
    return;
  }
  const char *missing = NULL;
#define CU_RESOLVE(field, sym)                                \
  cu.field = (__typeof__(cu.field))dlsym(lib, #sym);          \
  if (cu.field == NULL && missing == NULL) missing = #sym;
  CU_ENTRY_POINTS(CU_RESOLVE)
#undef CU_RESOLVE
  if (missing != NULL) {
    snprintf(drv_msg, sizeof drv_msg,
             "libcuda.so.1 has no %s: the NVIDIA driver is too old for xseg, which needs the virtual "
             "memory API of CUDA 10.2 (driver 440 or later; CUDA 11.0's driver 450 for sharing memory)", missing);
    memset(&cu, 0, sizeof cu);
    dlclose(lib); /* nothing from it is used */
    drv_rc = XSEG_ENODRIVER;
    return;
  }
  /* The library stays loaded for the life of the process: contexts and
   * handles outlive any one backend, and the driver does not expect to be
   * unloaded. */
  CUresult r = cu.Init(0);
  if (r == CUDA_ERROR_NO_DEVICE) return; /* a driver and no GPU: 0 devices */
  char why[224];
  if (r != CUDA_SUCCESS) {
    cu_describe(r, why, sizeof why);
    snprintf(drv_msg, sizeof drv_msg, "cuInit: %s: the NVIDIA driver is unusable", why);
    drv_rc = XSEG_ENODRIVER;
    return;
  }
  int n = 0;
  if ((r = cu.DeviceGetCount(&n)) != CUDA_SUCCESS) {
    cu_describe(r, why, sizeof why);
    snprintf(drv_msg, sizeof drv_msg, "cuDeviceGetCount: %s", why);
    drv_rc = XSEG_ENODRIVER;
    return;
  }
  drv_ndev = n;
}

/* Load the driver if not yet done: 0, or XSEG_ENODRIVER with the message
 * copied to this thread. */
static int drv_ready(void) {
  pthread_once(&drv_once, drv_load);
  if (drv_rc != 0) return fail(drv_rc, "%s", drv_msg);
  return 0;
}

/* ---- backend state ------------------------------------------------------ */

typedef struct cdev_s {
  CUdevice cudev;                /* driver handle of ordinal i */
  atomic_int no_fd;              /* 1: handles cannot be made shareable as POSIX descriptors here */
  _Atomic(CUcontext) ctx;        /* retained primary context, NULL until first use */
  atomic_int info_ok;            /* info below is filled */
  xs_devinfo_t info;
} cdev_t;

typedef struct cuda_s {
  xs_backend_t be;               /* must be first: the table handed out */
  pthread_mutex_t mu;            /* guards making devs, retains, info fills */
  _Atomic(cdev_t *) devs;        /* drv_ndev entries, made at first use */
} cuda_t;

static cuda_t *C(xs_backend_t *b) { return (cuda_t *)b; }

/* The per-device table, made on first use (the driver must be loaded). */
static int devs_get(cuda_t *c, cdev_t **out) {
  cdev_t *d = atomic_load_explicit(&c->devs, memory_order_acquire);
  if (d != NULL) {
    *out = d;
    return 0;
  }
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  d = atomic_load_explicit(&c->devs, memory_order_relaxed);
  if (d == NULL) {
    d = calloc((size_t)drv_ndev, sizeof *d);
    if (d == NULL) rc = fail(XSEG_ENOMEM, "cuda: out of host memory for %d devices", drv_ndev);
    for (int i = 0; rc == 0 && i < drv_ndev; i++) {
      atomic_init(&d[i].ctx, NULL);
      atomic_init(&d[i].info_ok, 0);
      CUresult r = cu.DeviceGet(&d[i].cudev, i);
      if (r != CUDA_SUCCESS) rc = cu_fail(r, "cuDeviceGet(%d)", i);
    }
    if (rc == 0) {
      atomic_store_explicit(&c->devs, d, memory_order_release);
    } else {
      free(d);
      d = NULL;
    }
  }
  pthread_mutex_unlock(&c->mu);
  *out = d;
  return rc;
}

/* Driver loaded, `dev` valid: its entry.  `what` names the call for the
 * message. */
static int dev_get(cuda_t *c, int dev, const char *what, cdev_t **out) {
  int rc = drv_ready();
  if (rc != 0) return rc;
  if (dev < 0 || dev >= drv_ndev) {
    if (drv_ndev == 0)
      return fail(XSEG_ENODEV, "cuda: %s: device %d: no CUDA device on this machine", what, dev);
    return fail(XSEG_ENODEV, "cuda: %s: device %d out of range [0, %d)", what, dev, drv_ndev);
  }
  cdev_t *d = NULL;
  if ((rc = devs_get(c, &d)) != 0) return rc;
  *out = &d[dev];
  return 0;
}

/* The device's primary context, retained once for this backend. */
static int ctx_get(cuda_t *c, int dev, cdev_t *d, CUcontext *out) {
  CUcontext ctx = atomic_load_explicit(&d->ctx, memory_order_acquire);
  if (ctx != NULL) {
    *out = ctx;
    return 0;
  }
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  ctx = atomic_load_explicit(&d->ctx, memory_order_relaxed);
  if (ctx == NULL) {
    CUresult r = cu.DevicePrimaryCtxRetain(&ctx, d->cudev);
    if (r == CUDA_SUCCESS)
      atomic_store_explicit(&d->ctx, ctx, memory_order_release);
    else
      rc = cu_fail(r, "cuDevicePrimaryCtxRetain(device %d)", dev);
  }
  pthread_mutex_unlock(&c->mu);
  *out = ctx;
  return rc;
}

/* Make the device's primary context current for one call.  *pushed says
 * whether ctx_leave must pop it: not when the caller already has it
 * current, the common case (PyTorch and the runtime use the same one). */
static int ctx_enter(cuda_t *c, int dev, const char *what, cdev_t **dout, int *pushed) {
  cdev_t *d = NULL;
  CUcontext ctx = NULL, cur = NULL;
  int rc = dev_get(c, dev, what, &d);
  if (rc == 0) rc = ctx_get(c, dev, d, &ctx);
  if (rc != 0) return rc;
  CUresult r = cu.CtxGetCurrent(&cur);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuCtxGetCurrent (for %s on device %d)", what, dev);
  *dout = d;
  *pushed = 0;
  if (cur == ctx) return 0;
  if ((r = cu.CtxPushCurrent(ctx)) != CUDA_SUCCESS)
    return cu_fail(r, "cuCtxPushCurrent(primary context of device %d, for %s)", dev, what);
  *pushed = 1;
  return 0;
}

static void ctx_leave(int pushed) {
  CUcontext popped;
  /* Cannot fail after a successful push on this thread; nothing to report. */
  if (pushed) (void)cu.CtxPopCurrent(&popped);
}

/* A pinned allocation on the device, no shareable handle: what create makes
 * and what the granularity is asked for. */
static void alloc_prop(CUmemAllocationProp *prop, CUdevice cudev) {
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = (int)cudev;
}

/* ---- devices ------------------------------------------------------------ */

static int cuda_device_count(xs_backend_t *b, int *count) {
  (void)b; /* the driver's count is process-wide */
  *count = 0;
  int rc = drv_ready();
  if (rc != 0) return rc;
  *count = drv_ndev;
  return 0;
}

/* Query everything from the driver; no context needed. */
static int info_query(int dev, CUdevice cudev, xs_devinfo_t *info) {
  CUresult r;
  int vmm = 0;
  memset(info, 0, sizeof *info);
  r = cu.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cudev);
  if (r != CUDA_SUCCESS)
    return cu_fail(r, "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device %d)", dev);
  info->vmm = vmm != 0;
  CUmemAllocationProp prop;
  alloc_prop(&prop, cudev);
  size_t gran = 0;
  r = cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS || gran == 0 || (gran & (gran - 1)) != 0) {
    if (info->vmm) {
      if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuMemGetAllocationGranularity(device %d)", dev);
      return fail(XSEG_EBACKEND, "cuMemGetAllocationGranularity(device %d): %zu is not a power of two",
                  dev, gran);
    }
    /* Without VMM the granularity is only the binned pool's rounding unit
     * for cuMemAlloc, which has none of its own; take the large-page size. */
    gran = (size_t)2 << 20;
  }
  info->granularity = gran;
  size_t total = 0;
  if ((r = cu.DeviceTotalMem(&total, cudev)) != CUDA_SUCCESS)
    return cu_fail(r, "cuDeviceTotalMem(device %d)", dev);
  info->total = total;
  if ((r = cu.DeviceGetName(info->name, (int)sizeof info->name, cudev)) != CUDA_SUCCESS)
    return cu_fail(r, "cuDeviceGetName(device %d)", dev);
  info->name[sizeof info->name - 1] = '\0';
  return 0;
}

static int cuda_device_info(xs_backend_t *b, int dev, xs_devinfo_t *info) {
  cuda_t *c = C(b);
  cdev_t *d = NULL;
  int rc = dev_get(c, dev, "device_info", &d);
  if (rc != 0) return rc;
  if (!atomic_load_explicit(&d->info_ok, memory_order_acquire)) {
    /* Queried outside the lock; if two threads race, the first copy wins
     * and both hold the same values anyway. */
    xs_devinfo_t fresh;
    if ((rc = info_query(dev, d->cudev, &fresh)) != 0) return rc;
    pthread_mutex_lock(&c->mu);
    if (!atomic_load_explicit(&d->info_ok, memory_order_relaxed)) {
      d->info = fresh;
      atomic_store_explicit(&d->info_ok, 1, memory_order_release);
    }
    pthread_mutex_unlock(&c->mu);
  }
  *info = d->info;
  return 0;
}

static int cuda_mem_info(xs_backend_t *b, int dev, size_t *free_bytes, size_t *total_bytes) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "mem_info", &d, &pushed);
  if (rc != 0) return rc;
  /* cuMemGetInfo reports on the current context's device: hence the push. */
  size_t fr = 0, to = 0;
  CUresult r = cu.MemGetInfo(&fr, &to);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuMemGetInfo(device %d)", dev);
  *free_bytes = fr;
  *total_bytes = to;
  return 0;
}

static int cuda_can_access_peer(xs_backend_t *b, int dev, int peer, int *can) {
  cuda_t *c = C(b);
  cdev_t *d = NULL, *p = NULL;
  int rc = dev_get(c, dev, "can_access_peer", &d);
  if (rc == 0) rc = dev_get(c, peer, "can_access_peer (peer)", &p);
  if (rc != 0) return rc;
  if (dev == peer) {
    /* Not a peer question: answer 0, as the host backend does, rather
     * than depend on what the driver says for a device and itself. */
    *can = 0;
    return 0;
  }
  int v = 0;
  CUresult r = cu.DeviceCanAccessPeer(&v, d->cudev, p->cudev);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuDeviceCanAccessPeer(device %d, peer %d)", dev, peer);
  *can = v != 0;
  return 0;
}

/* ---- virtual address ranges --------------------------------------------- */

static int cuda_reserve(xs_backend_t *b, int dev, size_t size, size_t align, uintptr_t *addr) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "reserve", &d, &pushed);
  if (rc != 0) return rc;
  CUdeviceptr p = 0;
  CUresult r = cu.MemAddressReserve(&p, size, align, 0, 0);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS)
    return cu_fail(r, "cuMemAddressReserve(%zu bytes, alignment %zu, device %d)", size, align, dev);
  *addr = (uintptr_t)p;
  return 0;
}

static int cuda_unreserve(xs_backend_t *b, int dev, uintptr_t addr, size_t size) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "unreserve", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.MemAddressFree((CUdeviceptr)addr, size);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS)
    return cu_fail(r, "cuMemAddressFree(%#lx, %zu bytes, device %d)", (unsigned long)addr, size, dev);
  return 0;
}

/* ---- physical handles and mappings -------------------------------------- */

static int cuda_create(xs_backend_t *b, int dev, size_t size, xs_handle_t *h) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "create", &d, &pushed);
  if (rc != 0) return rc;
  CUmemAllocationProp prop;
  alloc_prop(&prop, d->cudev);
  CUmemGenericAllocationHandle hd = 0;
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  /* Shareable as a POSIX descriptor, so torch.multiprocessing can pass the
   * memory to another process (as PyTorch's expandable segments do); where
   * the device or the system refuses that, plain handles. */
  if (!atomic_load(&d->no_fd)) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    r = cu.MemCreate(&hd, size, &prop, 0);
    if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) atomic_store(&d->no_fd, 1);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  }
  if (atomic_load(&d->no_fd) && r != CUDA_SUCCESS) r = cu.MemCreate(&hd, size, &prop, 0);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuMemCreate(%zu bytes, device %d)", size, dev);
  *h = (xs_handle_t)hd;
  return 0;
}

static int cuda_export(xs_backend_t *b, int dev, xs_handle_t h, int *fd) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "export", &d, &pushed);
  if (rc != 0) return rc;
  int out = -1;
  CUresult r = cu.MemExportToShareableHandle(&out, (CUmemGenericAllocationHandle)h,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS)
    return cu_fail(r, "cuMemExportToShareableHandle(handle %#llx, device %d, POSIX descriptor)%s",
                   (unsigned long long)h, dev,
                   atomic_load(&d->no_fd) ? " (this device's handles are not shareable)" : "");
  *fd = out;
  return 0;
}

static int cuda_import(xs_backend_t *b, int dev, int fd, xs_handle_t *h) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "import", &d, &pushed);
  if (rc != 0) return rc;
  CUmemGenericAllocationHandle hd = 0;
  CUresult r = cu.MemImportFromShareableHandle(&hd, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuMemImportFromShareableHandle(descriptor %d, device %d)", fd, dev);
  *h = (xs_handle_t)hd;
  return 0;
}

static int cuda_release(xs_backend_t *b, int dev, xs_handle_t h) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "release", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.MemRelease((CUmemGenericAllocationHandle)h);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS)
    return cu_fail(r, "cuMemRelease(handle %#llx, device %d)", (unsigned long long)h, dev);
  return 0;
}

static int cuda_map(xs_backend_t *b, int dev, uintptr_t addr, size_t size, xs_handle_t h) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "map", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.MemMap((CUdeviceptr)addr, size, 0, (CUmemGenericAllocationHandle)h, 0);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS)
    return cu_fail(r, "cuMemMap(%#lx, %zu bytes, handle %#llx, device %d)", (unsigned long)addr, size,
                   (unsigned long long)h, dev);
  return 0;
}

static int cuda_unmap(xs_backend_t *b, int dev, uintptr_t addr, size_t size) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "unmap", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.MemUnmap((CUdeviceptr)addr, size);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS)
    return cu_fail(r, "cuMemUnmap(%#lx, %zu bytes, device %d)", (unsigned long)addr, size, dev);
  return 0;
}

/* Enough for every GPU of one host without a malloc on the common path. */
#define CUDA_ACCESS_STACK 16

static int cuda_set_access(xs_backend_t *b, int dev, uintptr_t addr, size_t size, const int *devs,
                           int ndev) {
  cuda_t *c = C(b);
  cdev_t *d = NULL;
  int rc = dev_get(c, dev, "set_access", &d);
  if (rc != 0) return rc;
  if (ndev < 1) return fail(XSEG_EBACKEND, "cuda: set_access on device %d: no device named", dev);
  cdev_t *all = atomic_load_explicit(&c->devs, memory_order_acquire); /* made by dev_get */
  CUmemAccessDesc stack[CUDA_ACCESS_STACK], *desc = stack;
  if (ndev > CUDA_ACCESS_STACK && (desc = calloc((size_t)ndev, sizeof *desc)) == NULL)
    return fail(XSEG_ENOMEM, "cuda: set_access: out of host memory for %d devices", ndev);
  for (int i = 0; i < ndev; i++) {
    if (devs[i] < 0 || devs[i] >= drv_ndev) {
      rc = fail(XSEG_ENODEV, "cuda: set_access on device %d: accessing device %d out of range [0, %d)",
                dev, devs[i], drv_ndev);
      goto out;
    }
    memset(&desc[i], 0, sizeof desc[i]);
    desc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc[i].location.id = (int)all[devs[i]].cudev;
    desc[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  int pushed;
  if ((rc = ctx_enter(c, dev, "set_access", &d, &pushed)) != 0) goto out;
  /* One call for all devices: the driver's cost is per call and handle. */
  CUresult r = cu.MemSetAccess((CUdeviceptr)addr, size, desc, (size_t)ndev);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS)
    rc = cu_fail(r, "cuMemSetAccess(%#lx, %zu bytes, %d device%s, device %d)", (unsigned long)addr, size,
                 ndev, ndev == 1 ? "" : "s", dev);
out:
  if (desc != stack) free(desc);
  return rc;
}

/* ---- conventional allocation (binned pool without VMM) ------------------ */

static int cuda_mem_alloc(xs_backend_t *b, int dev, size_t size, uintptr_t *addr) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "mem_alloc", &d, &pushed);
  if (rc != 0) return rc;
  CUdeviceptr p = 0;
  CUresult r = cu.MemAlloc(&p, size);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuMemAlloc(%zu bytes, device %d)", size, dev);
  *addr = (uintptr_t)p;
  return 0;
}

static int cuda_mem_free(xs_backend_t *b, int dev, uintptr_t addr, size_t size) {
  (void)size; /* the driver knows it */
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "mem_free", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.MemFree((CUdeviceptr)addr);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuMemFree(%#lx, device %d)", (unsigned long)addr, dev);
  return 0;
}

/* ---- events ------------------------------------------------------------- */

static int cuda_event_create(xs_backend_t *b, int dev, xs_event_t *ev) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "event_create", &d, &pushed);
  if (rc != 0) return rc;
  CUevent e = NULL;
  /* Timing costs extra work per record; the allocator only asks "done?". */
  CUresult r = cu.EventCreate(&e, CU_EVENT_DISABLE_TIMING);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuEventCreate(device %d)", dev);
  *ev = (xs_event_t)e;
  return 0;
}

static int cuda_event_destroy(xs_backend_t *b, int dev, xs_event_t ev) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "event_destroy", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.EventDestroy((CUevent)ev);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuEventDestroy(%p, device %d)", ev, dev);
  return 0;
}

static int cuda_event_record(xs_backend_t *b, int dev, xs_event_t ev, xseg_stream_t stream) {
  cdev_t *d = NULL;
  /* The NULL stream means the legacy default stream of the current
   * context, so the primary context must be current here too. */
  int pushed, rc = ctx_enter(C(b), dev, "event_record", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.EventRecord((CUevent)ev, (CUstream)stream);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS)
    return cu_fail(r, "cuEventRecord(event %p, stream %p, device %d)", ev, (void *)stream, dev);
  return 0;
}

static int cuda_event_query(xs_backend_t *b, int dev, xs_event_t ev) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "event_query", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.EventQuery((CUevent)ev);
  ctx_leave(pushed);
  if (r == CUDA_SUCCESS) return 0;
  if (r == CUDA_ERROR_NOT_READY) return XSEG_ENOTREADY; /* pending, not a failure */
  return cu_fail(r, "cuEventQuery(%p, device %d)", ev, dev);
}

static int cuda_event_sync(xs_backend_t *b, int dev, xs_event_t ev) {
  cdev_t *d = NULL;
  int pushed, rc = ctx_enter(C(b), dev, "event_sync", &d, &pushed);
  if (rc != 0) return rc;
  CUresult r = cu.EventSynchronize((CUevent)ev);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuEventSynchronize(%p, device %d)", ev, dev);
  return 0;
}

/* ---- misc --------------------------------------------------------------- */

static uint64_t cuda_now(xs_backend_t *b) {
  (void)b;
  return xs_clock_ns();
}

static void cuda_sleep(xs_backend_t *b, uint64_t ns) {
  (void)b;
  xs_sleep_ns(ns);
}

static const char *cuda_error_string(xs_backend_t *b) {
  (void)b; /* messages are per thread, not per backend */
  return cu_err;
}

static void cuda_destroy(xs_backend_t *b) {
  cuda_t *c = C(b);
  cdev_t *d = atomic_load_explicit(&c->devs, memory_order_acquire);
  for (int i = 0; d != NULL && i < drv_ndev; i++) {
    /* Drop only our own reference: the context lives on for any other
     * holder (the runtime, PyTorch, another backend). */
    if (atomic_load_explicit(&d[i].ctx, memory_order_relaxed) != NULL)
      (void)cu.DevicePrimaryCtxRelease(d[i].cudev);
  }
  free(d);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

int xs_cuda_backend_create(xs_backend_t **out) {
  /* Builds the table only: the driver is loaded by the first call that
   * needs it, so this succeeds on machines without one. */
  cuda_t *c = calloc(1, sizeof *c);
  if (c == NULL) return fail(XSEG_ENOMEM, "cuda: out of host memory for the backend");
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    free(c);
    return fail(XSEG_ENOMEM, "cuda: cannot initialise the backend's mutex");
  }
  atomic_init(&c->devs, NULL);
  xs_backend_t *be = &c->be;
  be->name = "cuda";
  be->creates_wait = 1;
  be->device_count = cuda_device_count;
  be->device_info = cuda_device_info;
  be->mem_info = cuda_mem_info;
  be->can_access_peer = cuda_can_access_peer;
  be->reserve = cuda_reserve;
  be->unreserve = cuda_unreserve;
  be->create = cuda_create;
  be->release = cuda_release;
  be->map = cuda_map;
  be->unmap = cuda_unmap;
  be->set_access = cuda_set_access;
  be->mem_alloc = cuda_mem_alloc;
  be->mem_free = cuda_mem_free;
  be->event_create = cuda_event_create;
  be->event_destroy = cuda_event_destroy;
  be->event_record = cuda_event_record;
  be->event_query = cuda_event_query;
  be->event_sync = cuda_event_sync;
  be->export_handle = cuda_export;
  be->import_handle = cuda_import;
  be->now_ns = cuda_now;
  be->sleep_ns = cuda_sleep;
  be->error_string = cuda_error_string;
  be->destroy = cuda_destroy;
  *out = be;
  return 0;
}
