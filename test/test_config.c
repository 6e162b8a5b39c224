/* test/test_config.c: the XSEG_ALLOC_CONF parser (pool/config.c) on its own.
 *
 * Every key with good values (checked field by field) and bad ones (refused
 * with a message that names the key, the config left as it was); the grammar's
 * edge cases (spaces, empty text, trailing comma, lists, brackets, long and
 * non-ASCII values, random junk); last-wins; describe's round trip; and
 * xs_config_roundup against sizes worked out by hand.
 */
#include <locale.h>
#include <math.h>
#include <stdint.h>

#include "config.h"
#include "xseg.h"
#include "xtest.h"

#define MB ((size_t)1 << 20)
#define ORIGIN "XSEG_ALLOC_CONF"

static char g_err[1024];

/* Parse text on top of the defaults into *c. */
static int parse_new(xs_config_t *c, const char *text) {
  xs_config_defaults(c);
  return xs_config_parse(c, text, XS_SRC_ENV, ORIGIN, g_err, sizeof g_err);
}

/* Configs equal apart from where the values came from. */
static int same_values(const xs_config_t *a, const xs_config_t *b) {
  xs_config_t x = *a, y = *b;
  memset(x.source, 0, sizeof x.source);
  memset(y.source, 0, sizeof y.source);
  return memcmp(&x, &y, sizeof x) == 0;
}

/* describe's lines are `key:value (source)`: drop the source, join with ','. */
static void describe_as_conf(const xs_config_t *c, char *out, size_t n) {
  char desc[8192];
  size_t need = xs_config_describe(c, desc, sizeof desc);
  size_t o = 0;
  XT_CHECK(need < sizeof desc);
  for (const char *line = desc; *line;) {
    const char *end = strchr(line, '\n');
    const char *sp = strchr(line, ' ');
    if (!end) end = line + strlen(line);
    if (!sp || sp > end) sp = end;
    if (o && o + 1 < n) out[o++] = ',';
    for (const char *q = line; q < sp && o + 1 < n; q++) out[o++] = *q;
    line = *end ? end + 1 : end;
  }
  out[o] = 0;
}

/* describe -> text -> parse gives the same values. */
static int round_trips(const xs_config_t *c) {
  char conf[8192];
  xs_config_t back;
  describe_as_conf(c, conf, sizeof conf);
  if (parse_new(&back, conf) != 0) {
    fprintf(stderr, "describe output did not parse: %s\n  %s\n", g_err, conf);
    return 0;
  }
  if (!same_values(c, &back)) {
    fprintf(stderr, "describe output parsed to another config: %s\n", conf);
    return 0;
  }
  return 1;
}

/* text must be refused with a message that starts with the origin and
 * contains `needle` (the key, usually), leaving a config unchanged. */
#define XT_REFUSED(text, needle)                                                      \
  do {                                                                                \
    xs_config_t before_, after_;                                                      \
    xs_config_defaults(&before_);                                                     \
    xs_config_parse(&before_, "backend:host,max_memory_mb:7", XS_SRC_API, ORIGIN, g_err, \
                    sizeof g_err);                                                    \
    after_ = before_;                                                                 \
    int rc_ = xs_config_parse(&after_, (text), XS_SRC_ENV, ORIGIN, g_err, sizeof g_err); \
    XT_CHECK_MSG(rc_ == XSEG_ECONFIG, "accepted: %s", (text));                        \
    XT_CHECK_MSG(strncmp(g_err, ORIGIN ": ", strlen(ORIGIN) + 2) == 0, "%s", g_err);   \
    XT_CHECK_MSG(strstr(g_err, (needle)) != NULL, "'%s' not in: %s", (needle), g_err); \
    XT_CHECK(memcmp(&before_, &after_, sizeof before_) == 0);                         \
  } while (0)

/* ---- defaults ---------------------------------------------------------- */

XT_TEST(defaults) {
  xs_config_t c;
  memset(&c, 0xAB, sizeof c);
  xs_config_defaults(&c);
  XT_CHECK_EQ(c.backend, XS_BACKEND_CUDA);
  XT_CHECK_EQ(c.expandable, 1);
  XT_CHECK_EQ(c.max_split_size, 0); /* auto */
  XT_CHECK(c.gc_threshold == 0.0);
  for (int i = 0; i < XS_ROUNDUP_BINS; i++) XT_CHECK_EQ(c.roundup_div[i], 0);
  XT_CHECK_EQ(c.release_threshold, SIZE_MAX);
  XT_CHECK_EQ(c.page_size, 0);
  XT_CHECK(c.memory_fraction == 1.0);
  XT_CHECK_EQ(c.max_memory, 0);
  XT_CHECK_EQ(c.host_capacity, 4096 * MB);
  XT_CHECK_EQ(c.host_granularity, 2 * MB);
  XT_CHECK_EQ(c.host_devices, 1);
  XT_CHECK_EQ(c.peer_access, 0);
  XT_CHECK_EQ(c.stats_file[0], 0);
  XT_CHECK_EQ(c.trace_file[0], 0);
  XT_CHECK_EQ(c.verbose, 0);
  for (int i = 0; i < XS_OPT__COUNT; i++) XT_CHECK_EQ(c.source[i], XS_SRC_DEFAULT);
  XT_CHECK(round_trips(&c));
}

/* ---- each key ---------------------------------------------------------- */

XT_TEST(key_backend) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "backend:host"), 0);
  XT_CHECK_EQ(c.backend, XS_BACKEND_HOST);
  XT_CHECK_EQ(c.source[XS_OPT_BACKEND], XS_SRC_ENV);
  XT_CHECK_EQ(c.source[XS_OPT_VERBOSE], XS_SRC_DEFAULT);
  XT_CHECK_EQ(parse_new(&c, "backend:HOST,backend:Cuda"), 0);
  XT_CHECK_EQ(c.backend, XS_BACKEND_CUDA);
  XT_REFUSED("backend:rocm", "backend:rocm");
  XT_REFUSED("backend:native", "cuda|host");
  XT_REFUSED("backend:1", "backend");
}

XT_TEST(key_booleans) {
  static const struct {
    const char *key;
    xs_opt_t id;
    size_t off;
  } keys[] = {
      {"expandable_segments", XS_OPT_EXPANDABLE_SEGMENTS, offsetof(xs_config_t, expandable)},
      {"peer_access", XS_OPT_PEER_ACCESS, offsetof(xs_config_t, peer_access)},
      {"verbose", XS_OPT_VERBOSE, offsetof(xs_config_t, verbose)},
  };
  static const struct {
    const char *text;
    int value;
  } good[] = {{"True", 1}, {"true", 1}, {"TRUE", 1}, {"tRuE", 1}, {"1", 1},
              {"False", 0}, {"false", 0}, {"FALSE", 0}, {"0", 0}};
  static const char *const bad[] = {"yes", "no", "on", "2", "01", "-1", "Tru", "Truee", "T"};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    for (size_t g = 0; g < sizeof good / sizeof good[0]; g++) {
      char text[128];
      xs_config_t c;
      snprintf(text, sizeof text, "%s:%s", keys[k].key, good[g].text);
      XT_CHECK_MSG(parse_new(&c, text) == 0, "%s: %s", text, g_err);
      XT_CHECK_EQ(*(int *)((char *)&c + keys[k].off), good[g].value);
      XT_CHECK_EQ(c.source[keys[k].id], XS_SRC_ENV);
    }
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
      char text[128];
      snprintf(text, sizeof text, "%s:%s", keys[k].key, bad[b]);
      XT_REFUSED(text, keys[k].key);
      XT_REFUSED(text, "True|False");
    }
  }
}

XT_TEST(key_max_split_size_mb) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "max_split_size_mb:20"), 0);
  XT_CHECK_EQ(c.max_split_size, 20 * MB);
  XT_CHECK_EQ(parse_new(&c, "max_split_size_mb:512"), 0);
  XT_CHECK_EQ(c.max_split_size, 512 * MB);
  XT_CHECK_EQ(parse_new(&c, "max_split_size_mb:512,max_split_size_mb:unlimited"), 0);
  XT_CHECK_EQ(c.max_split_size, SIZE_MAX);
  XT_CHECK_EQ(parse_new(&c, "max_split_size_mb:512,max_split_size_mb:AUTO"), 0);
  XT_CHECK_EQ(c.max_split_size, 0);
  XT_CHECK_EQ(parse_new(&c, "max_split_size_mb:17592186044415"), 0); /* SIZE_MAX >> 20 */
  XT_CHECK_EQ(c.max_split_size, (SIZE_MAX >> 20) << 20);
  XT_REFUSED("max_split_size_mb:19", "max_split_size_mb:19 is out of range");
  XT_REFUSED("max_split_size_mb:0", "max_split_size_mb");
  XT_REFUSED("max_split_size_mb:17592186044416", "max_split_size_mb:17592186044416 is too large");
  XT_REFUSED("max_split_size_mb:99999999999999999999999", "too large");
  XT_REFUSED("max_split_size_mb:-20", "max_split_size_mb:-20 is not a whole number");
  XT_REFUSED("max_split_size_mb:+20", "max_split_size_mb");
  XT_REFUSED("max_split_size_mb:20.0", "max_split_size_mb");
  XT_REFUSED("max_split_size_mb:0x20", "max_split_size_mb");
  XT_REFUSED("max_split_size_mb:20MB", "max_split_size_mb");
  XT_REFUSED("max_split_size_mb:infinite", "max_split_size_mb");
}

XT_TEST(key_garbage_collection_threshold) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "garbage_collection_threshold:0.8"), 0);
  XT_CHECK(c.gc_threshold == 0.8);
  XT_CHECK_EQ(parse_new(&c, "garbage_collection_threshold:.5"), 0);
  XT_CHECK(c.gc_threshold == 0.5);
  XT_CHECK_EQ(parse_new(&c, "garbage_collection_threshold:5e-1"), 0);
  XT_CHECK(c.gc_threshold == 0.5);
  XT_CHECK_EQ(parse_new(&c, "garbage_collection_threshold:0.999999"), 0);
  XT_CHECK(c.gc_threshold == 0.999999);
  XT_CHECK_EQ(parse_new(&c, "garbage_collection_threshold:0.5,garbage_collection_threshold:0"), 0);
  XT_CHECK(c.gc_threshold == 0.0);
  XT_CHECK_EQ(parse_new(&c, "garbage_collection_threshold:-0"), 0);
  XT_CHECK(c.gc_threshold == 0.0 && !signbit(c.gc_threshold));
  XT_REFUSED("garbage_collection_threshold:1.5",
             ORIGIN ": garbage_collection_threshold:1.5 is out of range");
  XT_REFUSED("garbage_collection_threshold:1", "(0, 1)");
  XT_REFUSED("garbage_collection_threshold:-0.5", "garbage_collection_threshold:-0.5");
  XT_REFUSED("garbage_collection_threshold:1e-400", "garbage_collection_threshold");
  XT_REFUSED("garbage_collection_threshold:1e400", "garbage_collection_threshold");
  XT_REFUSED("garbage_collection_threshold:nan", "is not a decimal number");
  XT_REFUSED("garbage_collection_threshold:inf", "garbage_collection_threshold");
  XT_REFUSED("garbage_collection_threshold:0x0.8p0", "garbage_collection_threshold");
  XT_REFUSED("garbage_collection_threshold:0.5.5", "garbage_collection_threshold");
  XT_REFUSED("garbage_collection_threshold:.", "garbage_collection_threshold");
  XT_REFUSED("garbage_collection_threshold:1e", "garbage_collection_threshold");
  XT_REFUSED("garbage_collection_threshold:e1", "garbage_collection_threshold");
  /* a long but exact spelling is still a number */
  char text[600];
  int n = snprintf(text, sizeof text, "garbage_collection_threshold:0.25");
  memset(text + n, '0', 400);
  text[n + 400] = 0;
  XT_CHECK_MSG(parse_new(&c, text) == 0, "%s", g_err);
  XT_CHECK(c.gc_threshold == 0.25);
}

XT_TEST(key_per_process_memory_fraction) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "per_process_memory_fraction:1"), 0);
  XT_CHECK(c.memory_fraction == 1.0);
  XT_CHECK_EQ(parse_new(&c, "per_process_memory_fraction:0.25"), 0);
  XT_CHECK(c.memory_fraction == 0.25);
  XT_CHECK_EQ(parse_new(&c, "per_process_memory_fraction:1e-3"), 0);
  XT_CHECK(c.memory_fraction == 1e-3);
  XT_REFUSED("per_process_memory_fraction:0", "per_process_memory_fraction:0 is out of range");
  XT_REFUSED("per_process_memory_fraction:1.0000001", "per_process_memory_fraction");
  XT_REFUSED("per_process_memory_fraction:half", "per_process_memory_fraction");
}

XT_TEST(key_sizes_in_mb) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "release_threshold_mb:0"), 0);
  XT_CHECK_EQ(c.release_threshold, 0);
  XT_CHECK_EQ(parse_new(&c, "release_threshold_mb:1024"), 0);
  XT_CHECK_EQ(c.release_threshold, 1024 * MB);
  XT_CHECK_EQ(parse_new(&c, "release_threshold_mb:UNLIMITED"), 0);
  XT_CHECK_EQ(c.release_threshold, SIZE_MAX);
  XT_REFUSED("release_threshold_mb:-1", "release_threshold_mb");
  XT_REFUSED("release_threshold_mb:18446744073709551616", "release_threshold_mb");

  XT_CHECK_EQ(parse_new(&c, "page_size_mb:0"), 0);
  XT_CHECK_EQ(c.page_size, 0);
  XT_CHECK_EQ(parse_new(&c, "page_size_mb:1"), 0);
  XT_CHECK_EQ(c.page_size, MB);
  XT_CHECK_EQ(parse_new(&c, "page_size_mb:65536"), 0);
  XT_CHECK_EQ(c.page_size, 65536 * MB);
  XT_CHECK_EQ(parse_new(&c, "page_size_mb:20"), 0); /* not a power of two: rounded later */
  XT_CHECK_EQ(c.page_size, 20 * MB);
  XT_REFUSED("page_size_mb:65537", "page_size_mb:65537 is out of range");
  XT_REFUSED("page_size_mb:1.5", "page_size_mb");
  XT_REFUSED("page_size_mb:unlimited", "page_size_mb");

  XT_CHECK_EQ(parse_new(&c, "max_memory_mb:0"), 0);
  XT_CHECK_EQ(c.max_memory, 0);
  XT_CHECK_EQ(parse_new(&c, "max_memory_mb:80000"), 0);
  XT_CHECK_EQ(c.max_memory, 80000 * MB);
  XT_REFUSED("max_memory_mb:none", "max_memory_mb");
  XT_REFUSED("max_memory_mb:17592186044416", "max_memory_mb");

  XT_CHECK_EQ(parse_new(&c, "host_capacity_mb:1"), 0);
  XT_CHECK_EQ(c.host_capacity, MB);
  XT_CHECK_EQ(parse_new(&c, "host_capacity_mb:16777216"), 0);
  XT_CHECK_EQ(c.host_capacity, 16777216 * MB);
  XT_REFUSED("host_capacity_mb:0", "host_capacity_mb:0 is out of range");
  XT_REFUSED("host_capacity_mb:16777217", "host_capacity_mb");
}

XT_TEST(key_host_granularity_kb) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "host_granularity_kb:4"), 0);
  XT_CHECK_EQ(c.host_granularity, 4096);
  XT_CHECK_EQ(parse_new(&c, "host_granularity_kb:64"), 0);
  XT_CHECK_EQ(c.host_granularity, 65536);
  XT_CHECK_EQ(parse_new(&c, "host_granularity_kb:1048576"), 0);
  XT_CHECK_EQ(c.host_granularity, (size_t)1 << 30);
  XT_REFUSED("host_granularity_kb:3000", "host_granularity_kb:3000 is not a power of two");
  XT_REFUSED("host_granularity_kb:2", "host_granularity_kb:2 is out of range");
  XT_REFUSED("host_granularity_kb:0", "host_granularity_kb");
  XT_REFUSED("host_granularity_kb:2097152", "host_granularity_kb");
}

XT_TEST(key_host_devices) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "host_devices:1"), 0);
  XT_CHECK_EQ(c.host_devices, 1);
  XT_CHECK_EQ(parse_new(&c, "host_devices:64"), 0);
  XT_CHECK_EQ(c.host_devices, 64);
  XT_CHECK_EQ(parse_new(&c, "host_devices:007"), 0);
  XT_CHECK_EQ(c.host_devices, 7);
  XT_REFUSED("host_devices:0", "host_devices:0 is out of range");
  XT_REFUSED("host_devices:65", "host_devices:65");
  XT_REFUSED("host_devices:4294967297", "host_devices"); /* would wrap an int */
}

XT_TEST(key_paths) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "stats_file:/tmp/xseg-stats.json,trace_file:./t.trace"), 0);
  XT_CHECK(strcmp(c.stats_file, "/tmp/xseg-stats.json") == 0);
  XT_CHECK(strcmp(c.trace_file, "./t.trace") == 0);
  XT_CHECK_EQ(c.source[XS_OPT_STATS_FILE], XS_SRC_ENV);
  /* An empty value turns the file off again (last wins). */
  XT_CHECK_EQ(parse_new(&c, "stats_file:/tmp/a,stats_file:"), 0);
  XT_CHECK_EQ(c.stats_file[0], 0);
  /* A shorter value leaves no bytes of a longer one behind. */
  xs_config_t d;
  XT_CHECK_EQ(parse_new(&c, "trace_file:/tmp/long/name,trace_file:/t"), 0);
  XT_CHECK_EQ(parse_new(&d, "trace_file:/t"), 0);
  XT_CHECK(memcmp(&c, &d, sizeof c) == 0);
  XT_CHECK_EQ(parse_new(&c, "trace_file:/tmp/long/name,trace_file:"), 0);
  xs_config_defaults(&d);
  d.source[XS_OPT_TRACE_FILE] = XS_SRC_ENV;
  XT_CHECK(memcmp(&c, &d, sizeof c) == 0);
  XT_CHECK_EQ(parse_new(&c, "trace_file: , verbose:1"), 0);
  XT_CHECK_EQ(c.trace_file[0], 0);
  XT_CHECK_EQ(c.verbose, 1);
  /* Spaces vanish, as everywhere. */
  XT_CHECK_EQ(parse_new(&c, "stats_file:/tmp/my stats.json"), 0);
  XT_CHECK(strcmp(c.stats_file, "/tmp/mystats.json") == 0);
  XT_REFUSED("stats_file:/a:b", "stats_file:/a is followed by ':'");
  XT_REFUSED("trace_file:C:\\t", "trace_file");
  XT_REFUSED("stats_file:/a,b", "unknown key 'b'");
  XT_REFUSED("stats_file:[x]", "stats_file");
  XT_REFUSED("stats_file", "'stats_file' has no value");

  /* Exactly XS_PATH_MAX - 1 bytes fit; one more does not. */
  char text[XS_PATH_MAX + 64];
  size_t pre = strlen("stats_file:");
  memcpy(text, "stats_file:", pre);
  memset(text + pre, 'a', XS_PATH_MAX - 1);
  text[pre + XS_PATH_MAX - 1] = 0;
  XT_CHECK_EQ(parse_new(&c, text), 0);
  XT_CHECK_EQ(strlen(c.stats_file), XS_PATH_MAX - 1);
  XT_CHECK(round_trips(&c));
  text[pre + XS_PATH_MAX - 1] = 'a';
  text[pre + XS_PATH_MAX] = 0;
  XT_REFUSED(text, "stats_file");
  XT_REFUSED(text, "too long");
}

/* ---- roundup_power2_divisions ------------------------------------------- */

static int divs_are(const xs_config_t *c, const unsigned want[XS_ROUNDUP_BINS]) {
  return memcmp(c->roundup_div, want, sizeof c->roundup_div) == 0;
}

XT_TEST(key_roundup_power2_divisions) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:4"), 0);
  for (int i = 0; i < XS_ROUNDUP_BINS; i++) XT_CHECK_EQ(c.roundup_div[i], 4);
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:0"), 0);
  for (int i = 0; i < XS_ROUNDUP_BINS; i++) XT_CHECK_EQ(c.roundup_div[i], 0);
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:1024"), 0);
  XT_CHECK_EQ(c.roundup_div[7], 1024);

  /* PyTorch's documented example: 1 under 256 MB, 2 in [256, 512), 4 in
   * [512, 1024), 8 from 1 GB up. */
  static const unsigned doc[XS_ROUNDUP_BINS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8};
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"), 0);
  XT_CHECK(divs_are(&c, doc));
  XT_CHECK_EQ(c.source[XS_OPT_ROUNDUP_POWER2_DIVISIONS], XS_SRC_ENV);

  static const unsigned gt[XS_ROUNDUP_BINS] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:[>:8]"), 0);
  XT_CHECK(divs_are(&c, gt));

  static const unsigned one[XS_ROUNDUP_BINS] = {2};
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:[1:2]"), 0);
  XT_CHECK(divs_are(&c, one));

  /* A gap takes the next key's value; past the last key, 0. */
  static const unsigned gap[XS_ROUNDUP_BINS] = {4, 4, 2, 2};
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:[2:4,8:2]"), 0);
  XT_CHECK(divs_are(&c, gap));

  static const unsigned top[XS_ROUNDUP_BINS] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 16};
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:[16384:2,>:16]"), 0);
  XT_CHECK(divs_are(&c, top));

  static const unsigned off[XS_ROUNDUP_BINS] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4};
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:[1024:0,>:4,]"), 0);
  XT_CHECK(divs_are(&c, off));

  /* Last wins, and a list replaces every bin. */
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:4,roundup_power2_divisions:[2:4,8:2]"), 0);
  XT_CHECK(divs_are(&c, gap));
  XT_CHECK_EQ(parse_new(&c, "roundup_power2_divisions:[2:4,8:2],roundup_power2_divisions:8"), 0);
  XT_CHECK(divs_are(&c, gt));

  static const char *const bad[] = {
      "roundup_power2_divisions:3",
      "roundup_power2_divisions:2048",
      "roundup_power2_divisions:-2",
      "roundup_power2_divisions:four",
      "roundup_power2_divisions:[]",
      "roundup_power2_divisions:[ ]",
      "roundup_power2_divisions:[,]",
      "roundup_power2_divisions:[256:1",
      "roundup_power2_divisions:[256:1,",
      "roundup_power2_divisions:[[256:1]]",
      "roundup_power2_divisions:[256:[1]]",
      "roundup_power2_divisions:[256:3]",
      "roundup_power2_divisions:[256:2048]",
      "roundup_power2_divisions:[300:2]",
      "roundup_power2_divisions:[0:2]",
      "roundup_power2_divisions:[-1:2]",
      "roundup_power2_divisions:[32768:2]",
      "roundup_power2_divisions:[512:1,256:2]",
      "roundup_power2_divisions:[256:1,256:2]",
      "roundup_power2_divisions:[>:2,256:1]",
      "roundup_power2_divisions:[>:2,>:4]",
      "roundup_power2_divisions:[256]",
      "roundup_power2_divisions:[256:]",
      "roundup_power2_divisions:[:2]",
      "roundup_power2_divisions:[256:1,,512:2]",
      "roundup_power2_divisions:[256:1:2]",
      "roundup_power2_divisions:[256:1]]",
      "roundup_power2_divisions:[256:1][512:2]",
      "roundup_power2_divisions:[256:1]512",
      "roundup_power2_divisions:[<:2]",
      "roundup_power2_divisions:[256;1]",
      "roundup_power2_divisions:4]",
      "roundup_power2_divisions:[4",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    XT_REFUSED(bad[i], "roundup_power2_divisions");
  XT_REFUSED("roundup_power2_divisions:[]", "empty list");
  XT_REFUSED("roundup_power2_divisions:[256:1", "no closing ']'");
  XT_REFUSED("roundup_power2_divisions:[[256:1]]", "nested '['");
  XT_REFUSED("roundup_power2_divisions:[300:2]", "300 is not a power of two");
  XT_REFUSED("roundup_power2_divisions:[512:1,256:2]", "increasing");
  XT_REFUSED("roundup_power2_divisions:[>:2,256:1]", "must come last");
}

XT_TEST(roundup) {
  xs_config_t c;
  xs_config_defaults(&c);
  XT_CHECK_EQ(xs_config_roundup(&c, 0), 0);
  XT_CHECK_EQ(xs_config_roundup(&c, 1200), 1200);
  XT_CHECK_EQ(xs_config_roundup(&c, 5 * MB + 1), 5 * MB + 1);
  XT_CHECK_EQ(xs_config_roundup(&c, SIZE_MAX), SIZE_MAX);
  XT_CHECK_EQ(xs_config_roundup(NULL, 12345), 12345);

  XT_REQUIRE(parse_new(&c, "roundup_power2_divisions:4") == 0);
  XT_CHECK_EQ(xs_config_roundup(&c, 1200), 1200);       /* step 256 < 512: left alone */
  XT_CHECK_EQ(xs_config_roundup(&c, 2047), 2047);       /* 2047 <= 512 * 4 */
  XT_CHECK_EQ(xs_config_roundup(&c, 2049), 2560);       /* [2048, 4096) in steps of 512 */
  XT_CHECK_EQ(xs_config_roundup(&c, 3000), 3072);
  XT_CHECK_EQ(xs_config_roundup(&c, 4096), 4096);       /* powers of two are kept */
  XT_CHECK_EQ(xs_config_roundup(&c, MB), MB);
  XT_CHECK_EQ(xs_config_roundup(&c, MB + 1), MB + 256 * 1024);
  XT_CHECK_EQ(xs_config_roundup(&c, 5 * MB + 1), 6 * MB); /* [4, 8) MB in 1 MB steps */
  XT_CHECK_EQ(xs_config_roundup(&c, 6 * MB), 6 * MB);
  XT_CHECK_EQ(xs_config_roundup(&c, 7 * MB + 1), 8 * MB);

  XT_REQUIRE(parse_new(&c, "roundup_power2_divisions:2") == 0);
  XT_CHECK_EQ(xs_config_roundup(&c, 600), 600);   /* 600 <= 512 * 2 */
  XT_CHECK_EQ(xs_config_roundup(&c, 1500), 1536); /* [1024, 2048) in steps of 512 */
  XT_CHECK_EQ(xs_config_roundup(&c, (SIZE_MAX >> 1) + 2), (SIZE_MAX >> 1) + 1 + ((size_t)1 << 62));
  XT_CHECK_EQ(xs_config_roundup(&c, ((size_t)3) << 62), ((size_t)3) << 62);
  XT_CHECK_EQ(xs_config_roundup(&c, (((size_t)3) << 62) + 1), 0); /* would pass 2^64 */
  XT_CHECK_EQ(xs_config_roundup(&c, SIZE_MAX - 5), 0);
  XT_CHECK_EQ(xs_config_roundup(&c, SIZE_MAX), 0);

  XT_REQUIRE(parse_new(&c, "roundup_power2_divisions:1") == 0);
  XT_CHECK_EQ(xs_config_roundup(&c, 5 * MB + 1), 5 * MB + 1); /* 1 division: none */
  XT_CHECK_EQ(xs_config_roundup(&c, SIZE_MAX), SIZE_MAX);

  XT_REQUIRE(parse_new(&c, "roundup_power2_divisions:1024") == 0);
  XT_CHECK_EQ(xs_config_roundup(&c, 513 * 1024), 513 * 1024);     /* step 512 B */
  XT_CHECK_EQ(xs_config_roundup(&c, 513 * 1024 + 1), 513 * 1024 + 512);
  XT_CHECK_EQ(xs_config_roundup(&c, SIZE_MAX), 0);

  XT_REQUIRE(parse_new(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]") == 0);
  XT_CHECK_EQ(xs_config_roundup(&c, 200 * MB + 3), 200 * MB + 3); /* bin 8: 1 division */
  XT_CHECK_EQ(xs_config_roundup(&c, 255 * MB), 255 * MB);
  XT_CHECK_EQ(xs_config_roundup(&c, 300 * MB), 384 * MB);  /* bin 9: 2, steps of 128 MB */
  XT_CHECK_EQ(xs_config_roundup(&c, 600 * MB), 640 * MB);  /* bin 10: 4, steps of 128 MB */
  XT_CHECK_EQ(xs_config_roundup(&c, 1500 * MB), 1536 * MB); /* bin 11: 8, steps of 128 MB */
  XT_CHECK_EQ(xs_config_roundup(&c, 40960 * MB), 40960 * MB); /* bin 15, steps of 4 GB */
  XT_CHECK_EQ(xs_config_roundup(&c, 40960 * MB + 1), 45056 * MB);

  XT_REQUIRE(parse_new(&c, "roundup_power2_divisions:[1:8]") == 0); /* under 1 MB only */
  XT_CHECK_EQ(xs_config_roundup(&c, 4097), 4608);          /* [4096, 8192) in steps of 512 */
  XT_CHECK_EQ(xs_config_roundup(&c, 700 * 1024), 704 * 1024); /* [512K, 1M) in 64K steps */
  XT_CHECK_EQ(xs_config_roundup(&c, MB + 1), MB + 1);
}

/* ---- grammar ------------------------------------------------------------ */

XT_TEST(grammar_spaces) {
  xs_config_t c;
  XT_CHECK_MSG(parse_new(&c, " backend : host , expandable_segments : False , "
                             "roundup_power2_divisions : [ 256 : 1 , > : 8 ] ") == 0,
               "%s", g_err);
  XT_CHECK_EQ(c.backend, XS_BACKEND_HOST);
  XT_CHECK_EQ(c.expandable, 0);
  static const unsigned want[XS_ROUNDUP_BINS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8, 8, 8, 8};
  XT_CHECK(divs_are(&c, want));
  XT_CHECK_EQ(parse_new(&c, "\tverbose\t:\n1\r\n,\vpeer_access\f:\fTrue "), 0);
  XT_CHECK_EQ(c.verbose, 1);
  XT_CHECK_EQ(c.peer_access, 1);
  /* "anywhere" includes inside a token, as PyTorch's tokenizer does */
  XT_CHECK_EQ(parse_new(&c, "max_split _size_mb:1 024"), 0);
  XT_CHECK_EQ(c.max_split_size, 1024 * MB);
}

XT_TEST(grammar_empty) {
  xs_config_t c, d;
  xs_config_defaults(&d);
  XT_CHECK_EQ(parse_new(&c, ""), 0);
  XT_CHECK(memcmp(&c, &d, sizeof c) == 0);
  XT_CHECK_EQ(parse_new(&c, "    "), 0);
  XT_CHECK(memcmp(&c, &d, sizeof c) == 0);
  XT_CHECK_EQ(parse_new(&c, " \t\n "), 0);
  XT_CHECK(memcmp(&c, &d, sizeof c) == 0);
  XT_CHECK_EQ(xs_config_parse(&c, NULL, XS_SRC_ENV, ORIGIN, g_err, sizeof g_err), 0);
  XT_CHECK(memcmp(&c, &d, sizeof c) == 0);
}

XT_TEST(grammar_trailing_comma) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "verbose:True,"), 0);
  XT_CHECK_EQ(c.verbose, 1);
  XT_CHECK_EQ(parse_new(&c, "verbose:True , "), 0);
  XT_CHECK_EQ(c.verbose, 1);
  XT_REFUSED("verbose:True,,", "empty key");
  XT_REFUSED(",verbose:True", "empty key");
  XT_REFUSED(",", "empty key");
  XT_REFUSED("verbose:True,,peer_access:1", "empty key");
}

XT_TEST(grammar_malformed) {
  /* Nine and more malformed configurations, each naming its key. */
  XT_REFUSED("verbose", ORIGIN ": 'verbose' has no value (expected verbose:True|False)");
  XT_REFUSED("verbose:", "'verbose' has no value");
  XT_REFUSED("verbose, peer_access:1", "'verbose' has no value");
  XT_REFUSED("verbose::True", "'verbose' is followed by '::'");
  XT_REFUSED("verbose:True:False", "verbose:True is followed by ':'");
  XT_REFUSED("verbose:True]", "verbose:True is followed by ']'");
  XT_REFUSED("verbose:True[", "verbose:True is followed by '['");
  XT_REFUSED("verbose:[True]", "verbose:[ is a list");
  XT_REFUSED("verbose:]", "verbose: has a stray ']'");
  XT_REFUSED("verbose[True]", "'verbose' is followed by '['");
  XT_REFUSED("verbose]", "'verbose' is followed by ']'");
  XT_REFUSED("backend:host verbose:1", "backend:hostverbose");
  XT_REFUSED("host_devices:2,host_devices", "'host_devices' has no value");
  XT_REFUSED("peer_access:True,verbose:maybe", "verbose:maybe is not a boolean");
  XT_REFUSED("max_memory_mb:1:2", "max_memory_mb:1 is followed by ':'");
  /* no key to name: say what is wrong */
  XT_REFUSED(":True", "':True' has no key");
  XT_REFUSED(" : ", "has no key");
  XT_REFUSED("]", "stray ']'");
  XT_REFUSED("[", "stray '['");
  XT_REFUSED("[verbose:1]", "stray '['");
  XT_REFUSED("foo:1", ORIGIN ": unknown key 'foo' (known: backend, expandable_segments, ");
  XT_REFUSED("foo:1", "verbose)");
  XT_REFUSED("Verbose:1", "unknown key 'Verbose'");
  XT_REFUSED("max_non_split_rounding_mb:20", "unknown key 'max_non_split_rounding_mb'");
  XT_REFUSED("verbose:1,foo", "unknown key 'foo'");
}

XT_TEST(grammar_last_wins) {
  xs_config_t c;
  XT_CHECK_EQ(parse_new(&c, "verbose:True,verbose:False"), 0);
  XT_CHECK_EQ(c.verbose, 0);
  XT_CHECK_EQ(c.source[XS_OPT_VERBOSE], XS_SRC_ENV);
  XT_CHECK_EQ(parse_new(&c, "backend:host,max_memory_mb:10,backend:cuda,max_memory_mb:20"), 0);
  XT_CHECK_EQ(c.backend, XS_BACKEND_CUDA);
  XT_CHECK_EQ(c.max_memory, 20 * MB);
  /* a later bad value still fails the whole text */
  XT_REFUSED("verbose:True,verbose:perhaps", "verbose");
}

XT_TEST(failed_parse_changes_nothing) {
  xs_config_t c, saved;
  xs_config_defaults(&c);
  XT_REQUIRE(xs_config_parse(&c, "backend:host,verbose:1,stats_file:/tmp/s", XS_SRC_API, "xseg_init",
                             g_err, sizeof g_err) == 0);
  XT_CHECK_EQ(c.source[XS_OPT_BACKEND], XS_SRC_API);
  saved = c;
  /* good pairs before the bad one must not leak into c */
  XT_CHECK_EQ(xs_config_parse(&c, "max_memory_mb:10,stats_file:/tmp/t,host_devices:0", XS_SRC_ENV,
                              "xseg_init", g_err, sizeof g_err),
              XSEG_ECONFIG);
  XT_CHECK(memcmp(&c, &saved, sizeof c) == 0);
  XT_CHECK(strncmp(g_err, "xseg_init: host_devices:0", 25) == 0);
  /* NULL origin still gives a prefixed message; NULL or tiny err is safe */
  XT_CHECK_EQ(xs_config_parse(&c, "foo", XS_SRC_ENV, NULL, g_err, sizeof g_err), XSEG_ECONFIG);
  XT_CHECK(strncmp(g_err, ORIGIN ": ", strlen(ORIGIN) + 2) == 0);
  XT_CHECK_EQ(xs_config_parse(&c, "foo", XS_SRC_ENV, ORIGIN, NULL, 0), XSEG_ECONFIG);
  char tiny[8];
  XT_CHECK_EQ(xs_config_parse(&c, "foo", XS_SRC_ENV, ORIGIN, tiny, sizeof tiny), XSEG_ECONFIG);
  XT_CHECK_EQ(strlen(tiny), sizeof tiny - 1);
  XT_CHECK(memcmp(&c, &saved, sizeof c) == 0);
  XT_CHECK_EQ(xs_config_parse(NULL, "verbose:1", XS_SRC_ENV, ORIGIN, g_err, sizeof g_err),
              XSEG_ECONFIG);
  /* a good parse clears err */
  XT_CHECK_EQ(xs_config_parse(&c, "verbose:0", XS_SRC_ENV, ORIGIN, g_err, sizeof g_err), 0);
  XT_CHECK_EQ(g_err[0], 0);
}

XT_TEST(grammar_long_values) {
  static char text[16384];
  xs_config_t c;
  /* a 10 kB path */
  strcpy(text, "stats_file:/");
  memset(text + 12, 'p', 10000);
  text[10012] = 0;
  XT_REFUSED(text, "stats_file:/ppp");
  XT_REFUSED(text, "is too long (10001 bytes, at most 511");
  XT_CHECK(strlen(g_err) < 600);
  /* a 10 kB number, key, and list */
  strcpy(text, "max_memory_mb:");
  memset(text + 14, '9', 10000);
  text[10014] = 0;
  XT_REFUSED(text, "max_memory_mb");
  memset(text, 'k', 10000);
  strcpy(text + 10000, ":1");
  XT_REFUSED(text, "unknown key 'kkkk");
  XT_CHECK(strlen(g_err) < 1000);
  strcpy(text, "roundup_power2_divisions:[");
  size_t n = strlen(text);
  while (n < 10000) n += (size_t)sprintf(text + n, "1:1,");
  strcpy(text + n, "]");
  XT_REFUSED(text, "roundup_power2_divisions: list key 1 does not follow 1");
  /* 10 kB of spaces around a short pair is fine */
  memset(text, ' ', 10000);
  strcpy(text + 10000, "verbose:1");
  memset(text + 10009, ' ', 5000);
  text[15009] = 0;
  XT_CHECK_EQ(parse_new(&c, text), 0);
  XT_CHECK_EQ(c.verbose, 1);
}

XT_TEST(grammar_non_ascii) {
  XT_REFUSED("stats_file:/tmp/\xC3\xA9t\xC3\xA9.json", "stats_file:/tmp/\\xC3\\xA9t");
  XT_REFUSED("stats_file:/tmp/\xC3\xA9", "contains byte \\xC3");
  XT_REFUSED("verbose:Tr\x01ue", "verbose:Tr\\x01ue contains byte \\x01");
  XT_REFUSED("verbose:\x7F", "verbose");
  XT_REFUSED("verb\xC3\xB6se:1", "key 'verb\\xC3\\xB6se' contains byte \\xC3");
  XT_REFUSED("backend:\xFF", "backend:\\xFF");
  XT_REFUSED("roundup_power2_divisions:[256\x80:1]", "roundup_power2_divisions:256\\x80");
  XT_REFUSED("verbose:1,\x1B[31m", "\\x1B");
  /* messages stay printable */
  for (const char *p = g_err; *p; p++) XT_CHECK(*p >= 0x20 && *p <= 0x7e);
}

/* ---- describe ------------------------------------------------------------ */

XT_TEST(describe_format) {
  xs_config_t c;
  char buf[8192];
  XT_REQUIRE(parse_new(&c, "backend:host,max_split_size_mb:256,"
                           "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]") == 0);
  size_t n = xs_config_describe(&c, buf, sizeof buf);
  XT_CHECK_EQ(n, strlen(buf));
  XT_CHECK(strstr(buf, "backend:host (env)\n") != NULL);
  XT_CHECK(strstr(buf, "expandable_segments:True (default)\n") != NULL);
  XT_CHECK(strstr(buf, "max_split_size_mb:256 (env)\n") != NULL);
  XT_CHECK(strstr(buf, "garbage_collection_threshold:0 (default)\n") != NULL);
  XT_CHECK(strstr(buf, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8] (env)\n") != NULL);
  XT_CHECK(strstr(buf, "release_threshold_mb:unlimited (default)\n") != NULL);
  XT_CHECK(strstr(buf, "per_process_memory_fraction:1 (default)\n") != NULL);
  XT_CHECK(strstr(buf, "host_granularity_kb:2048 (default)\n") != NULL);
  XT_CHECK(strstr(buf, "stats_file: (default)\n") != NULL);
  XT_CHECK(strstr(buf, "verbose:False (default)\n") != NULL);
  int lines = 0;
  for (const char *p = buf; *p; p++) lines += *p == '\n';
  XT_CHECK_EQ(lines, XS_OPT__COUNT);

  /* snprintf-like: the length is the same whatever fits */
  XT_CHECK_EQ(xs_config_describe(&c, NULL, 0), n);
  char small[10];
  memset(small, 'x', sizeof small);
  XT_CHECK_EQ(xs_config_describe(&c, small, sizeof small), n);
  XT_CHECK_EQ(small[9], 0);
  XT_CHECK(strncmp(small, buf, 9) == 0);

  xs_config_t a;
  xs_config_defaults(&a);
  XT_REQUIRE(xs_config_parse(&a, "verbose:1", XS_SRC_API, "xseg_init", g_err, sizeof g_err) == 0);
  xs_config_describe(&a, buf, sizeof buf);
  XT_CHECK(strstr(buf, "verbose:True (api)\n") != NULL);
}

XT_TEST(describe_round_trips) {
  static const char *const confs[] = {
      "",
      ("backend:host,expandable_segments:False,max_split_size_mb:20,"
       "garbage_collection_threshold:0.8,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],"
       "release_threshold_mb:0,page_size_mb:2,per_process_memory_fraction:0.9,"
       "max_memory_mb:1000,host_capacity_mb:64,host_granularity_kb:64,host_devices:4,"
       "peer_access:True,stats_file:/tmp/s.json,trace_file:/tmp/t.trace,verbose:True"),
      "garbage_collection_threshold:0.1",
      "garbage_collection_threshold:0.30000000000000004",
      "garbage_collection_threshold:1e-300",
      "per_process_memory_fraction:0.3333333333333333",
      "per_process_memory_fraction:4.9406564584124654e-300",
      "roundup_power2_divisions:[2:4,8:2]",
      "roundup_power2_divisions:[1:2]",
      "roundup_power2_divisions:[16384:2,>:16]",
      ("roundup_power2_divisions:[1:1,2:2,4:4,8:8,16:16,32:32,64:64,128:128,256:256,512:512,"
       "1024:1024,2048:1,4096:2,8192:4,16384:8,>:16]"),
      "roundup_power2_divisions:16",
      "max_split_size_mb:17592186044415,release_threshold_mb:17592186044415",
      "max_memory_mb:17592186044415",
  };
  for (size_t i = 0; i < sizeof confs / sizeof confs[0]; i++) {
    xs_config_t c;
    XT_CHECK_MSG(parse_new(&c, confs[i]) == 0, "%s: %s", confs[i], g_err);
    XT_CHECK_MSG(round_trips(&c), "%s", confs[i]);
  }
  /* in a locale whose decimal point is ',' too, if the machine has one */
  const char *locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "C.UTF-8"};
  for (size_t i = 0; i < sizeof locales / sizeof locales[0]; i++) {
    if (!setlocale(LC_NUMERIC, locales[i])) continue;
    xs_config_t c;
    XT_CHECK_MSG(parse_new(&c, "garbage_collection_threshold:0.75") == 0, "%s", g_err);
    XT_CHECK(c.gc_threshold == 0.75);
    XT_CHECK(round_trips(&c));
    char buf[4096];
    xs_config_describe(&c, buf, sizeof buf);
    XT_CHECK(strstr(buf, "garbage_collection_threshold:0.75 (env)") != NULL);
  }
  setlocale(LC_NUMERIC, "C");
}

/* ---- random junk ----------------------------------------------------------- */

XT_TEST(random_junk) {
  /* Pieces that make near-valid text more often than bytes alone would. */
  static const char *const pieces[] = {
      "backend", "verbose", "roundup_power2_divisions", "stats_file", "max_split_size_mb",
      "garbage_collection_threshold", "host_granularity_kb", "page_size_mb", ":", ",", "[", "]",
      ">", " ", "True", "false", "0", "1", "20", "256", "0.5", "1e3", "host", "/tmp/x", "-",
      ".", "unlimited", "\t", "\x80", "\x01", "8", "1024", "::", ",,", "[]"};
  unsigned long long state = 88172645463325252ull;
  int ok = 0;
  for (int iter = 0; iter < 50000; iter++) {
    char text[256];
    size_t n = 0;
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    int count = 1 + (int)(state % 12);
    for (int k = 0; k < count; k++) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      const char *p = pieces[state % (sizeof pieces / sizeof pieces[0])];
      size_t len = strlen(p);
      if (n + len + 1 >= sizeof text) break;
      if ((state >> 20) % 7 == 0) { /* a raw byte, never NUL */
        text[n++] = (char)(1 + (state >> 24) % 255);
        continue;
      }
      memcpy(text + n, p, len);
      n += len;
    }
    text[n] = 0;

    xs_config_t c, before;
    xs_config_defaults(&c);
    before = c;
    int rc = xs_config_parse(&c, text, XS_SRC_ENV, ORIGIN, g_err, sizeof g_err);
    if (rc == 0) {
      ok++;
      XT_CHECK_MSG(round_trips(&c), "%s", text);
    } else {
      XT_CHECK_EQ(rc, XSEG_ECONFIG);
      XT_CHECK(memcmp(&c, &before, sizeof c) == 0);
      XT_CHECK(strncmp(g_err, ORIGIN ": ", strlen(ORIGIN) + 2) == 0);
      for (const char *p = g_err; *p; p++)
        if (*p < 0x20 || *p > 0x7e) {
          XT_CHECK_MSG(0, "unprintable message for: %s", text);
          break;
        }
    }
  }
  XT_CHECK(ok > 0); /* some junk is valid; the mix is not all errors */
}

int main(void) {
  XT_RUN(defaults);
  XT_RUN(key_backend);
  XT_RUN(key_booleans);
  XT_RUN(key_max_split_size_mb);
  XT_RUN(key_garbage_collection_threshold);
  XT_RUN(key_per_process_memory_fraction);
  XT_RUN(key_sizes_in_mb);
  XT_RUN(key_host_granularity_kb);
  XT_RUN(key_host_devices);
  XT_RUN(key_paths);
  XT_RUN(key_roundup_power2_divisions);
  XT_RUN(roundup);
  XT_RUN(grammar_spaces);
  XT_RUN(grammar_empty);
  XT_RUN(grammar_trailing_comma);
  XT_RUN(grammar_malformed);
  XT_RUN(grammar_last_wins);
  XT_RUN(failed_parse_changes_nothing);
  XT_RUN(grammar_long_values);
  XT_RUN(grammar_non_ascii);
  XT_RUN(describe_format);
  XT_RUN(describe_round_trips);
  XT_RUN(random_junk);
  return XT_DONE();
}
