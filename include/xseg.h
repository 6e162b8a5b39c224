/* xseg.h: the whole public C API of xseg, a GPU memory allocator for CUDA.
 *
 * xseg reserves large virtual address ranges with the CUDA driver's virtual
 * memory API and maps physical pages into them on demand, so its segments
 * grow and shrink and free physical memory is never stranded in a hole.
 * Where VMM is unavailable (or `expandable_segments:False`) a binned caching
 * pool takes over.  The library configures itself from the environment
 * variable XSEG_ALLOC_CONF on first use (see docs/config.md), or from
 * xseg_init().
 *
 * Conventions
 *  - Every function is thread-safe.
 *  - Functions returning int return XSEG_OK (0) or one of the XSEG_E* codes;
 *    xseg_last_error() then holds a human-readable message for the calling
 *    thread.  Functions returning a pointer return NULL on failure.
 *  - Pointers are aligned to 512 bytes.
 *  - A pointer belongs to the stream it was allocated on: it may be reused
 *    by that stream as soon as it is freed; other streams that used it must
 *    be declared with xseg_record_stream() before the free.
 */
#ifndef XSEG_H
#define XSEG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h> /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define XSEG_API __attribute__((visibility("default")))
#else
#define XSEG_API
#endif

#define XSEG_VERSION_MAJOR 0
#define XSEG_VERSION_MINOR 1
#define XSEG_VERSION_PATCH 0

/* Same type as cudaStream_t and CUstream; NULL is the legacy default stream. */
typedef struct CUstream_st *xseg_stream_t;

/* Error codes. */
enum {
  XSEG_OK = 0,
  XSEG_EINVAL = 1,    /* invalid argument: unknown, interior or freed pointer, bad size */
  XSEG_ENOMEM = 2,    /* out of device memory after releasing cache and retrying */
  XSEG_ECONFIG = 3,   /* XSEG_ALLOC_CONF (or xseg_init's string) is invalid */
  XSEG_ENODRIVER = 4, /* libcuda.so.1 missing or unusable */
  XSEG_ENODEV = 5,    /* device index out of range, or no device */
  XSEG_EBACKEND = 6,  /* the driver (or host backend) refused a call */
  XSEG_ENOTSUP = 7,   /* operation not supported in this mode or by the device */
  XSEG_EBUSY = 8,     /* operation needs the allocator idle (e.g. xseg_init with live blocks) */
  XSEG_ENOTREADY = 9, /* an event has not completed yet (backend level) */
  XSEG_ECORRUPT = 10, /* xseg_check_heap found an inconsistency */
  XSEG_ERANGE = 11    /* a buffer was too small (snapshot) or a value out of range */
};

/* ---- The contract (docs/design.md) ------------------------------------ */

/* Allocate `size` bytes on `device` for use on `stream`.  NULL on failure
 * (xseg_last_error() says why).  size 0 returns a unique minimal block, as
 * malloc(0) does in most C allocators; it must be freed. */
XSEG_API void *xseg_malloc(size_t size, int device, xseg_stream_t stream);

/* Free a pointer returned by xseg_malloc.  NULL is a no-op returning 0.
 * A foreign, interior or already freed pointer returns XSEG_EINVAL and
 * changes nothing. */
XSEG_API int xseg_free(void *ptr);

/* Declare that `stream` uses `ptr` too: its free then waits (through an
 * event, without blocking the host) until that stream's work is done. */
XSEG_API int xseg_record_stream(void *ptr, xseg_stream_t stream);

/* Unmap every wholly free page and release every cached handle (or, in
 * binned mode, every wholly free segment) to the driver.  device -1: all. */
XSEG_API int xseg_empty_cache(int device);

/* Reset the .peak fields of the device's statistics to their current value.
 * device -1: all. */
XSEG_API int xseg_reset_peak_stats(int device);

/* Write the device's statistics as JSON (docs/metrics.md).  Behaves like
 * snprintf: returns the length the full text needs (excluding the NUL), and
 * writes at most len bytes, always NUL-terminated when len > 0.  Returns 0
 * on error (bad device, allocator not initialised and cannot be). */
XSEG_API size_t xseg_stats_json(int device, char *buf, size_t len);

/* Print a human-readable summary of the device's memory, modelled on
 * torch.cuda.memory_summary(), with fragmentation lines. */
XSEG_API void xseg_print_summary(int device, FILE *out);

/* The last error of the calling thread, never NULL ("" when none). */
XSEG_API const char *xseg_last_error(void);

/* PyTorch CUDAPluggableAllocator entry points (docs/pytorch.md).  A size of
 * 0 returns NULL (PyTorch never frees a NULL data pointer); a negative size
 * returns NULL with an error.  PyTorch's pluggable wrapper does not check
 * for NULL, so xseg_torch_alloc also prints its diagnosis to stderr;
 * libxseg_torch.so's xseg_torch_alloc_raising throws instead, which PyTorch
 * raises as RuntimeError (docs/pytorch.md, "Out of memory"). */
XSEG_API void *xseg_torch_alloc(ssize_t size, int device, xseg_stream_t stream);
XSEG_API void xseg_torch_free(void *ptr, ssize_t size, int device, xseg_stream_t stream);
/* Hooks with the signatures PyTorch's pluggable allocator calls
 * (record_stream, empty_cache / reset, set_memory_fraction); errors are
 * printed to stderr, as there is no way to return them. */
XSEG_API void xseg_torch_record_stream(void *ptr, xseg_stream_t stream);
XSEG_API void xseg_torch_empty_cache(void);
XSEG_API void xseg_torch_set_memory_fraction(double fraction, int device);

/* ---- Beyond the contract ----------------------------------------------- */

/* The code of the calling thread's last error (XSEG_OK when none). */
XSEG_API int xseg_last_error_code(void);

/* Initialise (or re-initialise) from a configuration string with the same
 * grammar as XSEG_ALLOC_CONF.  NULL reads the environment.  Values not given
 * take their defaults (the environment is NOT merged with a string).
 * Returns XSEG_ECONFIG for an invalid string (the library then stays
 * unusable until a valid configuration is given) and XSEG_EBUSY if memory
 * is still allocated. */
XSEG_API int xseg_init(const char *conf);

/* Release everything back to the driver and return to the uninitialised
 * state; the next call initialises again.  XSEG_EBUSY if memory is still
 * allocated (nothing is released then). */
XSEG_API int xseg_shutdown(void);

/* Walk every segment, page and block of the device and check the
 * allocator's invariants.  XSEG_OK, or XSEG_ECORRUPT with the first broken
 * invariant in xseg_last_error().  Never allocates device memory.
 * device -1: all. */
XSEG_API int xseg_check_heap(int device);

/* Segments, pages and blocks as JSON (docs/metrics.md), snprintf-like. */
XSEG_API size_t xseg_snapshot_json(int device, char *buf, size_t len);

/* Effective configuration as `key:value` lines with their source,
 * snprintf-like.  Returns 0 if the configuration is invalid. */
XSEG_API size_t xseg_config_describe(char *buf, size_t len);

/* Number of devices the active backend sees (initialises the library);
 * negative XSEG_E* code on failure. */
XSEG_API int xseg_device_count(void);

/* Cap the device memory xseg may hold on `device` at fraction (0, 1] of the
 * device's total, as per_process_memory_fraction does at initialisation.
 * Memory already held above the new cap is not taken back; growth past it
 * fails (after releasing cache and remapping). */
XSEG_API int xseg_set_memory_fraction(double fraction, int device);

/* Give `peer` access to every page of `device`, now and later. */
XSEG_API int xseg_enable_peer_access(int device, int peer);

/* The library's version, "MAJOR.MINOR.PATCH". */
XSEG_API const char *xseg_version(void);

#ifdef __cplusplus
}
#endif
#endif /* XSEG_H */
