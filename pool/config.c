/* pool/config.c: the option table and the XSEG_ALLOC_CONF parser.
 *
 * Every option is one row of g_opts, indexed by xs_opt_t: key, type, default
 * (written as a user would write it), accepted form, one line of help, and
 * the bounds the type's parser checks.  xs_config_defaults, xs_config_parse
 * and xs_config_describe all walk that table, so an option cannot be known
 * to one of them and missing from another, and describe's output is always
 * in the syntax the parser reads back.
 *
 * The parser is strict (jemalloc's conf.c is the model): the first unknown
 * key, malformed pair or out-of-range value stops it with one message that
 * names the key, the value and the accepted form.  It works on a copy, so a
 * failed parse changes nothing.  It allocates nothing, never reads past the
 * NUL, keeps at most XS_PATH_MAX bytes of any token, and depends only on
 * xseg.h and config.h: the fuzzer (test/fuzz/fuzz_config.c) links it alone.
 */
#include "config.h"

#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg.h"

#if defined(__GNUC__)
#define XS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define XS_PRINTF(f, a)
#endif

#define XS_MB ((size_t)1 << 20)
#define XS_KB ((size_t)1 << 10)

/* roundup_power2_divisions.  Bins (config.h) in MiB:
 *   bin 0: size < 1            bin k (1..14): 2^(k-1) <= size < 2^k
 *   bin 15: size >= 2^14 (16 GiB)
 * A list key K (a power of two in MiB, 1..16384) names bin log2(K), the
 * interval just below K: [K/2, K) MiB, or everything under 1 MiB for K = 1.
 * So [256:1,512:2,1024:4,>:8] reads as PyTorch documents it: 1 division
 * under 256 MiB, 2 in [256, 512), 4 in [512, 1024), 8 from 1 GiB up. */
#define XS_DIV_MAX 1024u       /* more steps than this only adds bins, not reuse */
#define XS_DIV_KEY_MAX 16384u  /* 2^14 MiB: the last key with a bin of its own */

/* Longest token kept: a path must fit XS_PATH_MAX with its NUL, and no
 * other value comes near it. */
#define XS_WORD_MAX (XS_PATH_MAX - 1)

/* Bytes of a value shown in a message before it is cut with "...". */
#define XS_SHOW_BYTES 48
#define XS_SHOW_BUF (XS_SHOW_BYTES * 4 + 8)

typedef enum xs_type_e {
  XS_T_BOOL, /* True/False in any case, or 1/0 -> int */
  XS_T_ENUM, /* one word of `words`, any case -> int index */
  XS_T_INT,  /* decimal count -> int */
  XS_T_SIZE, /* decimal count of `unit` bytes -> size_t bytes */
  XS_T_REAL, /* decimal number -> double */
  XS_T_DIVS, /* roundup_power2_divisions: N or [MB:N,...,>:N] -> roundup_div[] */
  XS_T_PATH  /* file name -> char[XS_PATH_MAX]; empty value = none */
} xs_type_t;

enum {
  XS_F_POW2 = 1u << 0,      /* value must be a power of two */
  XS_F_ZERO = 1u << 1,      /* 0 is accepted outside [min, max] (off, adaptive, no cap) */
  XS_F_UNLIMITED = 1u << 2, /* the word `unlimited` stands for SIZE_MAX bytes */
  XS_F_LO_OPEN = 1u << 3,   /* REAL: lower bound excluded */
  XS_F_HI_OPEN = 1u << 4,   /* REAL: upper bound excluded */
  XS_F_AUTO = 1u << 5       /* the word `auto` stands for 0: the allocator decides */
};

typedef struct xs_optdef_s {
  const char *key;
  xs_type_t type;
  const char *def;  /* default, in the syntax a user writes; defaults parse it */
  const char *form; /* accepted form, shown after `key:` in messages */
  const char *help; /* one line on what it does */
  size_t off;       /* offsetof(xs_config_t, field) */
  unsigned flags;   /* XS_F_* */
  unsigned long long min, max; /* INT/SIZE bounds, in units */
  size_t unit;                 /* SIZE: bytes per unit */
  double lo, hi;               /* REAL bounds */
  const char *const *words;    /* ENUM: accepted words, NULL-terminated */
} xs_optdef_t;

/* Indexed by XS_BACKEND_*: the parser stores the word's index. */
static const char *const g_backend_words[] = {"cuda", "host", NULL};

#define XS_OFF(f) offsetof(xs_config_t, f)

/* The only place options are defined. */
static const xs_optdef_t g_opts[XS_OPT__COUNT] = {
    [XS_OPT_BACKEND] = {.key = "backend", .type = XS_T_ENUM, .def = "cuda",
                        .form = "cuda|host",
                        .help = "cuda: the CUDA driver; host: host memory standing in for devices",
                        .off = XS_OFF(backend), .words = g_backend_words},
    [XS_OPT_EXPANDABLE_SEGMENTS] = {.key = "expandable_segments", .type = XS_T_BOOL,
                                    .def = "True", .form = "True|False",
                                    .help = "False selects the binned caching pool",
                                    .off = XS_OFF(expandable)},
    [XS_OPT_MAX_SPLIT_SIZE_MB] = {.key = "max_split_size_mb", .type = XS_T_SIZE,
                                  .def = "auto", .form = "<MB >= 20>|unlimited|auto",
                                  .help = "requests below this never take free blocks this large; binned: such blocks are never split (auto: unlimited for expandable segments, 64 for the binned pool)",
                                  .off = XS_OFF(max_split_size), .flags = XS_F_UNLIMITED | XS_F_AUTO,
                                  .min = 20, .max = SIZE_MAX / XS_MB, .unit = XS_MB},
    [XS_OPT_GARBAGE_COLLECTION_THRESHOLD] = {.key = "garbage_collection_threshold",
                                             .type = XS_T_REAL, .def = "0",
                                             .form = "0|<x in (0, 1)>",
                                             .help = "above this fraction of the allowed maximum, cached memory is released, oldest first",
                                             .off = XS_OFF(gc_threshold),
                                             .flags = XS_F_ZERO | XS_F_LO_OPEN | XS_F_HI_OPEN,
                                             .lo = 0.0, .hi = 1.0},
    [XS_OPT_ROUNDUP_POWER2_DIVISIONS] = {.key = "roundup_power2_divisions", .type = XS_T_DIVS,
                                         .def = "0",
                                         .form = "<N>|[<MB>:<N>,...,>:<N>] (N: 0 or a power of two"
                                                 " <= 1024; MB: increasing powers of two <= 16384)",
                                         .help = "split each power-of-two size interval into N equal steps and round requests up to a step",
                                         .off = XS_OFF(roundup_div), .max = XS_DIV_MAX},
    [XS_OPT_RELEASE_THRESHOLD_MB] = {.key = "release_threshold_mb", .type = XS_T_SIZE,
                                     .def = "unlimited", .form = "<MB >= 0>|unlimited",
                                     .help = "mapped free memory cached beyond this is unmapped and returned to the driver",
                                     .off = XS_OFF(release_threshold), .flags = XS_F_UNLIMITED,
                                     .min = 0, .max = SIZE_MAX / XS_MB, .unit = XS_MB},
    [XS_OPT_PAGE_SIZE_MB] = {.key = "page_size_mb", .type = XS_T_SIZE, .def = "0",
                             .form = "0|<MB in 1..65536>",
                             .help = "size of the physical handles of large segments (rounded up to the granularity); 0 = adaptive",
                             .off = XS_OFF(page_size), .flags = XS_F_ZERO, .min = 1,
                             .max = 65536, .unit = XS_MB},
    [XS_OPT_PER_PROCESS_MEMORY_FRACTION] = {.key = "per_process_memory_fraction",
                                            .type = XS_T_REAL, .def = "1",
                                            .form = "<x in (0, 1]>",
                                            .help = "cap on the device memory held, as a fraction of the device's total",
                                            .off = XS_OFF(memory_fraction),
                                            .flags = XS_F_LO_OPEN, .lo = 0.0, .hi = 1.0},
    [XS_OPT_MAX_MEMORY_MB] = {.key = "max_memory_mb", .type = XS_T_SIZE, .def = "0",
                              .form = "0|<MB >= 1>",
                              .help = "cap on the device memory held, in MB; 0 = no cap",
                              .off = XS_OFF(max_memory), .flags = XS_F_ZERO, .min = 1,
                              .max = SIZE_MAX / XS_MB, .unit = XS_MB},
    [XS_OPT_HOST_CAPACITY_MB] = {.key = "host_capacity_mb", .type = XS_T_SIZE, .def = "4096",
                                 .form = "<MB in 1..16777216>",
                                 .help = "memory of each simulated device of the host backend",
                                 .off = XS_OFF(host_capacity), .min = 1, .max = 16777216,
                                 .unit = XS_MB},
    [XS_OPT_HOST_GRANULARITY_KB] = {.key = "host_granularity_kb", .type = XS_T_SIZE,
                                    .def = "2048",
                                    .form = "<KB, a power of two in 4..1048576>",
                                    .help = "allocation granularity of the host backend",
                                    .off = XS_OFF(host_granularity), .flags = XS_F_POW2,
                                    .min = 4, .max = 1048576, .unit = XS_KB},
    [XS_OPT_HOST_DEVICES] = {.key = "host_devices", .type = XS_T_INT, .def = "1",
                             .form = "<n in 1..64>",
                             .help = "number of simulated devices of the host backend",
                             .off = XS_OFF(host_devices), .min = 1, .max = 64},
    [XS_OPT_PEER_ACCESS] = {.key = "peer_access", .type = XS_T_BOOL, .def = "False",
                            .form = "True|False",
                            .help = "map every device's pages for every peer that can access them",
                            .off = XS_OFF(peer_access)},
    [XS_OPT_STATS_FILE] = {.key = "stats_file", .type = XS_T_PATH, .def = "",
                           .form = "<path of at most 511 bytes, without spaces , : [ ]>",
                           .help = "the statistics JSON is written there at exit",
                           .off = XS_OFF(stats_file)},
    [XS_OPT_TRACE_FILE] = {.key = "trace_file", .type = XS_T_PATH, .def = "",
                           .form = "<path of at most 511 bytes, without spaces , : [ ]>",
                           .help = "every alloc and free is recorded there",
                           .off = XS_OFF(trace_file)},
    [XS_OPT_VERBOSE] = {.key = "verbose", .type = XS_T_BOOL, .def = "False",
                        .form = "True|False",
                        .help = "print the effective configuration and backend at init, and OOM diagnoses",
                        .off = XS_OFF(verbose)},
};

_Static_assert(sizeof g_opts / sizeof g_opts[0] == XS_OPT__COUNT, "one row per option");
_Static_assert(XS_WORD_MAX == XS_PATH_MAX - 1, "a kept token must fit a path field");

/* ---- small helpers -------------------------------------------------- */

static int is_space(int ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

static int is_delim(int ch) { return ch == ',' || ch == ':' || ch == '[' || ch == ']'; }

/* Printable ASCII only: keeps messages and describe output printable. */
static int is_plain(int ch) { return ch >= 0x21 && ch <= 0x7e; }

static int lower(int ch) { return ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch; }

/* ASCII case-insensitive equality; the locale must not change key words. */
static int eq_nocase(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (lower((unsigned char)*a) != lower((unsigned char)*b)) return 0;
  return *a == *b;
}

static int floor_log2(size_t v) {
#if defined(__GNUC__)
  return (int)(sizeof(unsigned long long) * CHAR_BIT - 1) - __builtin_clzll((unsigned long long)v);
#else
  int l = 0;
  while (v >>= 1) l++;
  return l;
#endif
}

static int is_pow2(unsigned long long v) { return v != 0 && (v & (v - 1)) == 0; }

/* Decimal digits only: no sign, no spaces, no base prefix.  1 = not a
 * number, 2 = does not fit 64 bits. */
static int parse_u64(const char *s, unsigned long long *out) {
  unsigned long long v = 0;
  if (!*s) return 1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return 1;
    unsigned d = (unsigned)(*s - '0');
    if (v > (ULLONG_MAX - d) / 10) return 2;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* The locale's decimal point; strtod and printf follow LC_NUMERIC, the
 * grammar always uses '.' (a ',' would split the pair). */
static const char *decimal_point(void) {
  const struct lconv *lc = localeconv();
  return lc && lc->decimal_point && lc->decimal_point[0] ? lc->decimal_point : ".";
}

/* A decimal number as C writes it, checked by hand first so that strtod's
 * extras (hex, inf, nan, leading spaces) are refused.  1 = not a number,
 * 2 = not finite or out of double's range. */
static int parse_real(const char *s, double *out) {
  const char *p = s;
  size_t digits = 0;
  if (*p == '+' || *p == '-') p++;
  while (*p >= '0' && *p <= '9') p++, digits++;
  if (*p == '.') {
    p++;
    while (*p >= '0' && *p <= '9') p++, digits++;
  }
  if (digits == 0) return 1;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9') return 1;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p) return 1;

  /* Copy with the locale's decimal point so strtod reads it whole.  s has
   * at most one '.', so the copy grows by a few bytes at most. */
  char buf[XS_WORD_MAX + 16];
  const char *dp = decimal_point();
  size_t dplen = strlen(dp), n = 0;
  for (p = s; *p; p++) {
    if (*p == '.') {
      if (n + dplen >= sizeof buf) return 2;
      memcpy(buf + n, dp, dplen);
      n += dplen;
    } else {
      if (n + 1 >= sizeof buf) return 2;
      buf[n++] = *p;
    }
  }
  buf[n] = 0;
  char *end = NULL;
  double v = strtod(buf, &end);
  if (end != buf + n) return 1;
  if (!isfinite(v)) return 2;
  /* strtod flushes a tiny value to 0, which would read as "off". */
  if (v == 0.0) {
    for (p = s; *p && *p != 'e' && *p != 'E'; p++)
      if (*p >= '1' && *p <= '9') return 2;
    v = 0.0; /* -0 is 0 */
  }
  *out = v;
  return 0;
}

/* Shortest of %.15g / %.17g that reads back to exactly v, with '.' as the
 * decimal point whatever the locale. */
static void format_real(double v, char *out, size_t n) {
  const char *dp = decimal_point();
  size_t dplen = strlen(dp);
  for (int prec = 15; prec <= 17; prec += 2) {
    snprintf(out, n, "%.*g", prec, v);
    if (strcmp(dp, ".") != 0) {
      char *at = strstr(out, dp);
      if (at) {
        *at = '.';
        memmove(at + 1, at + dplen, strlen(at + dplen) + 1);
      }
    }
    double back;
    if (parse_real(out, &back) == 0 && back == v) return;
  }
}

/* Write s (len bytes kept of `full`) for a message: bytes that are not
 * printable become \xNN, and a long value is cut so that a 10 kB path
 * cannot crowd out the rest of the message. */
static const char *show(char out[XS_SHOW_BUF], const char *s, size_t len, size_t full) {
  size_t o = 0;
  for (size_t i = 0; i < len && i < XS_SHOW_BYTES; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch >= 0x20 && ch <= 0x7e) out[o++] = (char)ch;
    else o += (size_t)snprintf(out + o, XS_SHOW_BUF - o, "\\x%02X", ch);
  }
  if (full > XS_SHOW_BYTES) o += (size_t)snprintf(out + o, XS_SHOW_BUF - o, "...");
  out[o] = 0;
  return out;
}

/* ---- values: text -> field, shared by defaults and the parser ------- */

/* Set option o of c from the text v (no spaces, at most XS_WORD_MAX bytes).
 * NULL on success, else the problem as a phrase for the message. */
static const char *set_value(const xs_optdef_t *o, xs_config_t *c, const char *v) {
  char *field = (char *)c + o->off;
  unsigned long long u = 0;
  int rc;
  switch (o->type) {
  case XS_T_BOOL:
    if (eq_nocase(v, "true") || strcmp(v, "1") == 0) *(int *)field = 1;
    else if (eq_nocase(v, "false") || strcmp(v, "0") == 0) *(int *)field = 0;
    else return "is not a boolean";
    return NULL;

  case XS_T_ENUM:
    for (int i = 0; o->words[i]; i++)
      if (eq_nocase(v, o->words[i])) {
        *(int *)field = i;
        return NULL;
      }
    return "is not one of the accepted words";

  case XS_T_INT:
  case XS_T_SIZE:
    if ((o->flags & XS_F_UNLIMITED) && eq_nocase(v, "unlimited")) {
      *(size_t *)field = SIZE_MAX;
      return NULL;
    }
    if ((o->flags & XS_F_AUTO) && eq_nocase(v, "auto")) {
      *(size_t *)field = 0;
      return NULL;
    }
    rc = parse_u64(v, &u);
    if (rc == 1) return "is not a whole number";
    if (rc == 2 || (o->type == XS_T_SIZE && u > SIZE_MAX / o->unit)) return "is too large";
    if (!(u == 0 && (o->flags & XS_F_ZERO))) {
      if (u < o->min || u > o->max) return "is out of range";
      if ((o->flags & XS_F_POW2) && !is_pow2(u)) return "is not a power of two";
    }
    if (o->type == XS_T_INT) *(int *)field = (int)u;
    else *(size_t *)field = (size_t)u * o->unit;
    return NULL;

  case XS_T_REAL: {
    double d = 0;
    rc = parse_real(v, &d);
    if (rc == 1) return "is not a decimal number";
    if (rc == 2) return "is out of range";
    if (!(d == 0.0 && (o->flags & XS_F_ZERO))) {
      int lo_ok = (o->flags & XS_F_LO_OPEN) ? d > o->lo : d >= o->lo;
      int hi_ok = (o->flags & XS_F_HI_OPEN) ? d < o->hi : d <= o->hi;
      if (!lo_ok || !hi_ok) return "is out of range";
    }
    *(double *)field = d;
    return NULL;
  }

  case XS_T_DIVS: /* the scalar form; lists are parsed by parse_divs_list */
    rc = parse_u64(v, &u);
    if (rc == 1) return "is not a whole number or a [list]";
    if (rc == 2 || (u != 0 && u > o->max)) return "is out of range";
    if (u != 0 && !is_pow2(u)) return "is not a power of two";
    for (int i = 0; i < XS_ROUNDUP_BINS; i++) c->roundup_div[i] = (unsigned)u;
    return NULL;

  case XS_T_PATH: {
    size_t n = strlen(v);
    if (n > XS_PATH_MAX - 1) return "is too long";
    /* Zero the tail too: equal configs are then equal byte for byte. */
    memset(field, 0, XS_PATH_MAX);
    memcpy(field, v, n);
    return NULL;
  }
  }
  return "has an unknown type"; /* not reached: every type is handled above */
}

/* The field's value in the syntax a user writes (describe). */
static void format_value(const xs_optdef_t *o, const xs_config_t *c, char *out, size_t n) {
  const char *field = (const char *)c + o->off;
  switch (o->type) {
  case XS_T_BOOL:
    snprintf(out, n, "%s", *(const int *)field ? "True" : "False");
    return;
  case XS_T_ENUM: {
    int v = *(const int *)field, count = 0;
    while (o->words[count]) count++;
    snprintf(out, n, "%s", v >= 0 && v < count ? o->words[v] : "?");
    return;
  }
  case XS_T_INT:
    snprintf(out, n, "%d", *(const int *)field);
    return;
  case XS_T_SIZE: {
    size_t v = *(const size_t *)field;
    if (v == SIZE_MAX && (o->flags & XS_F_UNLIMITED)) snprintf(out, n, "unlimited");
    else if (v == 0 && (o->flags & XS_F_AUTO)) snprintf(out, n, "auto");
    else snprintf(out, n, "%zu", v / o->unit);
    return;
  }
  case XS_T_REAL:
    format_real(*(const double *)field, out, n);
    return;
  case XS_T_DIVS: {
    /* One value when uniform, else runs of equal bins: a run ending at bin
     * b is written 2^b:N, the run reaching the last bin as >:N.  The parser
     * fills exactly those bins back. */
    const unsigned *d = c->roundup_div;
    int uniform = 1;
    for (int i = 1; i < XS_ROUNDUP_BINS; i++) uniform &= d[i] == d[0];
    if (uniform) {
      snprintf(out, n, "%u", d[0]);
      return;
    }
    size_t pos = 0;
    out[0] = 0;
    for (int i = 0; i < XS_ROUNDUP_BINS; i++) {
      if (i + 1 < XS_ROUNDUP_BINS && d[i + 1] == d[i]) continue;
      char item[48];
      if (i + 1 == XS_ROUNDUP_BINS) snprintf(item, sizeof item, ">:%u", d[i]);
      else snprintf(item, sizeof item, "%u:%u", 1u << i, d[i]);
      int w = snprintf(out + pos, pos < n ? n - pos : 0, "%s%s", pos ? "," : "[", item);
      if (w > 0) pos += (size_t)w;
    }
    if (pos < n) snprintf(out + pos, n - pos, "]");
    return;
  }
  case XS_T_PATH:
    snprintf(out, n, "%.*s", XS_PATH_MAX - 1, field);
    return;
  }
}

/* ---- the parser ------------------------------------------------------ */

typedef struct xs_parser_s {
  const char *p; /* next byte of the text */
  const char *origin;
  char *err;
  size_t errlen;
} xs_parser_t;

/* One token: the bytes up to the next , : [ ] or the end, spaces dropped. */
typedef struct xs_word_s {
  char s[XS_WORD_MAX + 1]; /* the token, cut at XS_WORD_MAX bytes */
  size_t len;              /* its full length, which may be larger */
  int bad;                 /* first byte that is not printable ASCII, or -1 */
} xs_word_t;

static void skip_space(xs_parser_t *ps) {
  while (is_space((unsigned char)*ps->p)) ps->p++;
}

static void read_word(xs_parser_t *ps, xs_word_t *w) {
  w->len = 0;
  w->bad = -1;
  for (;;) {
    unsigned char ch = (unsigned char)*ps->p;
    if (ch == 0 || is_delim(ch)) break;
    ps->p++;
    if (is_space(ch)) continue;
    if (!is_plain(ch) && w->bad < 0) w->bad = ch;
    if (w->len < XS_WORD_MAX) w->s[w->len] = (char)ch;
    w->len++;
  }
  w->s[w->len < XS_WORD_MAX ? w->len : XS_WORD_MAX] = 0;
}

static const char *show_word(char out[XS_SHOW_BUF], const xs_word_t *w) {
  return show(out, w->s, w->len < XS_WORD_MAX ? w->len : XS_WORD_MAX, w->len);
}

XS_PRINTF(2, 3) static int fail(xs_parser_t *ps, const char *fmt, ...) {
  if (ps->err && ps->errlen) {
    int n = snprintf(ps->err, ps->errlen, "%s: ", ps->origin);
    if (n >= 0 && (size_t)n < ps->errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return XSEG_ECONFIG;
}

/* A delimiter as the message names it. */
static const char *delim_name(int ch) {
  switch (ch) {
  case 0: return "the end";
  case ',': return "','";
  case ':': return "':'";
  case '[': return "'['";
  case ']': return "']'";
  default: return "a byte";
  }
}

/* A value's token failed its checks (bytes, length) before being set. */
static int check_word(xs_parser_t *ps, const xs_optdef_t *o, const xs_word_t *w) {
  char sv[XS_SHOW_BUF];
  if (w->bad >= 0)
    return fail(ps, "%s:%s contains byte \\x%02X (values are printable ASCII; expected %s:%s)",
                o->key, show_word(sv, w), (unsigned)w->bad, o->key, o->form);
  if (w->len > XS_WORD_MAX)
    return fail(ps, "%s:%s is too long (%zu bytes, at most %d; expected %s:%s)", o->key,
                show_word(sv, w), w->len, XS_WORD_MAX, o->key, o->form);
  return 0;
}

/* An empty token where a value should be: say what stands there. */
static int fail_no_value(xs_parser_t *ps, const xs_optdef_t *o) {
  int ch = (unsigned char)*ps->p;
  if (ch == ':')
    return fail(ps, "'%s' is followed by '::' (expected %s:%s)", o->key, o->key, o->form);
  if (ch == '[')
    return fail(ps, "%s:[ is a list, and only roundup_power2_divisions takes one (expected %s:%s)",
                o->key, o->key, o->form);
  if (ch == ']')
    return fail(ps, "%s: has a stray ']' instead of a value (expected %s:%s)", o->key, o->key,
                o->form);
  return fail(ps, "'%s' has no value (expected %s:%s)", o->key, o->key, o->form);
}

/* One list entry's words K and N of "K:N", with the ':' between them
 * consumed; the syntax errors of an entry are reported here. */
static int read_div_entry(xs_parser_t *ps, const xs_optdef_t *o, xs_word_t *k, xs_word_t *v) {
  char sk[XS_SHOW_BUF];
  read_word(ps, k);
  int ch = (unsigned char)*ps->p;
  if (k->len == 0) {
    if (ch == '[')
      return fail(ps, "%s: nested '[' in the list (expected %s:%s)", o->key, o->key, o->form);
    if (ch == ',')
      return fail(ps, "%s: empty entry in the list (expected %s:%s)", o->key, o->key, o->form);
    if (ch == ':')
      return fail(ps, "%s: list entry without a size before ':' (expected %s:%s)", o->key,
                  o->key, o->form);
    return fail(ps, "%s:[ has no closing ']' (expected %s:%s)", o->key, o->key, o->form);
  }
  if (k->bad >= 0 || k->len > XS_WORD_MAX) return check_word(ps, o, k);
  if (ch != ':')
    return fail(ps, "%s: list entry '%s' has no ':N' (found %s; expected %s:%s)", o->key,
                show_word(sk, k), delim_name(ch), o->key, o->form);
  ps->p++;
  skip_space(ps);
  read_word(ps, v);
  ch = (unsigned char)*ps->p;
  if (v->len == 0) {
    if (ch == '[')
      return fail(ps, "%s: nested '[' in the list (expected %s:%s)", o->key, o->key, o->form);
    return fail(ps, "%s: list entry '%s:' has no divisions (found %s; expected %s:%s)", o->key,
                show_word(sk, k), delim_name(ch), o->key, o->form);
  }
  if (v->bad >= 0 || v->len > XS_WORD_MAX) return check_word(ps, o, v);
  return 0;
}

/* Apply entry K:N to the bins: K a power of two in MiB above the last key
 * (*last, a bin), or '>' for every bin above it (*closed_by_gt set). */
static int apply_div_entry(xs_parser_t *ps, const xs_optdef_t *o, const xs_word_t *k, const xs_word_t *v,
                           unsigned div[XS_ROUNDUP_BINS], int *last, int *closed_by_gt) {
  char sk[XS_SHOW_BUF], sv[XS_SHOW_BUF];
  unsigned long long n = 0;
  int rc = parse_u64(v->s, &n);
  if (rc != 0 || (n != 0 && (n > o->max || !is_pow2(n))))
    return fail(ps, "%s: divisions in '%s:%s' %s (expected %s:%s)", o->key, show_word(sk, k),
                show_word(sv, v),
                rc == 1 ? "are not a whole number"
                : rc == 2 || n > o->max ? "are out of range"
                                        : "are not a power of two",
                o->key, o->form);
  if (strcmp(k->s, ">") == 0) {
    for (int i = *last + 1; i < XS_ROUNDUP_BINS; i++) div[i] = (unsigned)n;
    *closed_by_gt = 1;
    return 0;
  }
  unsigned long long key = 0;
  rc = parse_u64(k->s, &key);
  if (rc == 1)
    return fail(ps, "%s: list key '%s' is neither a size in MB nor '>' (expected %s:%s)", o->key,
                show_word(sk, k), o->key, o->form);
  if (rc == 2 || key == 0 || key > XS_DIV_KEY_MAX)
    return fail(ps, "%s: list key %s is out of range 1..%u; use '>' for larger sizes (expected %s:%s)",
                o->key, show_word(sk, k), XS_DIV_KEY_MAX, o->key, o->form);
  if (!is_pow2(key))
    return fail(ps, "%s: list key %s is not a power of two (expected %s:%s)", o->key,
                show_word(sk, k), o->key, o->form);
  int bin = floor_log2((size_t)key);
  if (bin <= *last)
    return fail(ps, "%s: list key %s does not follow %u in increasing order (expected %s:%s)",
                o->key, show_word(sk, k), 1u << *last, o->key, o->form);
  for (int i = *last + 1; i <= bin; i++) div[i] = (unsigned)n;
  *last = bin;
  return 0;
}

/* roundup_power2_divisions:[K:N,...,>:N], the '[' already consumed.  Keys
 * are increasing powers of two in MiB; K:N sets the bins from the previous
 * key (exclusive) up to K's bin, >:N the bins above the last key.  Bins
 * above the last key with no '>' entry are 0 (no rounding).  The list
 * replaces every bin, as PyTorch's does. */
static int parse_divs_list(xs_parser_t *ps, xs_config_t *c, const xs_optdef_t *o) {
  unsigned div[XS_ROUNDUP_BINS] = {0};
  int last = -1, entries = 0, closed_by_gt = 0;
  char sk[XS_SHOW_BUF], sv[XS_SHOW_BUF];
  xs_word_t k, v;

  for (;;) {
    skip_space(ps);
    int ch = (unsigned char)*ps->p;
    if (ch == 0)
      return fail(ps, "%s:[ has no closing ']' (expected %s:%s)", o->key, o->key, o->form);
    if (ch == ']') {
      if (entries == 0)
        return fail(ps, "%s:[] is an empty list (expected %s:%s)", o->key, o->key, o->form);
      ps->p++;
      break;
    }
    if (closed_by_gt)
      return fail(ps, "%s: an entry follows '>:N', which must come last (expected %s:%s)", o->key,
                  o->key, o->form);
    int rc = read_div_entry(ps, o, &k, &v);
    if (rc == 0) rc = apply_div_entry(ps, o, &k, &v, div, &last, &closed_by_gt);
    if (rc != 0) return rc;
    entries++;

    skip_space(ps);
    ch = (unsigned char)*ps->p;
    if (ch == ',') {
      ps->p++; /* a ',' right before ']' is allowed, as at the end of the text */
    } else if (ch != ']' && ch != 0) {
      return fail(ps, "%s: list entry '%s:%s' is followed by %s (expected %s:%s)", o->key,
                  show_word(sk, &k), show_word(sv, &v), delim_name(ch), o->key, o->form);
    }
  }
  memcpy(c->roundup_div, div, sizeof div);
  return 0;
}

/* The value of option o, after its ':'.  On success the text that follows
 * is not yet checked. */
static int parse_value(xs_parser_t *ps, xs_config_t *c, const xs_optdef_t *o) {
  skip_space(ps);
  if (o->type == XS_T_DIVS && *ps->p == '[') {
    ps->p++;
    return parse_divs_list(ps, c, o);
  }
  xs_word_t w;
  read_word(ps, &w);
  if (w.len == 0) {
    int ch = (unsigned char)*ps->p;
    /* `stats_file:` turns the file off: the one spelling no file has. */
    if (o->type == XS_T_PATH && (ch == 0 || ch == ',')) {
      set_value(o, c, ""); /* cannot fail */
      return 0;
    }
    return fail_no_value(ps, o);
  }
  int rc = check_word(ps, o, &w);
  if (rc) return rc;
  const char *problem = set_value(o, c, w.s);
  if (problem) {
    char sv[XS_SHOW_BUF];
    return fail(ps, "%s:%s %s (expected %s:%s)", o->key, show_word(sv, &w), problem, o->key,
                o->form);
  }
  return 0;
}

static int fail_unknown_key(xs_parser_t *ps, const xs_word_t *k) {
  char known[1024], sk[XS_SHOW_BUF];
  size_t pos = 0;
  known[0] = 0;
  for (int i = 0; i < XS_OPT__COUNT && pos < sizeof known; i++) {
    int n = snprintf(known + pos, sizeof known - pos, "%s%s", i ? ", " : "", g_opts[i].key);
    if (n > 0) pos += (size_t)n;
  }
  return fail(ps, "unknown key '%s' (known: %s)", show_word(sk, k), known);
}

/* One key:value pair and what follows it (',' or the end). */
static int parse_pair(xs_parser_t *ps, xs_config_t *c, int source) {
  char sk[XS_SHOW_BUF], sv[XS_SHOW_BUF];
  xs_word_t k;
  read_word(ps, &k);
  int ch = (unsigned char)*ps->p;

  if (k.len == 0) {
    if (ch == ':') {
      xs_parser_t peek = *ps;
      xs_word_t v;
      peek.p++;
      skip_space(&peek);
      read_word(&peek, &v);
      return fail(ps, "':%s' has no key", show_word(sv, &v));
    }
    if (ch == ',') return fail(ps, "empty key before ',' (pairs are key:value, one ',' between)");
    if (ch == '[') return fail(ps, "stray '[' where a key should be");
    if (ch == ']') return fail(ps, "stray ']' where a key should be");
    return fail(ps, "empty key at %s", delim_name(ch));
  }
  if (k.bad >= 0)
    return fail(ps, "key '%s' contains byte \\x%02X (keys are printable ASCII)", show_word(sk, &k),
                (unsigned)k.bad);

  int id = -1;
  if (k.len <= XS_WORD_MAX)
    for (int i = 0; i < XS_OPT__COUNT; i++)
      if (strcmp(k.s, g_opts[i].key) == 0) id = i;
  if (id < 0) return fail_unknown_key(ps, &k);
  const xs_optdef_t *o = &g_opts[id];

  if (ch != ':') {
    if (ch == '[' || ch == ']')
      return fail(ps, "'%s' is followed by %s instead of ':' (expected %s:%s)", o->key,
                  delim_name(ch), o->key, o->form);
    return fail(ps, "'%s' has no value (expected %s:%s)", o->key, o->key, o->form);
  }
  ps->p++;
  const char *value = ps->p;
  int rc = parse_value(ps, c, o);
  if (rc) return rc;
  c->source[id] = (unsigned char)source;

  skip_space(ps);
  ch = (unsigned char)*ps->p;
  if (ch == 0 || ch == ',') return 0;
  /* Show the pair as written, spaces dropped, up to where it went wrong. */
  char raw[XS_SHOW_BYTES + 1];
  size_t n = 0, full = 0;
  for (const char *q = value; q < ps->p; q++)
    if (!is_space((unsigned char)*q)) {
      if (n < XS_SHOW_BYTES) raw[n++] = *q;
      full++;
    }
  char what[8];
  if (is_delim(ch)) snprintf(what, sizeof what, "%s", delim_name(ch));
  else if (is_plain(ch)) snprintf(what, sizeof what, "'%c'", ch);
  else snprintf(what, sizeof what, "\\x%02X", (unsigned)ch);
  return fail(ps, "%s:%s is followed by %s (expected ',' between pairs%s)", o->key,
              show(sv, raw, n, full), what,
              o->type == XS_T_PATH ? "; paths may not contain , : [ ] or spaces" : "");
}

/* ---- the interface ---------------------------------------------------- */

void xs_config_defaults(xs_config_t *c) {
  if (!c) return;
  memset(c, 0, sizeof *c);
  for (int i = 0; i < XS_OPT__COUNT; i++) {
    /* The defaults are parsed from the table's text, so they are always
     * values the parser accepts (test_config checks set_value succeeds by
     * describing the result). */
    const char *problem = set_value(&g_opts[i], c, g_opts[i].def);
    (void)problem;
    c->source[i] = XS_SRC_DEFAULT;
  }
}

int xs_config_parse(xs_config_t *c, const char *text, int source, const char *origin, char *err,
                    size_t errlen) {
  xs_parser_t ps = {.p = text, .origin = origin ? origin : "XSEG_ALLOC_CONF", .err = err,
                    .errlen = errlen};
  if (err && errlen) err[0] = 0;
  if (!c) return fail(&ps, "no configuration to parse into");
  if (!text) return 0;

  /* Parse into a copy: a failed parse changes nothing.  memcpy, not
   * assignment, so padding travels too and equal configs memcmp equal. */
  xs_config_t tmp;
  memcpy(&tmp, c, sizeof tmp);
  skip_space(&ps);
  while (*ps.p) {
    int rc = parse_pair(&ps, &tmp, source);
    if (rc) return rc;
    /* parse_pair stopped at ',' or the end; one ',' may end the text. */
    if (*ps.p == ',') {
      ps.p++;
      skip_space(&ps);
    }
  }
  memcpy(c, &tmp, sizeof tmp);
  return 0;
}

/* snprintf-like appending: counts what the whole text needs, writes what
 * fits, always NUL-terminated when len > 0. */
typedef struct xs_out_s {
  char *buf;
  size_t len, pos;
} xs_out_t;

XS_PRINTF(2, 3) static void out_add(xs_out_t *out, const char *fmt, ...) {
  size_t room = out->pos < out->len ? out->len - out->pos : 0;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(room ? out->buf + out->pos : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) out->pos += (size_t)n;
}

size_t xs_config_describe(const xs_config_t *c, char *buf, size_t len) {
  static const char *const src_names[] = {"default", "env", "api"};
  xs_out_t out = {.buf = buf, .len = buf ? len : 0, .pos = 0};
  if (out.len) buf[0] = 0;
  if (!c) return 0;
  for (int i = 0; i < XS_OPT__COUNT; i++) {
    char value[XS_PATH_MAX + 256];
    format_value(&g_opts[i], c, value, sizeof value);
    unsigned s = c->source[i];
    out_add(&out, "%s:%s (%s)\n", g_opts[i].key, value, s < 3 ? src_names[s] : "?");
  }
  return out.pos;
}

size_t xs_config_roundup(const xs_config_t *c, size_t size) {
  if (!c || size == 0) return size;
  int lg = floor_log2(size);
  int bin = lg < 20 ? 0 : lg - 19; /* 2^20 bytes = 1 MiB starts bin 1 */
  if (bin > XS_ROUNDUP_BINS - 1) bin = XS_ROUNDUP_BINS - 1;
  unsigned d = c->roundup_div[bin];
  if (d <= 1) return size;
  size_t step = ((size_t)1 << lg) / d;
  /* A step under 512 bytes is finer than the allocator's own rounding;
   * PyTorch leaves such sizes (size <= 512 * d) to that rounding too. */
  if (step < 512) return size;
  size_t rem = size % step;
  if (rem == 0) return size;
  if (size > SIZE_MAX - (step - rem)) return 0;
  return size + (step - rem);
}
