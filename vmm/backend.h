/* vmm/backend.h: the contract between the allocator and where its memory
 * comes from.
 *
 * A backend is a table of function pointers picked at run time: the CUDA
 * driver backend (vmm/cuda_backend.c) or the host backend (vmm/host_backend.c),
 * which implements the same semantics on host memory for tests and CI.
 * Only vmm/phys.c calls through this table; it adds timing, statistics and
 * messages that name the call, the address, the size and the error.
 *
 * Semantics follow the CUDA driver's virtual memory API:
 *  - reserve   a virtual address range (cuMemAddressReserve).  Nothing is
 *              accessible in it until mapped and given access.
 *  - create    a physical allocation handle of `size` bytes (cuMemCreate).
 *  - map       a whole handle at an address inside a reservation
 *              (cuMemMap with offset 0).  The target range must be unmapped.
 *  - set_access  make a mapped range readable and writable by devices
 *              (cuMemSetAccess).  Every new mapping starts inaccessible.
 *  - unmap     a range made of whole mappings (cuMemUnmap).  A handle's
 *              memory lives until it is both released and unmapped.
 *  - release   a handle (cuMemRelease).
 *  - events    created per device, recorded on a stream, queried (without
 *              blocking) and synchronised (blocking).
 *
 * Preconditions, stated once for every call below:
 *  - `dev` is in [0, device_count).
 *  - addresses and sizes given to reserve/unreserve/create/map/unmap/
 *    set_access are non-zero multiples of the device's granularity.
 *  - a handle or event passed in was returned by this backend and not yet
 *    released or destroyed.
 * Every call returns 0 or an XSEG_E* code: XSEG_ENOMEM when the device has
 * no memory for the request, XSEG_ENOTREADY from event_query while the
 * event is pending, XSEG_ENODRIVER/XSEG_ENODEV when there is no driver or no
 * device, XSEG_ENOTSUP for a capability the device lacks, and XSEG_EBACKEND
 * for any other refusal.  After a non-zero return, error_string() gives the
 * backend's own text for the calling thread (the driver's error name and
 * description for CUDA).
 */
#ifndef XSEG_VMM_BACKEND_H
#define XSEG_VMM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "xseg.h"

typedef uint64_t xs_handle_t; /* physical allocation (CUmemGenericAllocationHandle) */
typedef void *xs_event_t;     /* CUevent, or the host backend's event */

/* Capabilities of one device, as data. */
typedef struct xs_devinfo_s {
  int vmm;             /* 1 if reserve/create/map are supported */
  size_t granularity;  /* minimum mapping granularity in bytes (power of two) */
  size_t total;        /* physical memory of the device in bytes */
  char name[96];       /* e.g. "NVIDIA H100 80GB HBM3" or "host" */
} xs_devinfo_t;

/* The kinds of call, for counters and fault injection. */
typedef enum xs_call_e {
  XS_CALL_RESERVE,
  XS_CALL_UNRESERVE,
  XS_CALL_CREATE,
  XS_CALL_RELEASE,
  XS_CALL_MAP,
  XS_CALL_UNMAP,
  XS_CALL_SET_ACCESS,
  XS_CALL_MEM_ALLOC,
  XS_CALL_MEM_FREE,
  XS_CALL_EVENT_CREATE,
  XS_CALL_EVENT_DESTROY,
  XS_CALL_EVENT_RECORD,
  XS_CALL_EVENT_QUERY,
  XS_CALL_EVENT_SYNC,
  XS_CALL_MEM_INFO,
  XS_CALL_EXPORT,
  XS_CALL_IMPORT,
  XS_CALL__COUNT
} xs_call_t;

extern const char *const xs_call_names[XS_CALL__COUNT];

typedef struct xs_backend_s xs_backend_t;
struct xs_backend_s {
  const char *name; /* "cuda" or "host" */
  /* Whether a create can wait for the device (the driver scrubbing memory
   * a release gave back): always on the GPU; on the host backend only
   * while xs_host_scrub models it.  Where it cannot, a slow create is the
   * host's own noise, and pacing (vmm/phys.c) must not learn from it. */
  int creates_wait;

  /* Devices and memory. */
  int (*device_count)(xs_backend_t *b, int *count);
  int (*device_info)(xs_backend_t *b, int dev, xs_devinfo_t *info);
  int (*mem_info)(xs_backend_t *b, int dev, size_t *free_bytes, size_t *total_bytes);
  int (*can_access_peer)(xs_backend_t *b, int dev, int peer, int *can);

  /* Virtual address ranges.  `align` is 0 or a power of two >= granularity. */
  int (*reserve)(xs_backend_t *b, int dev, size_t size, size_t align, uintptr_t *addr);
  int (*unreserve)(xs_backend_t *b, int dev, uintptr_t addr, size_t size);

  /* Physical handles. */
  int (*create)(xs_backend_t *b, int dev, size_t size, xs_handle_t *h);
  int (*release)(xs_backend_t *b, int dev, xs_handle_t h);
  int (*map)(xs_backend_t *b, int dev, uintptr_t addr, size_t size, xs_handle_t h);
  int (*unmap)(xs_backend_t *b, int dev, uintptr_t addr, size_t size);
  /* Give read/write access to [addr, addr+size) to devs[0..ndev): the owner
   * first, then peers.  The range must be wholly mapped. */
  int (*set_access)(xs_backend_t *b, int dev, uintptr_t addr, size_t size, const int *devs,
                    int ndev);

  /* Conventional allocation for the binned pool where VMM is missing
   * (cuMemAlloc / cuMemFree).  size: any multiple of the granularity. */
  int (*mem_alloc)(xs_backend_t *b, int dev, size_t size, uintptr_t *addr);
  int (*mem_free)(xs_backend_t *b, int dev, uintptr_t addr, size_t size);

  /* Sharing with other processes: a handle as a POSIX file descriptor
   * (cuMemExportToShareableHandle; the handle must have been created
   * shareable), and a handle from such a descriptor of another process
   * (cuMemImportFromShareableHandle; released with release).  XSEG_ENOTSUP
   * where the backend or the device cannot. */
  int (*export_handle)(xs_backend_t *b, int dev, xs_handle_t h, int *fd);
  int (*import_handle)(xs_backend_t *b, int dev, int fd, xs_handle_t *h);

  /* Events. */
  int (*event_create)(xs_backend_t *b, int dev, xs_event_t *ev);
  int (*event_destroy)(xs_backend_t *b, int dev, xs_event_t ev);
  int (*event_record)(xs_backend_t *b, int dev, xs_event_t ev, xseg_stream_t stream);
  int (*event_query)(xs_backend_t *b, int dev, xs_event_t ev); /* 0 done, XSEG_ENOTREADY */
  int (*event_sync)(xs_backend_t *b, int dev, xs_event_t ev);

  /* Monotonic clock in nanoseconds, and a sleep on it (the host backend's
   * modelled time advances its clock instead of sleeping). */
  uint64_t (*now_ns)(xs_backend_t *b);
  void (*sleep_ns)(xs_backend_t *b, uint64_t ns);

  /* The backend's own text for the calling thread's last failed call. */
  const char *(*error_string)(xs_backend_t *b);

  /* Free the backend itself.  Everything it handed out must be gone. */
  void (*destroy)(xs_backend_t *b);
};

/* Backend constructors (0 or XSEG_E*).  Neither touches a device until a
 * call needs one. */
typedef struct xs_host_params_s {
  int devices;          /* simulated devices, >= 1 */
  size_t capacity;      /* bytes of "device memory" per device */
  size_t granularity;   /* bytes, power of two >= the OS page size */
} xs_host_params_t;

int xs_host_backend_create(const xs_host_params_t *params, xs_backend_t **out);
int xs_cuda_backend_create(xs_backend_t **out);

uint64_t xs_clock_ns(void); /* CLOCK_MONOTONIC */
void xs_sleep_ns(uint64_t ns); /* nanosleep, resumed after signals */

#endif /* XSEG_VMM_BACKEND_H */
