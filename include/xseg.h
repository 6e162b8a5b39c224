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
 * binned mode, every wholly free segment) to the driver.  With nothing
 * live on the device this is a new start: what the allocator learned of
 * the workload is dropped, and the next one is placed as in a fresh
 * process (what it learned of the driver is kept).  device -1: all. */
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

/* PyTorch CUDAPluggableAllocator entry points (docs/pytorch.md), for C++
 * programs that build their own pluggable allocator; the Python package
 * installs xseg as PyTorch's native allocator instead.  A size of 0 returns
 * NULL (PyTorch never frees a NULL data pointer); a negative size returns
 * NULL with an error.  PyTorch's pluggable wrapper does not check for NULL,
 * so xseg_torch_alloc also prints its diagnosis to stderr. */
XSEG_API void *xseg_torch_alloc(ssize_t size, int device, xseg_stream_t stream);
XSEG_API void xseg_torch_free(void *ptr, ssize_t size, int device, xseg_stream_t stream);

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

/* Check a configuration string (NULL: XSEG_ALLOC_CONF) without starting
 * anything, and write its effective `key:value` lines, snprintf-like.
 * Returns 0 with XSEG_ECONFIG's message if it is invalid. */
XSEG_API size_t xseg_config_check(const char *conf, char *buf, size_t len);

/* Use `conf` (NULL: XSEG_ALLOC_CONF) when the library starts, on first use,
 * without starting it now: nothing touches a driver until memory is asked
 * for.  If the library has started already, as xseg_init(conf).
 * XSEG_ECONFIG (nothing changed) if the string is invalid. */
XSEG_API int xseg_configure(const char *conf);

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

/* ---- For framework allocators (PyTorch's binding in python/) ------------ */

/* One torch-style statistic: .current, .peak (since the last peak reset),
 * and what was added and taken away (since the last accumulated reset). */
typedef struct xseg_stat_s {
  int64_t current, peak, allocated, freed;
} xseg_stat_t;

/* Index of the per-pool arrays below: all, the small pool (requests up to
 * 1 MiB), the large pool. */
enum { XSEG_POOL_ALL = 0, XSEG_POOL_SMALL = 1, XSEG_POOL_LARGE = 2 };

/* A device's statistics with the meaning torch.cuda.memory_stats() gives
 * the same names (docs/pytorch.md, "What each number means").  Fields are
 * only ever appended: set struct_size to sizeof(xseg_device_stats_t). */
typedef struct xseg_device_stats_s {
  size_t struct_size;
  xseg_stat_t allocation[3];           /* live blocks */
  xseg_stat_t segment[3];              /* physical allocations mapped (handles, or binned segments) */
  xseg_stat_t active[3];               /* live blocks and freed ones waiting for other streams */
  xseg_stat_t inactive_split[3];       /* free mapped blocks inside larger mapped memory */
  xseg_stat_t allocated_bytes[3];
  xseg_stat_t reserved_bytes[3];       /* bytes mapped */
  xseg_stat_t active_bytes[3];
  xseg_stat_t inactive_split_bytes[3];
  xseg_stat_t requested_bytes[3];      /* what the callers asked for */
  xseg_stat_t oversize_allocations;    /* live blocks of max_split_size or more */
  xseg_stat_t oversize_segments;       /* binned segments of max_split_size or more */
  uint64_t num_alloc_retries;          /* allocations that released or remapped memory and retried */
  uint64_t num_ooms;
  uint64_t num_sync_all_streams;       /* always 0: xseg never waits for every stream */
  uint64_t num_device_alloc;           /* cuMemCreate / cuMemAlloc */
  uint64_t num_device_free;            /* cuMemRelease / cuMemFree */
  uint64_t max_split_size;             /* in effect; UINT64_MAX: none */
  /* xseg's own */
  int64_t held_bytes;                  /* mapped plus cached handles */
  int64_t limit_bytes;                 /* what xseg may hold */
  int64_t total_bytes;                 /* the device's memory */
  uint64_t num_fence_waits;            /* waits for one stream before unmapping */
} xseg_device_stats_t;

/* Fill *out (out->struct_size set by the caller). */
XSEG_API int xseg_device_stats(int device, xseg_device_stats_t *out);

/* Set the .allocated and .freed parts of every statistic, and every
 * counter, to 0 (torch.cuda.reset_accumulated_memory_stats).  device -1:
 * all.  The allocator's behaviour does not depend on them. */
XSEG_API int xseg_reset_accumulated_stats(int device);

/* What the driver reports free and in all on the device (cuMemGetInfo). */
XSEG_API int xseg_mem_info(int device, size_t *free_bytes, size_t *total_bytes);

/* The largest free block cached on the device, or when none is, what could
 * still be mapped (for sizing a workspace, as cuDNN does). */
XSEG_API int xseg_cache_info(int device, size_t *largest);

/* The live block that holds ptr (ptr may point inside it): its start and
 * size.  XSEG_EINVAL if ptr is in no live block. */
XSEG_API int xseg_base_allocation(void *ptr, void **base, size_t *size);

/* A walk over a device's segments and blocks, under its lock: for each
 * mapped run of a segment (what PyTorch's snapshot calls a segment), one
 * call of `segment`, then one call of `block` per block in it, in address
 * order.  The callbacks must not call xseg; a non-zero return stops the
 * walk and is returned. */
enum { XSEG_BLOCK_FREE = 0, XSEG_BLOCK_LIVE = 1, XSEG_BLOCK_PENDING = 2 };
typedef struct xseg_segment_info_s {
  uintptr_t address;
  size_t size;
  xseg_stream_t stream;
  int large;      /* 1: the large pool */
  int expandable; /* 1: pages mapped on demand */
  int pool;       /* the private pool it belongs to, 0: the device's own */
} xseg_segment_info_t;
typedef struct xseg_block_info_s {
  uintptr_t address;
  size_t size;
  size_t requested; /* live: what the caller asked for */
  int state;        /* XSEG_BLOCK_* */
} xseg_block_info_t;
typedef struct xseg_walker_s {
  int (*segment)(void *arg, const xseg_segment_info_t *seg);
  int (*block)(void *arg, const xseg_block_info_t *blk);
} xseg_walker_t;
XSEG_API int xseg_walk(int device, const xseg_walker_t *w, void *arg);

/* Private pools (CUDA graphs, torch.cuda.MemPool).  Memory allocated in a
 * private pool is reused only by that pool: a block freed there stays
 * there, and its pages are never unmapped or remapped elsewhere while the
 * pool is open - a captured CUDA graph writes to the same addresses on
 * every replay.  xseg_pool_release closes the pool: no more allocations,
 * and its free memory may then be released or remapped; blocks still live
 * return as they are freed.  Ids are positive. */
XSEG_API int xseg_pool_create(int device, int *pool);
XSEG_API int xseg_pool_release(int device, int pool);
/* xseg_malloc into private pool `pool` (0: the device's own). */
XSEG_API void *xseg_malloc_in_pool(size_t size, int device, xseg_stream_t stream, int pool);
/* Live blocks of a pool (0 and *live set), e.g. before a graph is freed. */
XSEG_API int xseg_pool_live(int device, int pool, size_t *live);
/* Allocate exactly [addr, addr + size) in stream's part of private pool
 * `pool` (0: the device's own), where that range lies in one free mapped
 * block of it: a framework restoring a pool's earlier layout (CUDA graph
 * trees) asks for the very blocks it had.  size is a block size as
 * xseg_walk reports it.  NULL (XSEG_EINVAL) if the range is not free there. */
XSEG_API void *xseg_malloc_at(void *addr, size_t size, int device, xseg_stream_t stream, int pool);

/* Sharing memory with another process (torch.multiprocessing).  Export
 * writes a handle for the live block at ptr into buf (*len: its size in,
 * the handle's length out; XSEG_ERANGE and the length needed if too small)
 * and the block's offset in the range the handle maps.  The same block
 * always gives the same handle.  Open maps a handle from another process
 * on `device` and returns the start of that range (add the offset); close
 * unmaps it.  The other process must keep the block alive meanwhile.
 * Needs the cuda backend and expandable segments; the receiver reads the
 * sender's descriptors with pidfd_getfd(2), so it needs permission to
 * ptrace it (xseg grants that to processes of the same user, see
 * docs/pytorch.md). */
XSEG_API int xseg_ipc_export(void *ptr, void *buf, size_t *len, size_t *offset);
XSEG_API int xseg_ipc_open(const void *buf, size_t len, int device, void **base);
XSEG_API int xseg_ipc_close(void *base);

/* 1 if the device's allocator exists (it is made by the first call that
 * needs it), 0 if not, negative XSEG_E* on error.  Never creates one, so
 * asking about an unused GPU leaves it untouched. */
XSEG_API int xseg_device_active(int device);

/* A CUDA graph capture (or a framework's private-pool context) is underway
 * on the device: until the matching xseg_capture_end, xseg records, queries
 * and waits on no event (a query during a global-mode capture would break
 * it).  Frees that need events are kept until then; memory behind a fence
 * the GPU has not yet passed is not unmapped.  Calls nest. */
XSEG_API int xseg_capture_begin(int device);
XSEG_API int xseg_capture_end(int device);

#ifdef __cplusplus
}
#endif
#endif /* XSEG_H */
