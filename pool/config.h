/* pool/config.h: the effective configuration of xseg and its parser.
 *
 * Every option is defined once, in the table in pool/config.c (key, type,
 * default, range, help); nothing else in the library names an option.  The
 * grammar is PyTorch's PYTORCH_CUDA_ALLOC_CONF: `key:value` pairs separated
 * by commas, spaces ignored, lists in brackets.  Parsing is strict: the
 * first unknown key, malformed pair or out-of-range value stops it with a
 * message that names the key, the value and the accepted form.
 */
#ifndef XSEG_POOL_CONFIG_H
#define XSEG_POOL_CONFIG_H

#include <stddef.h>

enum { XS_BACKEND_CUDA = 0, XS_BACKEND_HOST = 1 };

/* Where an option's value came from. */
enum { XS_SRC_DEFAULT = 0, XS_SRC_ENV = 1, XS_SRC_API = 2 };

/* roundup_power2_divisions: one entry per power-of-two size interval in MiB:
 * [0] sizes < 1 MiB, [1] [1, 2) MiB, [2] [2, 4) MiB, ... [XS_ROUNDUP_BINS-1]
 * everything from 2^(XS_ROUNDUP_BINS-2) MiB up.  0 means "no rounding" for
 * that interval. */
#define XS_ROUNDUP_BINS 16

#define XS_PATH_MAX 512

/* Option identifiers: the table in config.c is indexed by these. */
typedef enum xs_opt_e {
  XS_OPT_BACKEND,
  XS_OPT_EXPANDABLE_SEGMENTS,
  XS_OPT_MAX_SPLIT_SIZE_MB,
  XS_OPT_GARBAGE_COLLECTION_THRESHOLD,
  XS_OPT_ROUNDUP_POWER2_DIVISIONS,
  XS_OPT_RELEASE_THRESHOLD_MB,
  XS_OPT_PAGE_SIZE_MB,
  XS_OPT_PER_PROCESS_MEMORY_FRACTION,
  XS_OPT_MAX_MEMORY_MB,
  XS_OPT_HOST_CAPACITY_MB,
  XS_OPT_HOST_GRANULARITY_KB,
  XS_OPT_HOST_DEVICES,
  XS_OPT_PEER_ACCESS,
  XS_OPT_STATS_FILE,
  XS_OPT_TRACE_FILE,
  XS_OPT_VERBOSE,
  XS_OPT__COUNT
} xs_opt_t;

typedef struct xs_config_s {
  int backend;                  /* XS_BACKEND_CUDA (default) or XS_BACKEND_HOST */
  int expandable;               /* 1 (default): expandable segments; 0: binned pool */
  size_t max_split_size;        /* bytes; SIZE_MAX = no limit; 0 (default) = auto */
  double gc_threshold;          /* 0 (default) = off, else in (0, 1) */
  unsigned roundup_div[XS_ROUNDUP_BINS]; /* 0 = off (default) */
  size_t release_threshold;     /* bytes of mapped free memory kept; SIZE_MAX (default) = all */
  size_t page_size;             /* bytes of a large-segment handle; 0 (default) = adaptive */
  double memory_fraction;       /* (0, 1], default 1 */
  size_t max_memory;            /* bytes; 0 (default) = no cap */
  size_t host_capacity;         /* bytes of each host device, default 4 GiB */
  size_t host_granularity;      /* bytes, default 2 MiB */
  int host_devices;             /* default 1 */
  int peer_access;              /* 1: give every other device access; default 0 */
  char stats_file[XS_PATH_MAX]; /* "" = none */
  char trace_file[XS_PATH_MAX]; /* "" = none */
  int verbose;                  /* default 0 */
  unsigned char source[XS_OPT__COUNT]; /* XS_SRC_* per option */
} xs_config_t;

/* Fill every field with its default (source XS_SRC_DEFAULT). */
void xs_config_defaults(xs_config_t *c);

/* Parse `text` (NULL or "" = nothing to set) on top of *c, marking the
 * options it sets with `source`.  Returns 0, or XSEG_ECONFIG with a message
 * in err (always NUL-terminated) such as
 *   XSEG_ALLOC_CONF: garbage_collection_threshold:1.5 is out of range (0, 1)
 * `origin` names the text in messages ("XSEG_ALLOC_CONF" or "xseg_init").
 * On error *c is left unchanged. */
int xs_config_parse(xs_config_t *c, const char *text, int source, const char *origin, char *err,
                    size_t errlen);

/* Write the effective configuration, one `key:value (source)` line per
 * option, snprintf-like. */
size_t xs_config_describe(const xs_config_t *c, char *buf, size_t len);

/* Round a request size per roundup_power2_divisions (then the allocator
 * rounds to 512 bytes).  Returns `size` unchanged when the interval's
 * division is 0, and 0 on overflow. */
size_t xs_config_roundup(const xs_config_t *c, size_t size);

#endif /* XSEG_POOL_CONFIG_H */
