/* test/fuzz/fuzz_config.c: libFuzzer target for the XSEG_ALLOC_CONF parser.
 *
 * Links pool/config.c alone.  For every input: parse it over the defaults;
 * on failure the config must be untouched and the message prefixed and
 * printable; on success every field must lie in its documented range, and
 * describe's output, turned back into a configuration string, must parse to
 * the same values.  Any broken invariant abort()s so the fuzzer keeps the
 * input.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I include -I pool \
 *     pool/config.c test/fuzz/fuzz_config.c -o /tmp/fuzz_config
 *   cp -r test/fuzz/corpus_config /tmp/corpus_config
 *   /tmp/fuzz_config -max_total_time=120 -max_len=4096 /tmp/corpus_config
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "xseg.h"

#define MB ((size_t)1 << 20)
#define ORIGIN "fuzz"

static void check(int ok, const char *what, const char *text) {
  if (ok) return;
  fprintf(stderr, "fuzz_config: broken invariant: %s\n  input: %.200s\n", what, text);
  abort();
}

static int is_pow2(size_t v) { return v && !(v & (v - 1)); }

static int path_ok(const char *p) {
  size_t n = strnlen(p, XS_PATH_MAX);
  if (n >= XS_PATH_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch <= 0x20 || ch >= 0x7f || ch == ',' || ch == ':' || ch == '[' || ch == ']') return 0;
  }
  return 1;
}

/* Every field within the range docs/config.md gives it. */
static void check_ranges(const xs_config_t *c, const char *t) {
  check(c->backend == XS_BACKEND_CUDA || c->backend == XS_BACKEND_HOST, "backend", t);
  check(c->expandable == 0 || c->expandable == 1, "expandable_segments", t);
  check(c->max_split_size == SIZE_MAX || c->max_split_size == 0 /* auto */ ||
            (c->max_split_size >= 20 * MB && c->max_split_size % MB == 0),
        "max_split_size_mb", t);
  check(c->gc_threshold == 0.0 || (c->gc_threshold > 0.0 && c->gc_threshold < 1.0),
        "garbage_collection_threshold", t);
  check(!signbit(c->gc_threshold), "garbage_collection_threshold sign", t);
  for (int i = 0; i < XS_ROUNDUP_BINS; i++)
    check(c->roundup_div[i] == 0 || (is_pow2(c->roundup_div[i]) && c->roundup_div[i] <= 1024),
          "roundup_power2_divisions", t);
  check(c->release_threshold == SIZE_MAX || c->release_threshold % MB == 0,
        "release_threshold_mb", t);
  check(c->page_size == 0 ||
            (c->page_size % MB == 0 && c->page_size >= MB && c->page_size <= 65536 * MB),
        "page_size_mb", t);
  check(c->memory_fraction > 0.0 && c->memory_fraction <= 1.0, "per_process_memory_fraction", t);
  check(c->max_memory % MB == 0, "max_memory_mb", t);
  check(c->host_capacity % MB == 0 && c->host_capacity >= MB &&
            c->host_capacity <= (size_t)16777216 * MB,
        "host_capacity_mb", t);
  check(is_pow2(c->host_granularity) && c->host_granularity >= 4096 &&
            c->host_granularity <= ((size_t)1 << 30),
        "host_granularity_kb", t);
  check(c->host_devices >= 1 && c->host_devices <= 64, "host_devices", t);
  check(c->peer_access == 0 || c->peer_access == 1, "peer_access", t);
  check(c->verbose == 0 || c->verbose == 1, "verbose", t);
  check(path_ok(c->stats_file), "stats_file", t);
  check(path_ok(c->trace_file), "trace_file", t);
  for (int i = 0; i < XS_OPT__COUNT; i++)
    check(c->source[i] == XS_SRC_DEFAULT || c->source[i] == XS_SRC_ENV, "source", t);
}

/* Rounding only ever goes up, by less than one step, or reports overflow. */
static void check_roundup(const xs_config_t *c, size_t size, const char *t) {
  size_t r = xs_config_roundup(c, size);
  if (r == 0) {
    check(size > SIZE_MAX / 2 || size == 0, "roundup overflow below 2^63", t);
    return;
  }
  check(r >= size, "roundup went down", t);
  check(r - size < (size >> 1) + 1, "roundup by more than half the interval", t);
  check(xs_config_roundup(c, r) == r, "roundup not idempotent", t);
}

/* describe's `key:value (source)` lines, sources dropped, joined with ','. */
static size_t describe_as_conf(const xs_config_t *c, char *out, size_t n) {
  static char desc[16384];
  size_t need = xs_config_describe(c, desc, sizeof desc);
  check(need < sizeof desc, "describe longer than 16 kB", "");
  check(strlen(desc) == need, "describe length", "");
  size_t o = 0;
  for (const char *line = desc; *line;) {
    const char *end = strchr(line, '\n');
    check(end != NULL, "describe line without newline", desc);
    const char *sp = memchr(line, ' ', (size_t)(end - line));
    check(sp != NULL, "describe line without source", desc);
    if (o) out[o++] = ',';
    check(o + (size_t)(sp - line) + 1 < n, "describe output too long", desc);
    memcpy(out + o, line, (size_t)(sp - line));
    o += (size_t)(sp - line);
    line = end + 1;
  }
  out[o] = 0;
  return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char text[8192];
  static char conf[16384];
  char err[512];
  if (size >= sizeof text) return 0;
  memcpy(text, data, size);
  text[size] = 0; /* an embedded NUL just ends the text early */

  xs_config_t c, before;
  xs_config_defaults(&c);
  memcpy(&before, &c, sizeof before);
  memset(err, 'x', sizeof err);
  int rc = xs_config_parse(&c, text, XS_SRC_ENV, ORIGIN, err, sizeof err);
  check(memchr(err, 0, sizeof err) != NULL, "err not NUL-terminated", text);
  if (rc != 0) {
    check(rc == XSEG_ECONFIG, "error code", text);
    check(memcmp(&c, &before, sizeof c) == 0, "failed parse changed the config", text);
    check(strncmp(err, ORIGIN ": ", strlen(ORIGIN) + 2) == 0, "message prefix", text);
    for (const char *p = err; *p; p++)
      check(*p >= 0x20 && *p <= 0x7e, "unprintable message", text);
    return 0;
  }
  check(err[0] == 0, "err set on success", text);
  check_ranges(&c, text);

  /* describe -> configuration string -> parse: the same values. */
  describe_as_conf(&c, conf, sizeof conf);
  xs_config_t back;
  xs_config_defaults(&back);
  rc = xs_config_parse(&back, conf, XS_SRC_ENV, ORIGIN, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "describe output refused: %s\n  %s\n", err, conf);
    check(0, "describe output does not parse", text);
  }
  xs_config_t x, y;
  memcpy(&x, &c, sizeof x);
  memcpy(&y, &back, sizeof y);
  memset(x.source, 0, sizeof x.source);
  memset(y.source, 0, sizeof y.source);
  check(memcmp(&x, &y, sizeof x) == 0, "describe does not round-trip", text);

  /* Rounding on sizes taken from the input and at the edges. */
  size_t probe = 0;
  memcpy(&probe, data, size < sizeof probe ? size : sizeof probe);
  check_roundup(&c, probe, text);
  check_roundup(&c, probe >> (probe & 63), text);
  check_roundup(&c, SIZE_MAX, text);
  check_roundup(&c, SIZE_MAX / 2 + 2, text);
  check_roundup(&c, 3 * MB + 1, text);
  return 0;
}
