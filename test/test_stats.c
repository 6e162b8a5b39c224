/* test_stats.c: the statistics, as docs/metrics.md defines them.
 *
 *  - A strict JSON parser (below, written for this test) reads every
 *    xseg_stats_json and xseg_snapshot_json text; each must parse, and every
 *    documented key must be there: for each name of the X-macro lists of
 *    pool/stats.h its .all/.small_pool/.large_pool .current/.peak/
 *    .allocated/.freed (pooled), .current/.peak (gauges) or a number
 *    (counters), plus the header and derived keys, and nothing else.
 *  - A reference model replays random operation sequences (expandable mode,
 *    default configuration) and predicts allocation, requested_bytes,
 *    allocated_bytes, active, active_bytes (all four fields of all three
 *    pools), pending_frees, num_ooms and rounding_waste_bytes exactly after
 *    every step, across peak resets.  The same sequences run in binned
 *    mode, where a block may be larger than the rounded request: each new
 *    block's size is read from the snapshot and checked against the split
 *    rules, and the model then predicts every figure exactly there too.
 *  - After every step the snapshot is walked and the figures it implies
 *    (free_mapped_bytes, largest_free_block, inactive_split, reserved and
 *    mapped bytes, segments, cached handles, held bytes) must equal the
 *    JSON; external_fragmentation and utilization must follow from them.
 *  - The out-of-memory diagnosis names the right cause on a 64 MiB device:
 *    a request larger than the memory, memory pressure, a configured cap,
 *    binned fragmentation, and memory held outside xseg.
 *  - The summary table and lines of xseg_print_summary show the JSON's
 *    figures.
 *  - The JSON stays JSON when the program's LC_NUMERIC uses a decimal comma.
 *  - stats_file: written at xseg_shutdown as a JSON array of devices.
 *
 * Checks that once exposed library bugs stay as regression tests: the summary's
 * cached-handle bytes, and the JSON under a decimal-comma locale.
 */
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <unistd.h>

#include "stats.h"
#include "expandable.h"
#include "testutil.h"

/* ======================================================================== */
/* A strict JSON parser (RFC 8259).                                          */
/* ======================================================================== */
/* Recursive descent over the whole grammar.  Stricter than the RFC in two
 * ways that suit checking our own output: a repeated key in one object is
 * an error, and nesting deeper than JMAX_DEPTH is refused.  Strings must be
 * valid UTF-8 (no overlong forms, no surrogates); escapes are decoded,
 * \u surrogate pairs included.  Numbers follow the RFC's grammar (no
 * leading zeros, no '+', no bare '.', no NaN); integers that fit in 64 bits
 * are also kept exactly.  Anything but whitespace after the value fails. */

#define JMAX_DEPTH 64

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype_t;

typedef struct jv_s jv_t;
struct jv_s {
  jtype_t type;
  int b;         /* J_BOOL */
  double num;    /* J_NUM */
  int exact;     /* J_NUM: an integer that fits, in neg/mag */
  int neg;
  uint64_t mag;
  char *s;       /* J_STR: decoded, NUL-terminated (may hold \0 inside) */
  size_t slen;
  size_t n, cap; /* J_ARR, J_OBJ */
  jv_t **v;
  char **k;      /* J_OBJ: keys */
  size_t *klen;
};

typedef struct jp_s {
  const char *start, *p, *end;
  int depth;
  char err[200];
} jp_t;

static void jfree(jv_t *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n; i++) {
    jfree(v->v[i]);
    if (v->k) free(v->k[i]);
  }
  free(v->v);
  free(v->k);
  free(v->klen);
  free(v->s);
  free(v);
}

static jv_t *jfail(jp_t *jp, const char *why) {
  if (!jp->err[0]) snprintf(jp->err, sizeof jp->err, "%s at offset %ld", why, (long)(jp->p - jp->start));
  return NULL;
}

static void jws(jp_t *jp) {
  while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r')) jp->p++;
}

static jv_t *jnew(jtype_t t) {
  jv_t *v = calloc(1, sizeof *v);
  if (!v) abort();
  v->type = t;
  return v;
}

/* A growable byte buffer for decoded strings. */
typedef struct jbuf_s {
  char *p;
  size_t n, cap;
} jbuf_t;

static void jbuf_put(jbuf_t *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = (b->n + n + 1) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void jbuf_utf8(jbuf_t *b, uint32_t c) {
  char o[4];
  size_t n;
  if (c < 0x80) {
    o[0] = (char)c;
    n = 1;
  } else if (c < 0x800) {
    o[0] = (char)(0xC0 | (c >> 6));
    o[1] = (char)(0x80 | (c & 0x3F));
    n = 2;
  } else if (c < 0x10000) {
    o[0] = (char)(0xE0 | (c >> 12));
    o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (char)(0x80 | (c & 0x3F));
    n = 3;
  } else {
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    n = 4;
  }
  jbuf_put(b, o, n);
}

static int jhex4(jp_t *jp, uint32_t *out) {
  if (jp->end - jp->p < 4) return 0;
  uint32_t c = 0;
  for (int i = 0; i < 4; i++) {
    char h = jp->p[i];
    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
    if (d < 0) return 0;
    c = c * 16 + (uint32_t)d;
  }
  jp->p += 4;
  *out = c;
  return 1;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static size_t jutf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned char c = p[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0; /* no overlong forms */
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return n;
}

/* The rest of a \u escape (after "\u") into b: one code point, or a
 * surrogate pair joined into one.  0, with jp->err set, if it is bad. */
static int jstring_u(jp_t *jp, jbuf_t *b) {
  uint32_t u;
  if (!jhex4(jp, &u)) return jfail(jp, "bad \\u escape"), 0;
  if (u >= 0xDC00 && u <= 0xDFFF) return jfail(jp, "lone low surrogate"), 0;
  if (u >= 0xD800 && u <= 0xDBFF) {
    uint32_t lo;
    if (jp->end - jp->p < 2 || jp->p[0] != '\\' || jp->p[1] != 'u')
      return jfail(jp, "high surrogate without its low half"), 0;
    jp->p += 2;
    if (!jhex4(jp, &lo) || lo < 0xDC00 || lo > 0xDFFF) return jfail(jp, "high surrogate without its low half"), 0;
    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
  }
  jbuf_utf8(b, u);
  return 1;
}

/* The escape at jp->p (its backslash), decoded into b.  0, with jp->err
 * set, if it is bad. */
static int jstring_escape(jp_t *jp, jbuf_t *b) {
  jp->p++;
  if (jp->p >= jp->end) return jfail(jp, "unterminated escape"), 0;
  char e = *jp->p++;
  const char *simple = NULL;
  switch (e) {
  case '"': simple = "\""; break;
  case '\\': simple = "\\"; break;
  case '/': simple = "/"; break;
  case 'b': simple = "\b"; break;
  case 'f': simple = "\f"; break;
  case 'n': simple = "\n"; break;
  case 'r': simple = "\r"; break;
  case 't': simple = "\t"; break;
  case 'u': return jstring_u(jp, b);
  default: return jfail(jp, "unknown escape"), 0;
  }
  jbuf_put(b, simple, 1);
  return 1;
}

static int jstring(jp_t *jp, char **out, size_t *outlen) {
  if (jp->p >= jp->end || *jp->p != '"') return jfail(jp, "expected a string"), 0;
  jp->p++;
  jbuf_t b = {0};
  jbuf_put(&b, "", 0);
  for (;;) {
    if (jp->p >= jp->end) {
      free(b.p);
      return jfail(jp, "unterminated string"), 0;
    }
    unsigned char c = (unsigned char)*jp->p;
    if (c == '"') {
      jp->p++;
      break;
    }
    if (c < 0x20) {
      free(b.p);
      return jfail(jp, "control character in a string"), 0;
    }
    if (c >= 0x80) {
      size_t n = jutf8_len((const unsigned char *)jp->p, (const unsigned char *)jp->end);
      if (!n) {
        free(b.p);
        return jfail(jp, "invalid UTF-8 in a string"), 0;
      }
      jbuf_put(&b, jp->p, n);
      jp->p += n;
      continue;
    }
    if (c != '\\') {
      jbuf_put(&b, jp->p, 1);
      jp->p++;
      continue;
    }
    if (!jstring_escape(jp, &b)) {
      free(b.p);
      return 0;
    }
  }
  *out = b.p;
  *outlen = b.n;
  return 1;
}

static int jdigit(const jp_t *jp) { return jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9'; }

static jv_t *jnumber(jp_t *jp) {
  const char *s = jp->p;
  int neg = 0, integral = 1;
  if (jp->p < jp->end && *jp->p == '-') {
    neg = 1;
    jp->p++;
  }
  if (!jdigit(jp)) return jfail(jp, "bad number");
  if (*jp->p == '0') {
    jp->p++;
    if (jdigit(jp)) return jfail(jp, "leading zero in a number");
  } else {
    while (jdigit(jp)) jp->p++;
  }
  const char *int_end = jp->p;
  if (jp->p < jp->end && *jp->p == '.') {
    integral = 0;
    jp->p++;
    if (!jdigit(jp)) return jfail(jp, "no digits after the decimal point");
    while (jdigit(jp)) jp->p++;
  }
  if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
    integral = 0;
    jp->p++;
    if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-')) jp->p++;
    if (!jdigit(jp)) return jfail(jp, "no digits in the exponent");
    while (jdigit(jp)) jp->p++;
  }
  char tmp[400];
  size_t n = (size_t)(jp->p - s);
  if (n >= sizeof tmp) return jfail(jp, "number too long");
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  jv_t *v = jnew(J_NUM);
  v->num = strtod(tmp, NULL);
  v->neg = neg;
  if (integral) {
    uint64_t m = 0;
    int fits = 1;
    for (const char *d = s + neg; d < int_end; d++) {
      unsigned dv = (unsigned)(*d - '0');
      if (m > (UINT64_MAX - dv) / 10) fits = 0;
      m = m * 10 + dv;
    }
    v->exact = fits;
    v->mag = m;
  }
  return v;
}

static jv_t *jvalue(jp_t *jp);

static jv_t *jarray(jp_t *jp) {
  jp->p++; /* '[' */
  jv_t *a = jnew(J_ARR);
  jws(jp);
  if (jp->p < jp->end && *jp->p == ']') {
    jp->p++;
    return a;
  }
  for (;;) {
    jv_t *e = jvalue(jp);
    if (!e) {
      jfree(a);
      return NULL;
    }
    if (a->n == a->cap) {
      a->cap = a->cap ? a->cap * 2 : 8;
      a->v = realloc(a->v, a->cap * sizeof *a->v);
      if (!a->v) abort();
    }
    a->v[a->n++] = e;
    jws(jp);
    if (jp->p < jp->end && *jp->p == ',') {
      jp->p++;
      continue;
    }
    if (jp->p < jp->end && *jp->p == ']') {
      jp->p++;
      return a;
    }
    jfree(a);
    return jfail(jp, "expected ',' or ']'");
  }
}

static jv_t *jobject(jp_t *jp) {
  jp->p++; /* '{' */
  jv_t *o = jnew(J_OBJ);
  jws(jp);
  if (jp->p < jp->end && *jp->p == '}') {
    jp->p++;
    return o;
  }
  for (;;) {
    jws(jp);
    char *key;
    size_t klen;
    if (!jstring(jp, &key, &klen)) {
      jfree(o);
      return NULL;
    }
    for (size_t i = 0; i < o->n; i++) {
      if (o->klen[i] == klen && memcmp(o->k[i], key, klen) == 0) {
        free(key);
        jfree(o);
        return jfail(jp, "repeated key");
      }
    }
    jws(jp);
    if (jp->p >= jp->end || *jp->p != ':') {
      free(key);
      jfree(o);
      return jfail(jp, "expected ':'");
    }
    jp->p++;
    jv_t *e = jvalue(jp);
    if (!e) {
      free(key);
      jfree(o);
      return NULL;
    }
    if (o->n == o->cap) {
      o->cap = o->cap ? o->cap * 2 : 8;
      o->v = realloc(o->v, o->cap * sizeof *o->v);
      o->k = realloc(o->k, o->cap * sizeof *o->k);
      o->klen = realloc(o->klen, o->cap * sizeof *o->klen);
      if (!o->v || !o->k || !o->klen) abort();
    }
    o->k[o->n] = key;
    o->klen[o->n] = klen;
    o->v[o->n++] = e;
    jws(jp);
    if (jp->p < jp->end && *jp->p == ',') {
      jp->p++;
      continue;
    }
    if (jp->p < jp->end && *jp->p == '}') {
      jp->p++;
      return o;
    }
    jfree(o);
    return jfail(jp, "expected ',' or '}'");
  }
}

static jv_t *jliteral(jp_t *jp, const char *word, jtype_t t, int b) {
  size_t n = strlen(word);
  if ((size_t)(jp->end - jp->p) < n || memcmp(jp->p, word, n) != 0) return jfail(jp, "unexpected character");
  jp->p += n;
  jv_t *v = jnew(t);
  v->b = b;
  return v;
}

static jv_t *jvalue(jp_t *jp) {
  jws(jp);
  if (jp->p >= jp->end) return jfail(jp, "unexpected end of text");
  if (++jp->depth > JMAX_DEPTH) return jfail(jp, "nested too deeply");
  jv_t *v;
  switch (*jp->p) {
  case '{': v = jobject(jp); break;
  case '[': v = jarray(jp); break;
  case '"': {
    char *s;
    size_t n;
    v = NULL;
    if (jstring(jp, &s, &n)) {
      v = jnew(J_STR);
      v->s = s;
      v->slen = n;
    }
    break;
  }
  case 't': v = jliteral(jp, "true", J_BOOL, 1); break;
  case 'f': v = jliteral(jp, "false", J_BOOL, 0); break;
  case 'n': v = jliteral(jp, "null", J_NULL, 0); break;
  default: v = jnumber(jp); break;
  }
  jp->depth--;
  return v;
}

/* Parse all of text[0..len); NULL with the reason in err. */
static jv_t *jparse(const char *text, size_t len, char *err, size_t errlen) {
  jp_t jp = {text, text, text + len, 0, ""};
  jv_t *v = jvalue(&jp);
  if (v) {
    jws(&jp);
    if (jp.p != jp.end) {
      jfree(v);
      v = jfail(&jp, "trailing characters after the value");
    }
  }
  if (err && errlen) snprintf(err, errlen, "%s", v ? "" : jp.err);
  return v;
}

static const jv_t *jget(const jv_t *o, const char *key) {
  if (!o || o->type != J_OBJ) return NULL;
  size_t n = strlen(key);
  for (size_t i = 0; i < o->n; i++)
    if (o->klen[i] == n && memcmp(o->k[i], key, n) == 0) return o->v[i];
  return NULL;
}

/* A dotted path: "allocated_bytes.all.current". */
static const jv_t *jpath(const jv_t *root, const char *path) {
  char key[128];
  const jv_t *v = root;
  while (v && *path) {
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    if (n >= sizeof key) return NULL;
    memcpy(key, path, n);
    key[n] = '\0';
    v = jget(v, key);
    path += n + (dot ? 1 : 0);
  }
  return v;
}

/* A non-negative integer at path, or -1 (missing, not a number, negative,
 * not an integer or too large). */
static long long jint(const jv_t *root, const char *path) {
  const jv_t *v = jpath(root, path);
  if (!v || v->type != J_NUM || !v->exact || v->neg || v->mag > (uint64_t)INT64_MAX) return -1;
  return (long long)v->mag;
}

static double jdbl(const jv_t *root, const char *path) {
  const jv_t *v = jpath(root, path);
  return v && v->type == J_NUM ? v->num : NAN;
}

static const char *jstr(const jv_t *root, const char *path) {
  const jv_t *v = jpath(root, path);
  return v && v->type == J_STR ? v->s : NULL;
}

XT_TEST(json_parser_is_strict) {
  static const char *const good[] = {
      "{}", "[]", " [1, -0, 0.5, -1.25e+3, 2E-2, 1e9] ", "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
      "{\"a\":{\"b\":[true,false,null]}}", "\"\\u00e9\\ud83d\\ude00\"", "\"\xc3\xa9\xf0\x9f\x98\x80\"",
      "18446744073709551615", "\"\\u0000\"", "\r\n\t 7 \r\n\t"};
  static const char *const bad[] = {
      "", " ", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "[01]", "[+1]", "[.5]", "[1.]", "[1e]",
      "[-]", "NaN", "[Infinity]", "'a'", "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"",
      "\"\\ud800\\u0041\"", "\"a\tb\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xe2\x82\"",
      "{} {}", "[1] x", "tru", "nul", "[true false]", "{\"a\":1,\"a\":2}", "[1,,2]", "{\"a\":}", "[\"a\"]]"};
  char err[200];
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    jv_t *v = jparse(good[i], strlen(good[i]), err, sizeof err);
    XT_CHECK_MSG(v != NULL, "should parse: %s (%s)", good[i], err);
    jfree(v);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    jv_t *v = jparse(bad[i], strlen(bad[i]), err, sizeof err);
    XT_CHECK_MSG(v == NULL, "should be refused: %s", bad[i]);
    jfree(v);
  }
  /* An embedded NUL is not whitespace. */
  jv_t *v = jparse("[1]\0", 4, err, sizeof err);
  XT_CHECK(v == NULL);
  jfree(v);
  /* Too deep. */
  char deep[200];
  memset(deep, '[', 100);
  memset(deep + 100, ']', 100);
  v = jparse(deep, 200, err, sizeof err);
  XT_CHECK(v == NULL);
  jfree(v);
  /* Values come back decoded and exact. */
  const char *doc = "{\"s\":\"\\u00e9\\ud83d\\ude00x\",\"n\":18446744073709551615,\"m\":9223372036854775807,"
                    "\"d\":-1.5e1,\"z\":\"\\u0000y\"}";
  v = jparse(doc, strlen(doc), err, sizeof err);
  XT_REQUIRE(v != NULL);
  XT_CHECK(jstr(v, "s") && strcmp(jstr(v, "s"), "\xc3\xa9\xf0\x9f\x98\x80x") == 0);
  XT_CHECK(jpath(v, "n")->exact && jpath(v, "n")->mag == UINT64_MAX);
  XT_CHECK_EQ(jint(v, "n"), -1); /* beyond int64 */
  XT_CHECK_EQ(jint(v, "m"), INT64_MAX);
  XT_CHECK(jdbl(v, "d") == -15.0 && !jpath(v, "d")->exact);
  XT_CHECK(jpath(v, "z")->slen == 2 && jpath(v, "z")->s[1] == 'y');
  jfree(v);
}

/* ======================================================================== */
/* Reading the library's JSON.                                               */
/* ======================================================================== */

static char *g_text; /* the last text read, for failure reports */

static jv_t *read_json(size_t (*fn)(int, char *, size_t), int dev, const char *what) {
  size_t n = fn(dev, NULL, 0);
  if (n == 0) {
    fprintf(stderr, "%s: returned 0: %s\n", what, xseg_last_error());
    return NULL;
  }
  free(g_text);
  g_text = malloc(n + 1);
  if (!g_text) abort();
  size_t m = fn(dev, g_text, n + 1);
  if (m != n) {
    fprintf(stderr, "%s: length changed from %zu to %zu\n", what, n, m);
    return NULL;
  }
  if (strlen(g_text) != n) {
    fprintf(stderr, "%s: text is %zu bytes, said %zu\n", what, strlen(g_text), n);
    return NULL;
  }
  char err[200];
  jv_t *v = jparse(g_text, n, err, sizeof err);
  if (!v) fprintf(stderr, "%s: invalid JSON: %s\n%.4000s\n", what, err, g_text);
  return v;
}

static jv_t *read_stats(int dev) { return read_json(xseg_stats_json, dev, "xseg_stats_json"); }
static jv_t *read_snapshot(int dev) { return read_json(xseg_snapshot_json, dev, "xseg_snapshot_json"); }

static const char *const g_types[3] = {"all", "small_pool", "large_pool"};
static const char *const g_fields[4] = {"current", "peak", "allocated", "freed"};

/* Keys besides the X-macro lists, in the order of docs/metrics.md. */
static const char *const g_header_keys[] = {"device", "backend", "mode", "granularity", "total_memory", "limit"};
static const char *const g_derived_keys[] = {"largest_free_block",         "external_fragmentation",
                                              "utilization",                "rounding_waste_bytes",
                                              "free_in_shared_pages_bytes", "free_in_pinned_handles_bytes"};

#define NAME_OF(name, help) #name,
/* The allocator's own and the physical layer's (vmm/vmm.h). */
static const char *const g_pooled[] = {XS_STATS_POOLED(NAME_OF) XS_VMM_POOLED(NAME_OF)};
static const char *const g_singles[] = {XS_STATS_SINGLE(NAME_OF)};
static const char *const g_gauges[] = {XS_STATS_GAUGES(NAME_OF) XS_VMM_GAUGES(NAME_OF)};
static const char *const g_counters[] = {XS_STATS_COUNTERS(NAME_OF) XS_VMM_COUNTERS(NAME_OF)};
#undef NAME_OF
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* The single statistics (4 fields) and the gauges (current, peak). */
static int check_singles_and_gauges(const jv_t *s) {
  int bad = 0;
  char path[160];
#define KEY_CHECK(cond, ...)        \
  do {                              \
    XT_CHECK_MSG(cond, __VA_ARGS__); \
    bad += !(cond);                 \
  } while (0)
  for (size_t i = 0; i < NELEM(g_singles); i++) {
    const jv_t *o = jget(s, g_singles[i]);
    KEY_CHECK(o && o->type == J_OBJ && o->n == 4, "stats: %s is not an object of 4 fields", g_singles[i]);
    long long v[4];
    for (int f = 0; f < 4; f++) {
      snprintf(path, sizeof path, "%s.%s", g_singles[i], g_fields[f]);
      v[f] = jint(s, path);
      KEY_CHECK(v[f] >= 0, "stats: %s missing or not a non-negative integer", path);
    }
    KEY_CHECK(v[0] == v[2] - v[3] && v[1] >= v[0], "stats: %s: current %lld, peak %lld, allocated - freed %lld",
              g_singles[i], v[0], v[1], v[2] - v[3]);
  }
  for (size_t i = 0; i < NELEM(g_gauges); i++) {
    const jv_t *o = jget(s, g_gauges[i]);
    KEY_CHECK(o && o->type == J_OBJ && o->n == 2, "stats: %s is not an object of 2 fields", g_gauges[i]);
    for (int f = 0; f < 2; f++) {
      snprintf(path, sizeof path, "%s.%s", g_gauges[i], g_fields[f]);
      KEY_CHECK(jint(s, path) >= 0, "stats: %s missing or not a non-negative integer", path);
    }
    snprintf(path, sizeof path, "%s.current", g_gauges[i]);
    long long cur = jint(s, path);
    snprintf(path, sizeof path, "%s.peak", g_gauges[i]);
    KEY_CHECK(jint(s, path) >= cur, "stats: %s.peak below its current value", g_gauges[i]);
  }
  return bad;
#undef KEY_CHECK
}

/* Every documented key of xseg_stats_json is there, with the right type,
 * and there is nothing else.  Returns the number of problems. */
static int check_stats_keys(const jv_t *s, int dev, const char *mode) {
  int bad = 0;
#define KEY_CHECK(cond, ...)        \
  do {                              \
    XT_CHECK_MSG(cond, __VA_ARGS__); \
    bad += !(cond);                 \
  } while (0)
  KEY_CHECK(s && s->type == J_OBJ, "stats: not an object");
  if (!s || s->type != J_OBJ) return bad;
  char path[160];
  size_t expected = NELEM(g_header_keys) + NELEM(g_derived_keys) + NELEM(g_pooled) + NELEM(g_singles) +
                    NELEM(g_gauges) + NELEM(g_counters);
  KEY_CHECK(s->n == expected, "stats: %zu top-level keys, %zu documented", s->n, expected);
  for (size_t i = 0; i < NELEM(g_pooled); i++) {
    const jv_t *o = jget(s, g_pooled[i]);
    KEY_CHECK(o && o->type == J_OBJ && o->n == 3, "stats: %s is not an object of 3 pools", g_pooled[i]);
    for (int t = 0; t < 3; t++) {
      snprintf(path, sizeof path, "%s.%s", g_pooled[i], g_types[t]);
      const jv_t *p = jpath(s, path);
      KEY_CHECK(p && p->type == J_OBJ && p->n == 4, "stats: %s is not an object of 4 fields", path);
      long long v[4];
      for (int f = 0; f < 4; f++) {
        snprintf(path, sizeof path, "%s.%s.%s", g_pooled[i], g_types[t], g_fields[f]);
        v[f] = jint(s, path);
        KEY_CHECK(v[f] >= 0, "stats: %s missing or not a non-negative integer", path);
      }
      /* current = allocated - freed; peak >= current. */
      KEY_CHECK(v[0] == v[2] - v[3], "stats: %s.%s: current %lld, allocated - freed %lld", g_pooled[i], g_types[t],
                v[0], v[2] - v[3]);
      KEY_CHECK(v[1] >= v[0], "stats: %s.%s: peak %lld below current %lld", g_pooled[i], g_types[t], v[1], v[0]);
    }
    /* .all is the sum of the two pools, except for the peak. */
    for (int f = 0; f < 4; f++) {
      if (f == 1) continue;
      long long sum = 0, all = 0;
      for (int t = 0; t < 3; t++) {
        snprintf(path, sizeof path, "%s.%s.%s", g_pooled[i], g_types[t], g_fields[f]);
        if (t == 0) all = jint(s, path);
        else sum += jint(s, path);
      }
      KEY_CHECK(all == sum, "stats: %s.all.%s %lld, the pools sum to %lld", g_pooled[i], g_fields[f], all, sum);
    }
  }
  bad += check_singles_and_gauges(s);
  for (size_t i = 0; i < NELEM(g_counters); i++)
    KEY_CHECK(jint(s, g_counters[i]) >= 0, "stats: %s missing or not a non-negative integer", g_counters[i]);
  for (size_t i = 0; i < NELEM(g_header_keys); i++)
    KEY_CHECK(jget(s, g_header_keys[i]) != NULL, "stats: %s missing", g_header_keys[i]);
  for (size_t i = 0; i < NELEM(g_derived_keys); i++)
    KEY_CHECK(jget(s, g_derived_keys[i]) != NULL, "stats: %s missing", g_derived_keys[i]);
  KEY_CHECK(jint(s, "device") == dev, "stats: device is not %d", dev);
  KEY_CHECK(jstr(s, "backend") && strcmp(jstr(s, "backend"), "host") == 0, "stats: backend is not \"host\"");
  KEY_CHECK(jstr(s, "mode") && strcmp(jstr(s, "mode"), mode) == 0, "stats: mode is not \"%s\"", mode);
  KEY_CHECK(jint(s, "granularity") > 0, "stats: granularity");
  KEY_CHECK(jint(s, "total_memory") > 0, "stats: total_memory");
  KEY_CHECK(jint(s, "limit") > 0 && jint(s, "limit") <= jint(s, "total_memory"), "stats: limit");
  KEY_CHECK(jint(s, "largest_free_block") >= 0, "stats: largest_free_block");
  double ef = jdbl(s, "external_fragmentation"), ut = jdbl(s, "utilization");
  KEY_CHECK(ef >= 0 && ef <= 1, "stats: external_fragmentation %f", ef);
  KEY_CHECK(ut >= 0 && ut <= 1, "stats: utilization %f", ut);
  const jv_t *rw = jget(s, "rounding_waste_bytes");
  KEY_CHECK(rw && rw->type == J_NUM && rw->exact, "stats: rounding_waste_bytes is not an integer");
  KEY_CHECK(jint(s, "free_in_shared_pages_bytes") >= 0, "stats: free_in_shared_pages_bytes");
  KEY_CHECK(jint(s, "free_in_pinned_handles_bytes") >= 0, "stats: free_in_pinned_handles_bytes");
  return bad;
#undef KEY_CHECK
}

/* The snapshot's documented fields. */
static int check_snapshot_keys(const jv_t *s, int dev, const char *mode) {
  int bad = 0;
#define SKEY(cond, ...)              \
  do {                               \
    XT_CHECK_MSG(cond, __VA_ARGS__); \
    bad += !(cond);                  \
    if (!(cond)) return bad;         \
  } while (0)
  SKEY(s && s->type == J_OBJ && s->n == 5, "snapshot: not an object of 5 keys");
  SKEY(jint(s, "device") == dev, "snapshot: device");
  SKEY(jstr(s, "mode") && strcmp(jstr(s, "mode"), mode) == 0, "snapshot: mode");
  SKEY(jint(s, "page_size") > 0, "snapshot: page_size");
  const jv_t *segs = jget(s, "segments"), *ch = jget(s, "cached_handles");
  SKEY(segs && segs->type == J_ARR, "snapshot: segments is not an array");
  SKEY(ch && ch->type == J_ARR, "snapshot: cached_handles is not an array");
  for (size_t i = 0; i < ch->n; i++) SKEY(ch->v[i]->type == J_NUM && ch->v[i]->exact, "snapshot: cached handle size");
  for (size_t i = 0; i < segs->n; i++) {
    const jv_t *g = segs->v[i];
    SKEY(g->type == J_OBJ && g->n == 7, "snapshot: segment %zu is not an object of 7 keys", i);
    SKEY(jint(g, "address") > 0 && jint(g, "size") > 0 && jint(g, "stream") >= 0 && jint(g, "mapped_bytes") >= 0,
         "snapshot: segment %zu: address/size/stream/mapped_bytes", i);
    const char *pool = jstr(g, "pool");
    SKEY(pool && (!strcmp(pool, "small") || !strcmp(pool, "large")), "snapshot: segment %zu: pool", i);
    const jv_t *pages = jget(g, "pages"), *blocks = jget(g, "blocks");
    SKEY(pages && pages->type == J_ARR && blocks && blocks->type == J_ARR, "snapshot: segment %zu: pages/blocks", i);
    for (size_t k = 0; k < pages->n; k++) {
      const jv_t *p = pages->v[k];
      const jv_t *m = jget(p, "mapped");
      SKEY(p->type == J_OBJ && p->n == 3 && jint(p, "address") > 0 && jint(p, "size") > 0 && m && m->type == J_BOOL,
           "snapshot: segment %zu page %zu", i, k);
    }
    for (size_t k = 0; k < blocks->n; k++) {
      const jv_t *b = blocks->v[k];
      const char *st = jstr(b, "state");
      SKEY(b->type == J_OBJ && b->n == 5 && jint(b, "address") > 0 && jint(b, "size") > 0 &&
               jint(b, "requested_size") >= 0 && jint(b, "stream") >= 0 && st,
           "snapshot: segment %zu block %zu", i, k);
      SKEY(!strcmp(st, "live") || !strcmp(st, "pending") || !strcmp(st, "free") || !strcmp(st, "unmapped"),
           "snapshot: block state \"%s\"", st);
    }
  }
  return bad;
#undef SKEY
}

/* The free bytes of segment g that no page move can give out, from its
 * page runs (a mapped run is one handle) and blocks alone: free bytes of
 * pages that live or pending blocks hold in part (*shared), and whole free
 * pages of handles that hold live or pending data (*pinned). */
static void stuck_in_segment(const jv_t *g, long long page, long long *shared, long long *pinned) {
  const long long base = jint(g, "address"), npages = jint(g, "size") / page;
  long long *data = calloc((size_t)npages, sizeof *data), *handle = calloc((size_t)npages, sizeof *handle);
  XT_REQUIRE(data && handle);
  const jv_t *blocks = jget(g, "blocks"), *runs = jget(g, "pages");
  for (size_t k = 0; k < blocks->n; k++) {
    const jv_t *b = blocks->v[k];
    const char *st = jstr(b, "state");
    if (strcmp(st, "live") && strcmp(st, "pending")) continue;
    for (long long a = jint(b, "address"), e = a + jint(b, "size"); a < e;) {
      long long pe = (a - base) / page * page + base + page, to = pe < e ? pe : e;
      data[(a - base) / page] += to - a;
      a = to;
    }
  }
  for (size_t k = 0; k < runs->n; k++) { /* handle[p]: p's handle holds data */
    const jv_t *r = runs->v[k];
    long long p0 = (jint(r, "address") - base) / page, p1 = p0 + jint(r, "size") / page, any = 0;
    if (!jget(r, "mapped")->b) continue;
    for (long long p = p0; p < p1; p++) any |= data[p] > 0;
    for (long long p = p0; p < p1; p++) handle[p] = any;
  }
  for (size_t k = 0; k < blocks->n; k++) {
    const jv_t *b = blocks->v[k];
    if (strcmp(jstr(b, "state"), "free")) continue;
    for (long long a = jint(b, "address"), e = a + jint(b, "size"); a < e;) {
      long long p = (a - base) / page, pe = p * page + base + page, to = pe < e ? pe : e;
      if (data[p])
        *shared += to - a;
      else if (handle[p])
        *pinned += to - a;
      a = to;
    }
  }
  free(data);
  free(handle);
}

/* What the snapshot implies, checked against the stats.  Both modes. */
typedef struct snapsum_s {
  long long live[3], live_bytes[3], requested[3], pending, active[3], active_bytes[3];
  long long free_bytes, largest_free, split[3], split_bytes[3];
  long long reserved[3], segments[3], address_bytes, cached, cached_bytes;
  long long live_under_rounding; /* live blocks smaller than their request rounded to 512 */
  long long stuck_shared, stuck_pinned; /* expandable: stuck_in_segment over every segment */
} snapsum_t;

static size_t round512(size_t n) { return ((n ? n : 1) + 511) / 512 * 512; }

static int walk_snapshot(const jv_t *snap, int expandable, snapsum_t *t) {
  memset(t, 0, sizeof *t);
  int bad = 0;
  const jv_t *segs = jget(snap, "segments");
  for (size_t i = 0; i < segs->n; i++) {
    const jv_t *g = segs->v[i];
    int cls = strcmp(jstr(g, "pool"), "small") == 0 ? 1 : 2;
    long long base = jint(g, "address"), size = jint(g, "size"), at = base, mapped = 0;
    t->address_bytes += size;
    const jv_t *pages = jget(g, "pages"), *blocks = jget(g, "blocks");
    for (size_t k = 0; k < pages->n; k++) {
      const jv_t *p = pages->v[k];
      bad += jint(p, "address") != at;
      at += jint(p, "size");
      if (jget(p, "mapped")->b) {
        mapped += jint(p, "size");
        if (expandable) t->segments[cls]++; /* one mapped run = one chunk */
      }
    }
    XT_CHECK_MSG(at == base + size, "snapshot: the pages of segment %zu do not tile it", i);
    XT_CHECK_MSG(mapped == jint(g, "mapped_bytes"), "snapshot: segment %zu: mapped_bytes %lld, its pages %lld", i,
                 jint(g, "mapped_bytes"), mapped);
    if (!expandable) t->segments[cls]++;
    t->reserved[cls] += mapped;
    at = base;
    for (size_t k = 0; k < blocks->n; k++) {
      const jv_t *b = blocks->v[k];
      long long bs = jint(b, "size"), rq = jint(b, "requested_size");
      const char *st = jstr(b, "state");
      bad += jint(b, "address") != at || bs % 512 != 0;
      at += bs;
      if (!strcmp(st, "live")) {
        t->live[cls]++;
        t->live_bytes[cls] += bs;
        t->requested[cls] += rq;
        t->active[cls]++;
        t->active_bytes[cls] += bs;
        if ((size_t)bs < round512((size_t)rq)) t->live_under_rounding++;
      } else if (!strcmp(st, "pending")) {
        t->pending++;
        t->active[cls]++;
        t->active_bytes[cls] += bs;
      } else if (!strcmp(st, "free")) {
        t->free_bytes += bs;
        if (bs > t->largest_free) t->largest_free = bs;
        if (blocks->n > 1) {
          t->split[cls]++;
          t->split_bytes[cls] += bs;
        }
      }
    }
    XT_CHECK_MSG(at == base + size, "snapshot: the blocks of segment %zu do not tile it", i);
    if (expandable && at == base + size)
      stuck_in_segment(g, jint(snap, "page_size"), &t->stuck_shared, &t->stuck_pinned);
  }
  for (int c = 1; c < 3; c++) {
    t->live[0] += t->live[c];
    t->live_bytes[0] += t->live_bytes[c];
    t->requested[0] += t->requested[c];
    t->active[0] += t->active[c];
    t->active_bytes[0] += t->active_bytes[c];
    t->split[0] += t->split[c];
    t->split_bytes[0] += t->split_bytes[c];
    t->reserved[0] += t->reserved[c];
    t->segments[0] += t->segments[c];
  }
  const jv_t *ch = jget(snap, "cached_handles");
  t->cached = (long long)ch->n;
  for (size_t i = 0; i < ch->n; i++) t->cached_bytes += (long long)ch->v[i]->mag;
  XT_CHECK_MSG(bad == 0, "snapshot: %d blocks or pages out of place", bad);
  return bad;
}

/* Expected external_fragmentation from the figures it is defined on. */
static double expect_frag(long long largest, long long free_bytes) {
  return free_bytes ? 1.0 - (double)largest / (double)free_bytes : 0.0;
}

/* The JSON prints %.6f: equal to 6 decimals. */
static int near6(double a, double b) { return fabs(a - b) <= 0.5e-6 + 1e-12; }

/* Stats against snapshot, and the derived figures.  Returns problems. */
static int check_against_snapshot(const jv_t *s, const jv_t *snap, int expandable) {
  snapsum_t t;
  int bad = walk_snapshot(snap, expandable, &t);
  char path[160];
#define SC(cond, ...)                \
  do {                               \
    XT_CHECK_MSG(cond, __VA_ARGS__); \
    bad += !(cond);                  \
  } while (0)
  for (int ty = 0; ty < 3; ty++) {
    struct {
      const char *name;
      long long want;
    } f[] = {{"allocation", t.live[ty]},       {"allocated_bytes", t.live_bytes[ty]},
             {"requested_bytes", t.requested[ty]}, {"active", t.active[ty]},
             {"active_bytes", t.active_bytes[ty]}, {"inactive_split", t.split[ty]},
             {"inactive_split_bytes", t.split_bytes[ty]}, {"reserved_bytes", t.reserved[ty]},
             {"segment", t.segments[ty]}};
    for (size_t i = 0; i < NELEM(f); i++) {
      snprintf(path, sizeof path, "%s.%s.current", f[i].name, g_types[ty]);
      SC(jint(s, path) == f[i].want, "%s is %lld, the snapshot says %lld", path, jint(s, path), f[i].want);
    }
  }
  SC(jint(s, "pending_frees.current") == t.pending, "pending_frees.current %lld, snapshot %lld",
     jint(s, "pending_frees.current"), t.pending);
  SC(jint(s, "free_mapped_bytes.current") == t.free_bytes, "free_mapped_bytes.current %lld, snapshot free blocks %lld",
     jint(s, "free_mapped_bytes.current"), t.free_bytes);
  SC(jint(s, "largest_free_block") == t.largest_free, "largest_free_block %lld, snapshot %lld",
     jint(s, "largest_free_block"), t.largest_free);
  SC(jint(s, "free_in_shared_pages_bytes") == t.stuck_shared, "free_in_shared_pages_bytes %lld, snapshot %lld",
     jint(s, "free_in_shared_pages_bytes"), t.stuck_shared);
  SC(jint(s, "free_in_pinned_handles_bytes") == t.stuck_pinned, "free_in_pinned_handles_bytes %lld, snapshot %lld",
     jint(s, "free_in_pinned_handles_bytes"), t.stuck_pinned);
  SC(jint(s, "mapped_bytes.current") == t.reserved[0], "mapped_bytes.current %lld, snapshot %lld",
     jint(s, "mapped_bytes.current"), t.reserved[0]);
  SC(jint(s, "handles_cached.current") == t.cached, "handles_cached.current %lld, snapshot %lld",
     jint(s, "handles_cached.current"), t.cached);
  SC(jint(s, "cached_handle_bytes.current") == t.cached_bytes, "cached_handle_bytes.current %lld, snapshot %lld",
     jint(s, "cached_handle_bytes.current"), t.cached_bytes);
  if (expandable) {
    SC(jint(s, "held_bytes.current") == t.reserved[0] + t.cached_bytes, "held_bytes.current %lld, mapped+cached %lld",
       jint(s, "held_bytes.current"), t.reserved[0] + t.cached_bytes);
    SC(jint(s, "handles_live.current") == t.segments[0] + t.cached, "handles_live.current %lld, chunks+cached %lld",
       jint(s, "handles_live.current"), t.segments[0] + t.cached);
    SC(jint(s, "reserved_address_bytes.current") == t.address_bytes,
       "reserved_address_bytes.current %lld, segments span %lld", jint(s, "reserved_address_bytes.current"),
       t.address_bytes);
  } else {
    SC(jint(s, "held_bytes.current") == t.reserved[0], "held_bytes.current %lld, segments %lld",
       jint(s, "held_bytes.current"), t.reserved[0]);
    SC(t.cached == 0, "binned mode caches %lld handles", t.cached);
  }
  SC(jint(s, "held_bytes.current") <= jint(s, "limit"), "held_bytes above the limit");
  SC(t.live_under_rounding == 0, "%lld live blocks are smaller than their request rounded to 512",
     t.live_under_rounding);
  /* Derived figures. */
  long long fm = jint(s, "free_mapped_bytes.current"), lf = jint(s, "largest_free_block");
  double ef = jdbl(s, "external_fragmentation");
  SC(near6(ef, expect_frag(lf, fm)), "external_fragmentation %.6f, 1 - %lld / %lld = %.6f", ef, lf, fm,
     expect_frag(lf, fm));
  long long pa = jint(s, "allocated_bytes.all.peak"), pr = jint(s, "reserved_bytes.all.peak");
  double ut = jdbl(s, "utilization"), want_ut = pr ? (double)pa / (double)pr : 0.0;
  SC(near6(ut, want_ut), "utilization %.6f, %lld / %lld = %.6f", ut, pa, pr, want_ut);
  SC(pa <= pr, "allocated_bytes.all.peak %lld above reserved_bytes.all.peak %lld", pa, pr);
  const jv_t *rw = jget(s, "rounding_waste_bytes");
  long long waste = rw && rw->exact ? (rw->neg ? -(long long)rw->mag : (long long)rw->mag) : LLONG_MIN;
  SC(waste == jint(s, "allocated_bytes.all.current") - jint(s, "requested_bytes.all.current"),
     "rounding_waste_bytes %lld, allocated - requested %lld", waste,
     jint(s, "allocated_bytes.all.current") - jint(s, "requested_bytes.all.current"));
  return bad;
#undef SC
}

/* Check keys and consistency of parsed stats (s) against a parsed
 * snapshot and the heap checker; problems. */
static int check_both(const jv_t *s, const jv_t *snap, int dev, const char *mode) {
  int expandable = strcmp(mode, "expandable") == 0;
  XT_CHECK_MSG(s && snap, "stats or snapshot did not parse");
  int bad = !(s && snap);
  if (s && snap) {
    bad += check_stats_keys(s, dev, mode);
    bad += check_snapshot_keys(snap, dev, mode);
    if (!bad) bad += check_against_snapshot(s, snap, expandable);
  }
  int rc = xseg_check_heap(dev);
  XT_CHECK_MSG(rc == 0, "heap check: %s", xseg_last_error());
  bad += rc != 0;
  return bad;
}

static int check_parsed(const jv_t *s, int dev, const char *mode) {
  jv_t *snap = read_snapshot(dev);
  int bad = check_both(s, snap, dev, mode);
  jfree(snap);
  return bad;
}

/* Read the stats too. */
static int check_all(int dev, const char *mode) {
  jv_t *s = read_stats(dev);
  int bad = check_parsed(s, dev, mode);
  jfree(s);
  return bad;
}

/* ======================================================================== */
/* Keys after many different operations, both modes.                         */
/* ======================================================================== */

static xs_backend_t *be(void) { return t_backend(); }

#define HELD ((xseg_stream_t)0x3000) /* never allocates: only held or recorded */

XT_TEST(every_documented_key_after_each_operation) {
  for (int m = 0; m < 2; m++) {
    const char *mode = m == 0 ? "expandable" : "binned";
    XT_REQUIRE(t_init(t_modes[m]) == 0);
    int bad = check_all(0, mode); /* before any allocation */
    void *p[8] = {0};
    p[0] = xseg_malloc(0, 0, NULL);
    bad += check_all(0, mode);
    p[1] = xseg_malloc(1000, 0, NULL);
    p[2] = xseg_malloc(3 * MiB + 7, 0, NULL);
    p[3] = xseg_malloc(MiB, 0, (xseg_stream_t)0x100);
    p[4] = xseg_malloc(40 * MiB, 0, (xseg_stream_t)0x200);
    for (int i = 0; i < 5; i++) XT_CHECK(p[i] != NULL);
    bad += check_all(0, mode);
    XT_CHECK_EQ(xseg_free(p[1]), 0);
    bad += check_all(0, mode);
    xs_host_stream_hold(be(), HELD);
    XT_CHECK_EQ(xseg_record_stream(p[2], HELD), 0);
    XT_CHECK_EQ(xseg_free(p[2]), 0); /* pending */
    bad += check_all(0, mode);
    XT_CHECK(xseg_malloc(64 * GiB, 0, NULL) == NULL); /* OOM */
    bad += check_all(0, mode);
    XT_CHECK_EQ(xseg_empty_cache(0), 0);
    bad += check_all(0, mode);
    xs_host_stream_release(be(), HELD);
    XT_CHECK_EQ(xseg_empty_cache(0), 0); /* the pending block comes back */
    bad += check_all(0, mode);
    XT_CHECK_EQ(xseg_reset_peak_stats(0), 0);
    bad += check_all(0, mode);
    for (int i = 0; i < 8; i++) xseg_free(p[i]); /* some are NULL or freed: fine */
    bad += check_all(0, mode);
    XT_CHECK_EQ(xseg_empty_cache(-1), 0);
    bad += check_all(0, mode);
    XT_CHECK_MSG(bad == 0, "%s mode: %d problems", mode, bad);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

XT_TEST(json_is_snprintf_like_and_stable) {
  XT_REQUIRE(t_init("") == 0);
  void *p = xseg_malloc(5 * MiB, 0, NULL);
  XT_REQUIRE(p);
  for (int which = 0; which < 2; which++) {
    size_t (*fn)(int, char *, size_t) = which ? xseg_snapshot_json : xseg_stats_json;
    size_t need = fn(0, NULL, 0);
    XT_CHECK(need > 0);
    char *full = malloc(need + 1), *cut = malloc(need);
    XT_REQUIRE(full && cut);
    XT_CHECK_EQ(fn(0, full, need + 1), need);
    /* One byte short: the same length back, the text cut and terminated. */
    XT_CHECK_EQ(fn(0, cut, need), need);
    XT_CHECK_EQ(strlen(cut), need - 1);
    XT_CHECK(memcmp(cut, full, need - 1) == 0);
    char err[200];
    jv_t *v = jparse(cut, need - 1, err, sizeof err);
    XT_CHECK(v == NULL); /* a cut text must not parse */
    jfree(v);
    free(full);
    free(cut);
  }
  XT_CHECK_EQ(xseg_free(p), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* ======================================================================== */
/* The reference model.                                                      */
/* ======================================================================== */
/* What the model relies on (read in pool/alloc.c and pool/block.c):
 *  - xs_round_size: 0 counts as 1, then (no roundup_power2_divisions by
 *    default) round up to XS_ALIGN = 512; a result past SIZE_MAX is 0 and
 *    the allocation fails at once as an OOM, before pending events are
 *    looked at.
 *  - The pool is small when the rounded size is <= XS_SMALL_MAX (1 MiB).
 *  - xs_carve cuts exactly the rounded size out of the free block whenever
 *    the strategy's should_split says so, and in expandable mode it says so for any
 *    remainder of at least 512 bytes - which every remainder is, sizes being
 *    multiples of 512.  The rules that keep a block whole (max_split_size,
 *    whose default "auto" is unlimited in expandable mode, and the binned
 *    large-pool rule of no remainder under 1 MiB) apply to the binned pool
 *    only.  So in expandable mode with the default configuration a live
 *    block's size is exactly the rounded request, and allocated_bytes and
 *    rounding_waste_bytes are exact - except where growth hands a large
 *    request the rest of its last page (m_size below says when); in binned
 *    mode a block may be larger.  The model reads each new block's size
 *    from the snapshot, checks it against these rules, and from then on
 *    predicts every byte figure exactly.
 *  - A block freed with other streams recorded is pending: active until an
 *    event recorded at the free on each of those streams has completed AND
 *    xs_process_events has run, which happens at the start of xs_malloc
 *    (when the size rounds) and of xs_empty_cache - not at xseg_free and
 *    not when the stats are read.
 *  - On the host backend an event on a stream that is not held completes at
 *    once; on a held stream it completes at xs_host_stream_complete or
 *    _release.  The held stream never allocates, so the allocator's own
 *    fences (recorded on allocating streams) never complete it early. */

#define NSTR 5
static const xseg_stream_t g_str[NSTR] = {NULL, (xseg_stream_t)0x100, (xseg_stream_t)0x200, HELD,
                                         (xseg_stream_t)0x4000};
#define NALLOC_STR 3 /* streams 0..2 allocate; 3 (held) and 4 are only recorded */
#define MAX_ACTIVE 48
#define MODEL_OPS 3000
#define MODEL_SEEDS 4

typedef struct mstat_s {
  long long current, peak, allocated, freed;
} mstat_t;

static void mstat_add(mstat_t s[3], int cls, long long n) {
  for (int i = 0; i < 2; i++) {
    mstat_t *x = &s[i ? cls : 0];
    x->current += n;
    if (n > 0) x->allocated += n;
    else x->freed += -n;
    if (x->current > x->peak) x->peak = x->current;
  }
}

typedef struct mevent_s {
  int st;
  int held;      /* the stream was held when it was recorded */
  uint64_t gen;  /* the stream's completion count then */
} mevent_t;

typedef struct mblock_s {
  void *p;
  size_t req, r; /* requested; rounded to 512 */
  size_t sz;     /* the block's size (the snapshot says which rule gave it) */
  int cls; /* 1 small, 2 large (index into the pools) */
  int owner;
  int nuses, uses[NSTR];
  int pending, nev;
  mevent_t ev[NSTR];
} mblock_t;

static struct {
  long long n_pending, n_done, n_ooms, n_resets, n_empty, n_small, n_large, n_folded; /* coverage */
  long long prev_held, limit, page; /* from the stats of the step before */
  mblock_t b[MAX_ACTIVE];
  int n; /* live and pending */
  mstat_t allocation[3], requested[3], allocated[3], active[3], active_bytes[3];
  long long pend_cur, pend_peak, ooms;
  int held;
  uint64_t gen;
  int expandable;
} MM;


static size_t m_round(size_t size) {
  if (size == 0) size = 1;
  if (size > SIZE_MAX - 511) return 0;
  return (size + 511) / 512 * 512;
}

/* Sizes over both pools: tiny, small, around the 1 MiB class boundary,
 * a few MiB, up to 64 MiB. */
static size_t rnd_size(void) {
  uint64_t k = t_below(100);
  if (k < 5) return (size_t)t_below(2); /* 0 and 1 */
  if (k < 30) return (size_t)t_below(4097);
  if (k < 50) return 1 + (size_t)t_below(MiB);
  if (k < 65) return MiB - 4 * KiB + (size_t)t_below(8 * KiB + 1); /* both sides of the boundary */
  if (k < 90) return MiB + (size_t)t_below(15 * MiB);
  return 16 * MiB + (size_t)t_below(48 * MiB + 1);
}

static void m_process(void) {
  for (int i = 0; i < MM.n;) {
    mblock_t *b = &MM.b[i];
    if (b->pending) {
      int left = 0;
      for (int e = 0; e < b->nev; e++) {
        mevent_t *ev = &b->ev[e];
        int done = ev->st != 3 || !ev->held || MM.gen > ev->gen;
        if (!done) b->ev[left++] = *ev;
      }
      b->nev = left;
      if (left == 0) {
        MM.n_done++;
        MM.pend_cur--;
        mstat_add(MM.active, b->cls, -1);
        mstat_add(MM.active_bytes, b->cls, -(long long)b->sz);
        MM.b[i] = MM.b[--MM.n];
        continue;
      }
    }
    i++;
  }
}

static void m_reset_peaks(void) {
  mstat_t *all[] = {MM.allocation, MM.requested, MM.allocated, MM.active, MM.active_bytes};
  for (size_t i = 0; i < NELEM(all); i++)
    for (int t = 0; t < 3; t++) all[i][t].peak = all[i][t].current;
  MM.pend_peak = MM.pend_cur;
}

/* The size of a new block, from the snapshot, against the rules.
 * Expandable mode: exactly the request rounded to 512 (see the comment at
 * the top of the model).  One exception (XS_PLENTIFUL,
 * pool/expandable.c:grow): a large request that grows the pool while
 * at least limit / XS_PLENTIFUL would stay free, and whose last page's rest
 * is at most an eighth of it, takes that rest, so its block ends on a page
 * boundary, less than a page past the rounded size.
 * Binned mode: the rounded size, plus what the binned strategy's should_split leaves unsplit:
 * a large-pool remainder of at most 1 MiB, or, for blocks of
 * max_split_size (64 MiB by default) and more, less than
 * XS_OVERSIZE_SLACK.  Small-pool blocks are always exact. */
static int m_size(mblock_t *b, const jv_t *snap) {
  const jv_t *segs = jget(snap, "segments");
  long long size = -1;
  for (size_t i = 0; segs && i < segs->n && size < 0; i++) {
    const jv_t *bl = jget(segs->v[i], "blocks");
    for (size_t k = 0; bl && k < bl->n; k++)
      if (jint(bl->v[k], "address") == (long long)(uintptr_t)b->p) {
        const char *st = jstr(bl->v[k], "state");
        if (st && strcmp(st, "live") == 0) size = jint(bl->v[k], "size");
        break;
      }
  }
  XT_CHECK_MSG(size > 0, "the snapshot has no live block at %p", b->p);
  if (size <= 0) return 1;
  b->sz = (size_t)size;
  long long r = (long long)b->r, page = MM.page;
  int ok = size == r;
  if (!ok && MM.expandable) {
    long long end = (long long)(uintptr_t)b->p + size;
    ok = b->cls == 2 && size > r && size - r < page && end % page == 0 && (size - r) * 8 <= r &&
         MM.limit - MM.prev_held >= r + MM.limit / XS_PLENTIFUL;
    MM.n_folded += ok;
  } else if (!ok) {
    ok = b->cls == 2 && size > r &&
         (size - r <= (long long)MiB || (size >= 64 * (long long)MiB && size - r < (long long)XS_OVERSIZE_SLACK));
  }
  XT_CHECK_MSG(ok, "%s: malloc(%zu) at %p: block of %lld bytes; rounded %lld, page %lld, held before %lld of %lld",
               MM.expandable ? "expandable" : "binned", b->req, b->p, size, r, page, MM.prev_held, MM.limit);
  return !ok;
}

/* Compare every modelled figure with the JSON; problems. */
static int m_compare(const jv_t *s) {
  int bad = 0;
  char path[160];
  struct {
    const char *name;
    mstat_t *st;
  } f[] = {{"allocation", MM.allocation},
           {"requested_bytes", MM.requested},
           {"allocated_bytes", MM.allocated},
           {"active", MM.active},
           {"active_bytes", MM.active_bytes}};
  for (size_t i = 0; i < NELEM(f); i++) {
    for (int t = 0; t < 3; t++) {
      long long want[4] = {f[i].st[t].current, f[i].st[t].peak, f[i].st[t].allocated, f[i].st[t].freed};
      for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "%s.%s.%s", f[i].name, g_types[t], g_fields[k]);
        long long got = jint(s, path);
        if (got != want[k]) {
          XT_CHECK_MSG(got == want[k], "%s is %lld, the model says %lld", path, got, want[k]);
          bad++;
        }
      }
    }
  }
  if (!MM.expandable) {
    /* Binned: blocks may keep an unsplit remainder, so only a bound. */
    for (int t = 0; t < 3; t++) {
      long long rounded = 0;
      for (int i = 0; i < MM.n; i++)
        if (!MM.b[i].pending && (t == 0 || MM.b[i].cls == t)) rounded += (long long)MM.b[i].r;
      snprintf(path, sizeof path, "allocated_bytes.%s.current", g_types[t]);
      long long got = jint(s, path);
      XT_CHECK_MSG(got >= rounded, "%s is %lld, below the requests rounded to 512 (%lld)", path, got, rounded);
      bad += got < rounded;
      snprintf(path, sizeof path, "active_bytes.%s.current", g_types[t]);
      XT_CHECK_MSG(jint(s, path) >= got, "%s below allocated_bytes", path);
      bad += jint(s, path) < got;
    }
  }
  struct {
    const char *path;
    long long want;
  } g[] = {{"pending_frees.current", MM.pend_cur}, {"pending_frees.peak", MM.pend_peak}, {"num_ooms", MM.ooms}};
  for (size_t i = 0; i < NELEM(g); i++) {
    long long got = jint(s, g[i].path);
    if (got != g[i].want) {
      XT_CHECK_MSG(got == g[i].want, "%s is %lld, the model says %lld", g[i].path, got, g[i].want);
      bad++;
    }
  }
  long long waste = MM.allocated[0].current - MM.requested[0].current;
  const jv_t *rw = jget(s, "rounding_waste_bytes");
  long long got = rw && rw->exact ? (rw->neg ? -(long long)rw->mag : (long long)rw->mag) : LLONG_MIN;
  if (got != waste) {
    XT_CHECK_MSG(got == waste, "rounding_waste_bytes is %lld, the model says %lld", got, waste);
    bad++;
  }
  return bad;
}

static char g_hist[8][120];
static unsigned g_nhist;
#define HIST(...) snprintf(g_hist[g_nhist++ % 8], sizeof g_hist[0], __VA_ARGS__)

static void dump_hist(const char *conf, uint64_t seed, int step) {
  fprintf(stderr, "model: %s, seed %llu, step %d; last operations:\n", conf, (unsigned long long)seed, step);
  unsigned n = g_nhist < 8 ? g_nhist : 8;
  for (unsigned i = g_nhist - n; i < g_nhist; i++) fprintf(stderr, "  %s\n", g_hist[i % 8]);
}

/* Worst-case device memory an active block may pin: binned, a segment of
 * up to 64 MiB (a smaller block may reuse a big segment); expandable, its
 * pages plus one at each edge.  Keeps every allocation of the sequence
 * possible in both modes on the default 4 GiB host device. */
#define PIN_BOUND (66 * MiB)

/* What m_malloc returns instead of a block's index. */
#define M_FULL (-2)   /* no room in the model: the step frees instead */
#define M_FAILED (-3) /* the malloc failed */

/* A malloc of a random size on a random allocating stream; the new block's
 * index in MM.b, M_FULL or M_FAILED. */
static int m_malloc(void) {
  if (MM.n >= MAX_ACTIVE || (size_t)(MM.n + 1) * PIN_BOUND > 3 * GiB) return M_FULL;
  size_t n = rnd_size();
  int st = (int)t_below(NALLOC_STR);
  size_t r = m_round(n);
  void *p = xseg_malloc(n, 0, g_str[st]);
  HIST("malloc(%zu, stream %d) = %p", n, st, p);
  m_process();
  XT_CHECK_MSG(p != NULL, "malloc(%zu) failed: %s", n, xseg_last_error());
  if (!p) return M_FAILED;
  XT_CHECK_EQ((uintptr_t)p % 512, 0);
  mblock_t *b = &MM.b[MM.n++];
  memset(b, 0, sizeof *b);
  b->p = p;
  b->req = n;
  b->r = r;
  b->cls = r <= MiB ? 1 : 2;
  if (b->cls == 1) MM.n_small++;
  else MM.n_large++;
  b->owner = st;
  mstat_add(MM.allocation, b->cls, 1);
  mstat_add(MM.requested, b->cls, (long long)n);
  mstat_add(MM.active, b->cls, 1);
  /* allocated_bytes and active_bytes once the size is checked (m_check):
   * nothing else happens in between, so the peaks come out the same. */
  return MM.n - 1;
}

/* A random live (not pending) block, or NULL if there is none. */
static mblock_t *m_pick_live(void) {
  int idx[MAX_ACTIVE], nl = 0;
  for (int i = 0; i < MM.n; i++)
    if (!MM.b[i].pending) idx[nl++] = i;
  return nl ? &MM.b[idx[t_below((uint64_t)nl)]] : NULL;
}

/* Free a random live block: gone at once, or pending on the streams
 * recorded on it. */
static void m_free(void) {
  mblock_t *b = m_pick_live();
  if (!b) return;
  int rc = xseg_free(b->p);
  HIST("free(%p) = %d (%d streams recorded)", b->p, rc, b->nuses);
  XT_CHECK_EQ(rc, 0);
  mstat_add(MM.allocation, b->cls, -1);
  mstat_add(MM.requested, b->cls, -(long long)b->req);
  mstat_add(MM.allocated, b->cls, -(long long)b->sz);
  if (b->nuses == 0) {
    mstat_add(MM.active, b->cls, -1);
    mstat_add(MM.active_bytes, b->cls, -(long long)b->sz);
    *b = MM.b[--MM.n];
    return;
  }
  b->pending = 1;
  b->nev = b->nuses;
  for (int e = 0; e < b->nuses; e++) {
    b->ev[e].st = b->uses[e];
    b->ev[e].held = b->uses[e] == 3 && MM.held;
    b->ev[e].gen = MM.gen;
  }
  MM.pend_cur++;
  MM.n_pending++;
  if (MM.pend_cur > MM.pend_peak) MM.pend_peak = MM.pend_cur;
}

/* record_stream on a live block: any stream, the owner included (a no-op). */
static void m_record(void) {
  mblock_t *b = m_pick_live();
  if (!b) return;
  int st = t_below(3) ? 3 : (int)t_below(NSTR);
  int rc = xseg_record_stream(b->p, g_str[st]);
  HIST("record_stream(%p, stream %d) = %d", b->p, st, rc);
  XT_CHECK_EQ(rc, 0);
  int known = st == b->owner;
  for (int e = 0; e < b->nuses; e++) known |= b->uses[e] == st;
  if (!known) b->uses[b->nuses++] = st;
}

/* Out of memory: beyond the device, or past SIZE_MAX. */
static void m_oom(void) {
  size_t n = t_below(2) ? 8 * GiB + (size_t)t_below(GiB) : SIZE_MAX - (size_t)t_below(1024);
  void *p = xseg_malloc(n, 0, g_str[t_below(NALLOC_STR)]);
  HIST("malloc(%zu) = %p (must fail)", n, p);
  XT_CHECK(p == NULL);
  XT_CHECK_EQ(xseg_last_error_code(), XSEG_ENOMEM);
  if (m_round(n) != 0) m_process();
  MM.ooms++;
  MM.n_ooms++;
}

/* One random operation; the block it allocated (index in MM.b), -1 if
 * none, or M_FAILED. */
static int m_step(void) {
  uint64_t k = t_below(100);
  int fresh = -1;
  if (k < 44) {
    fresh = m_malloc();
    if (fresh == M_FAILED) return M_FAILED;
    if (fresh == M_FULL) {
      fresh = -1;
      k = 50; /* full: free instead */
    }
  }
  if (k >= 44 && k < 74) {
    m_free();
  } else if (k >= 74 && k < 84) {
    m_record();
  } else if (k >= 84 && k < 88) {
    xs_host_stream_hold(be(), HELD);
    MM.held = 1;
    HIST("hold");
  } else if (k >= 88 && k < 90) {
    xs_host_stream_complete(be(), HELD);
    MM.gen++;
    HIST("complete");
  } else if (k >= 90 && k < 92) {
    xs_host_stream_release(be(), HELD);
    MM.gen++;
    MM.held = 0;
    HIST("release");
  } else if (k >= 92 && k < 94) {
    int rc = xseg_empty_cache(t_below(2) ? 0 : -1);
    HIST("empty_cache = %d", rc);
    XT_CHECK_EQ(rc, 0);
    m_process();
    MM.n_empty++;
  } else if (k >= 94 && k < 97) {
    int rc = xseg_reset_peak_stats(t_below(2) ? 0 : -1);
    HIST("reset_peak_stats = %d", rc);
    XT_CHECK_EQ(rc, 0);
    m_reset_peaks();
    MM.n_resets++;
  } else if (k >= 97) {
    m_oom();
  }
  return fresh;
}

/* After a step: the new block's size (now that the snapshot shows it),
 * every modelled figure and the snapshot against the JSON; problems.  Keeps
 * what m_size needs from this step's stats for the next. */
static int m_check(const jv_t *s, const jv_t *snap, int fresh, const char *mode) {
  int bad = 0;
  if (fresh >= 0) {
    mblock_t *b = &MM.b[fresh];
    bad += m_size(b, snap);
    mstat_add(MM.allocated, b->cls, (long long)b->sz);
    mstat_add(MM.active_bytes, b->cls, (long long)b->sz);
  }
  bad += m_compare(s);
  bad += check_both(s, snap, 0, mode);
  MM.prev_held = jint(s, "held_bytes.current");
  MM.limit = jint(s, "limit");
  MM.page = jint(s, "granularity");
  return bad;
}

/* Drain: free everything, let the held stream go, and (if the run went
 * well) nothing may be left; problems. */
static int m_drain(const char *mode, int bad) {
  for (int i = 0; i < MM.n; i++)
    if (!MM.b[i].pending) xseg_free(MM.b[i].p);
  xs_host_stream_release(be(), HELD);
  xseg_empty_cache(0);
  if (bad) return 0;
  XT_CHECK_EQ(t_stat(0, "allocation.all.current"), 0);
  XT_CHECK_EQ(t_stat(0, "active.all.current"), 0);
  XT_CHECK_EQ(t_stat(0, "pending_frees.current"), 0);
  XT_CHECK_EQ(t_stat(0, "requested_bytes.all.current"), 0);
  XT_CHECK_EQ(t_stat(0, "allocated_bytes.all.current"), 0);
  XT_CHECK_EQ(t_stat(0, "free_mapped_bytes.current"), 0); /* everything was released */
  XT_CHECK_EQ(t_stat(0, "reserved_bytes.all.current"), 0);
  XT_CHECK_EQ(t_stat(0, "held_bytes.current"), 0);
  return check_all(0, mode);
}

static int run_model(int expandable, uint64_t seed) {
  const char *conf = expandable ? "expandable_segments:True" : "expandable_segments:False";
  if (t_init(expandable ? "" : conf) != 0) return 1; /* expandable: the default configuration */
  memset(&MM, 0, sizeof MM);
  MM.expandable = expandable;
  MM.limit = t_stat(0, "limit");
  MM.page = t_stat(0, "granularity");
  t_rng = seed;
  g_nhist = 0;
  const char *mode = expandable ? "expandable" : "binned";
  int bad = 0, step;
  int nops = (int)t_scale(MODEL_OPS);
  for (step = 0; step < nops && !bad; step++) {
    int fresh = m_step(); /* the block this step allocated */
    if (fresh == M_FAILED) {
      bad++;
      break;
    }
    jv_t *s = read_stats(0), *snap = read_snapshot(0);
    if (!s || !snap) {
      jfree(s);
      jfree(snap);
      bad++;
      break;
    }
    bad += m_check(s, snap, fresh, mode);
    jfree(s);
    jfree(snap);
    if (bad) dump_hist(conf, seed, step);
  }
  printf("     %s seed %#llx: %d steps: %lld small and %lld large allocations (%lld with a folded tail "
         "page), %lld pending frees (%lld completed), %lld OOMs, %lld empty_cache, %lld peak resets\n",
         mode, (unsigned long long)seed, step, MM.n_small, MM.n_large, MM.n_folded, MM.n_pending, MM.n_done,
         MM.n_ooms, MM.n_empty, MM.n_resets);
  bad += m_drain(mode, bad);
  int rc = xseg_shutdown();
  XT_CHECK_MSG(rc == 0, "shutdown: %s", xseg_last_error());
  return bad;
}

XT_TEST(model_expandable_exact) {
  for (uint64_t s = 0; s < MODEL_SEEDS; s++) XT_CHECK_EQ(run_model(1, 0x5eed0000ull + s), 0);
}

XT_TEST(model_binned_exact) {
  for (uint64_t s = 0; s < MODEL_SEEDS; s++) XT_CHECK_EQ(run_model(0, 0x5eed0000ull + s), 0);
}

/* ======================================================================== */
/* Peak reset and derived figures on known layouts.                          */
/* ======================================================================== */

XT_TEST(peak_reset_semantics) {
  XT_REQUIRE(t_init("") == 0);
  void *a = xseg_malloc(10 * MiB, 0, NULL), *b = xseg_malloc(1000, 0, NULL);
  XT_REQUIRE(a && b);
  XT_CHECK_EQ(xseg_free(a), 0);
  XT_CHECK_EQ(t_stat(0, "allocated_bytes.all.peak"), 10 * MiB + 1024);
  XT_CHECK_EQ(t_stat(0, "allocated_bytes.large_pool.peak"), 10 * MiB);
  XT_CHECK_EQ(xseg_reset_peak_stats(0), 0);
  /* Every .peak is now its .current; .allocated and .freed are not reset. */
  jv_t *s = read_stats(0);
  XT_REQUIRE(s);
  char p1[160], p2[160];
  for (size_t i = 0; i < NELEM(g_pooled); i++)
    for (int t = 0; t < 3; t++) {
      snprintf(p1, sizeof p1, "%s.%s.peak", g_pooled[i], g_types[t]);
      snprintf(p2, sizeof p2, "%s.%s.current", g_pooled[i], g_types[t]);
      XT_CHECK_MSG(jint(s, p1) == jint(s, p2), "%s %lld after reset, current %lld", p1, jint(s, p1), jint(s, p2));
    }
  for (size_t i = 0; i < NELEM(g_gauges); i++) {
    snprintf(p1, sizeof p1, "%s.peak", g_gauges[i]);
    snprintf(p2, sizeof p2, "%s.current", g_gauges[i]);
    XT_CHECK_MSG(jint(s, p1) == jint(s, p2), "%s %lld after reset, current %lld", p1, jint(s, p1), jint(s, p2));
  }
  XT_CHECK_EQ(jint(s, "allocated_bytes.all.allocated"), 10 * MiB + 1024);
  XT_CHECK_EQ(jint(s, "allocated_bytes.all.freed"), 10 * MiB);
  XT_CHECK_EQ(jint(s, "allocated_bytes.all.peak"), 1024);
  XT_CHECK_EQ(jint(s, "requested_bytes.all.peak"), 1000);
  XT_CHECK_EQ(jint(s, "allocated_bytes.large_pool.peak"), 0);
  jfree(s);
  /* The peak follows from the reset point. */
  void *c = xseg_malloc(4 * MiB, 0, NULL);
  XT_CHECK_EQ(xseg_free(c), 0);
  XT_CHECK_EQ(t_stat(0, "allocated_bytes.all.peak"), 4 * MiB + 1024);
  XT_CHECK_EQ(t_stat(0, "allocated_bytes.large_pool.peak"), 4 * MiB);
  XT_CHECK_EQ(t_stat(0, "requested_bytes.all.peak"), 4 * MiB + 1000);
  XT_CHECK_EQ(t_stat(0, "allocation.all.peak"), 2);
  XT_CHECK_EQ(xseg_free(b), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(derived_figures_on_known_layouts) {
  /* Nothing allocated: no fragmentation, no utilization. */
  XT_REQUIRE(t_init("expandable_segments:False") == 0);
  jv_t *s = read_stats(0);
  XT_REQUIRE(s);
  XT_CHECK(jdbl(s, "external_fragmentation") == 0.0 && jdbl(s, "utilization") == 0.0);
  XT_CHECK_EQ(jint(s, "largest_free_block"), 0);
  jfree(s);
  /* Binned: five 4 MiB blocks fill one 20 MiB segment; free the 2nd and
   * 4th: 8 MiB free in two 4 MiB holes, fragmentation 1 - 4/8 = 0.5. */
  void *p[5];
  for (int i = 0; i < 5; i++) XT_REQUIRE((p[i] = xseg_malloc(4 * MiB, 0, NULL)) != NULL);
  s = read_stats(0);
  XT_REQUIRE(s);
  XT_CHECK(jdbl(s, "external_fragmentation") == 0.0); /* nothing free */
  XT_CHECK_EQ(jint(s, "free_mapped_bytes.current"), 0);
  XT_CHECK(jdbl(s, "utilization") == 1.0);
  jfree(s);
  XT_CHECK_EQ(xseg_free(p[1]), 0);
  XT_CHECK_EQ(xseg_free(p[3]), 0);
  s = read_stats(0);
  XT_REQUIRE(s);
  XT_CHECK_EQ(jint(s, "free_mapped_bytes.current"), 8 * MiB);
  XT_CHECK_EQ(jint(s, "largest_free_block"), 4 * MiB);
  XT_CHECK(jdbl(s, "external_fragmentation") == 0.5);
  XT_CHECK_EQ(jint(s, "inactive_split.large_pool.current"), 2);
  XT_CHECK_EQ(jint(s, "inactive_split_bytes.all.current"), 8 * MiB);
  jfree(s);
  XT_CHECK_EQ(check_all(0, "binned"), 0);
  /* utilization: peak allocated 20 MiB of peak reserved 20 + 2 MiB. */
  void *q = xseg_malloc(100, 0, NULL);
  XT_REQUIRE(q);
  s = read_stats(0);
  XT_REQUIRE(s);
  XT_CHECK_EQ(jint(s, "reserved_bytes.all.peak"), 22 * MiB);
  XT_CHECK(near6(jdbl(s, "utilization"), 20.0 / 22.0));
  jfree(s);
  XT_CHECK_EQ(xseg_free(q), 0);
  for (int i = 0; i < 5; i += 2) XT_CHECK_EQ(xseg_free(p[i]), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);

  /* Expandable: a 1000-byte block (1024 after rounding) maps one small
   * page; the rest of the page is one free block. */
  XT_REQUIRE(t_init("") == 0);
  void *a = xseg_malloc(1000, 0, NULL);
  XT_REQUIRE(a);
  s = read_stats(0);
  XT_REQUIRE(s);
  XT_CHECK_EQ(jint(s, "reserved_bytes.all.current"), 2 * MiB);
  XT_CHECK_EQ(jint(s, "reserved_bytes.small_pool.current"), 2 * MiB);
  XT_CHECK_EQ(jint(s, "free_mapped_bytes.current"), 2 * MiB - 1024);
  XT_CHECK_EQ(jint(s, "largest_free_block"), 2 * MiB - 1024);
  XT_CHECK_EQ(jint(s, "inactive_split.small_pool.current"), 1);
  XT_CHECK(jdbl(s, "external_fragmentation") == 0.0);
  XT_CHECK(near6(jdbl(s, "utilization"), 1024.0 / (2.0 * MiB)));
  jfree(s);
  XT_CHECK_EQ(check_all(0, "expandable"), 0);
  XT_CHECK_EQ(xseg_free(a), 0);
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  s = read_stats(0);
  XT_REQUIRE(s);
  XT_CHECK_EQ(jint(s, "reserved_bytes.all.current"), 0);
  XT_CHECK_EQ(jint(s, "held_bytes.current"), 0);
  XT_CHECK(jdbl(s, "external_fragmentation") == 0.0);
  XT_CHECK(near6(jdbl(s, "utilization"), 1024.0 / (2.0 * MiB))); /* peaks are kept */
  jfree(s);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* ======================================================================== */
/* Out-of-memory diagnosis.                                                  */
/* ======================================================================== */

/* The library's byte format (pool/stats.c: fmt_bytes), e.g. "36.00 MiB". */
static const char *fmtb(char *out, size_t n, long long v) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = (double)(v < 0 ? -v : v);
  int i = 0;
  while (x >= 1024 && i < 4) {
    x /= 1024;
    i++;
  }
  snprintf(out, n, "%s%.*f %s", v < 0 ? "-" : "", i ? 2 : 0, x, u[i]);
  return out;
}

/* Ask for `size`, expect a failure whose message names `cause` (and
 * `also`, when given), the request size, the live bytes and the largest
 * free block; num_ooms must go up by one. */
static void expect_oom(size_t size, const char *cause, const char *also, char *msg_out, size_t msg_len) {
  long long ooms = t_stat(0, "num_ooms");
  void *p = xseg_malloc(size, 0, NULL);
  XT_CHECK_MSG(p == NULL, "malloc(%zu) should fail", size);
  if (p) {
    xseg_free(p);
    return;
  }
  XT_CHECK_EQ(xseg_last_error_code(), XSEG_ENOMEM);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", xseg_last_error());
  if (msg_out) snprintf(msg_out, msg_len, "%s", msg);
  XT_CHECK_EQ(t_stat(0, "num_ooms"), ooms + 1);
  XT_CHECK_MSG(strstr(msg, cause) != NULL, "message lacks \"%s\": %s", cause, msg);
  if (also) XT_CHECK_MSG(strstr(msg, also) != NULL, "message lacks \"%s\": %s", also, msg);
  char want[160], a[32];
  snprintf(want, sizeof want, "(%zu bytes requested", size);
  XT_CHECK_MSG(strstr(msg, want) != NULL, "message lacks the request size \"%s\": %s", want, msg);
  jv_t *s = read_stats(0);
  XT_REQUIRE(s);
  snprintf(want, sizeof want, "Live: %s in %lld blocks", fmtb(a, sizeof a, jint(s, "allocated_bytes.all.current")),
           jint(s, "allocation.all.current"));
  XT_CHECK_MSG(strstr(msg, want) != NULL, "message lacks \"%s\": %s", want, msg);
  snprintf(want, sizeof want, "largest free block %s)", fmtb(a, sizeof a, jint(s, "largest_free_block")));
  XT_CHECK_MSG(strstr(msg, want) != NULL, "message lacks \"%s\": %s", want, msg);
  jfree(s);
  XT_CHECK_EQ(xseg_check_heap(0), 0);
}

static void free_all(void **p, int n) {
  for (int i = 0; i < n; i++)
    if (p[i]) XT_CHECK_EQ(xseg_free(p[i]), 0);
}

XT_TEST(oom_larger_than_the_device) {
  for (int m = 0; m < 2; m++) {
    char conf[128];
    snprintf(conf, sizeof conf, "%s,host_capacity_mb:64", t_modes[m]);
    XT_REQUIRE(t_init(conf) == 0);
    void *p = xseg_malloc(5 * MiB, 0, NULL);
    XT_REQUIRE(p);
    expect_oom(128 * MiB, "larger than the memory", NULL, NULL, 0);
    expect_oom(64 * MiB + 1, "larger than the memory", NULL, NULL, 0);
    expect_oom(SIZE_MAX - 3, "larger than the memory", NULL, NULL, 0);
    XT_CHECK_EQ(t_stat(0, "num_ooms"), 3);
    /* Nothing was lost: the device still serves what fits. */
    void *q = xseg_malloc(32 * MiB, 0, NULL);
    XT_CHECK(q != NULL);
    XT_CHECK_EQ(xseg_free(q), 0);
    XT_CHECK_EQ(xseg_free(p), 0);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

XT_TEST(oom_memory_pressure) {
  for (int m = 0; m < 2; m++) {
    char conf[128];
    snprintf(conf, sizeof conf, "%s,host_capacity_mb:64", t_modes[m]);
    XT_REQUIRE(t_init(conf) == 0);
    /* 30 live 2 MiB blocks: 60 MiB of 64; 8 MiB more cannot fit. */
    void *p[30];
    for (int i = 0; i < 30; i++) XT_REQUIRE((p[i] = xseg_malloc(2 * MiB, 0, NULL)) != NULL);
    expect_oom(8 * MiB, "memory pressure", NULL, NULL, 0);
    XT_CHECK_EQ(t_stat(0, "num_ooms"), 1);
    /* No cap configured: the message names none. */
    XT_CHECK(strstr(xseg_last_error(), "max_memory_mb") == NULL);
    free_all(p, 30);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

XT_TEST(oom_configured_cap) {
  for (int m = 0; m < 2; m++) {
    char conf[128];
    snprintf(conf, sizeof conf, "%s,host_capacity_mb:64,max_memory_mb:32", t_modes[m]);
    XT_REQUIRE(t_init(conf) == 0);
    XT_CHECK_EQ(t_stat(0, "limit"), 32 * MiB);
    XT_CHECK_EQ(t_stat(0, "total_memory"), 64 * MiB);
    /* (c1) A request above the cap but below the device names the key. */
    expect_oom(48 * MiB, "larger than the memory", "max_memory_mb", NULL, 0);
    /* (c2) Pressure against the cap names it too: 20 MiB live (one binned
     * segment), 16 MiB more would pass the 32 MiB cap. */
    void *p[10];
    for (int i = 0; i < 10; i++) XT_REQUIRE((p[i] = xseg_malloc(2 * MiB, 0, NULL)) != NULL);
    expect_oom(16 * MiB, "memory pressure", "raise max_memory_mb", NULL, 0);
    XT_CHECK_EQ(t_stat(0, "num_ooms"), 2);
    XT_CHECK(t_stat(0, "held_bytes.peak") <= 32 * (long long)MiB);
    free_all(p, 10);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

/* Three 20 MiB segments filled with 4 MiB blocks, then every other block
 * freed: 24 MiB free, in 4 MiB holes, and only 4 MiB left on the device. */
static void fill_and_punch(void **p) {
  for (int i = 0; i < 15; i++) p[i] = xseg_malloc(4 * MiB, 0, NULL);
  for (int i = 0; i < 15; i++) XT_CHECK(p[i] != NULL);
  for (int i = 0; i < 15; i++)
    if (i % 5 == 1 || i % 5 == 3) {
      XT_CHECK_EQ(xseg_free(p[i]), 0);
      p[i] = NULL;
    }
}

XT_TEST(oom_binned_fragmentation) {
  XT_REQUIRE(t_init("expandable_segments:False,host_capacity_mb:64") == 0);
  void *p[15];
  fill_and_punch(p);
  XT_CHECK_EQ(t_stat(0, "segment.all.current"), 3);
  XT_CHECK_EQ(t_stat(0, "free_mapped_bytes.current"), 24 * MiB);
  XT_CHECK_EQ(t_stat(0, "largest_free_block"), 4 * MiB);
  char msg[1024];
  expect_oom(12 * MiB, "fragmentation", "expandable_segments:True", msg, sizeof msg);
  XT_CHECK_MSG(strstr(msg, "24.00 MiB is free inside segments") != NULL, "%s", msg);
  XT_CHECK_EQ(t_stat(0, "num_ooms"), 1);
  XT_CHECK_EQ(t_stat(0, "num_alloc_retries"), 1);
  free_all(p, 15);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  /* The same pattern in expandable mode: the request is served from the
   * free pages of the holes (remapped). */
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  fill_and_punch(p);
  void *q = xseg_malloc(12 * MiB, 0, NULL);
  XT_CHECK_MSG(q != NULL, "expandable: %s", xseg_last_error());
  XT_CHECK_EQ(t_stat(0, "num_ooms"), 0);
  XT_CHECK_EQ(xseg_free(q), 0);
  free_all(p, 15);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* Expandable mode, 64 MiB (32 pages): 21 blocks of 3 MiB back to back,
 * then every odd one freed.  Each freed block leaves one whole free page
 * and 1 MiB in the page it shares with the block before it; the last
 * block's page holds 1 MiB free after it.  A 24 MiB request (12 pages)
 * is not memory pressure (17 pages of live data + 12 <= 32), but only 10
 * whole pages are free: the message must say where the other 11 MiB lie,
 * and the derived figures must say the same. */
XT_TEST(oom_free_memory_in_shared_pages) {
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  void *p[21];
  for (int i = 0; i < 21; i++) XT_REQUIRE((p[i] = xseg_malloc(3 * MiB, 0, NULL)) != NULL);
  for (int i = 1; i < 21; i += 2) {
    XT_CHECK_EQ(xseg_free(p[i]), 0);
    p[i] = NULL;
  }
  XT_CHECK_EQ(t_stat(0, "free_mapped_bytes.current"), 31 * MiB);
  XT_CHECK_EQ(t_stat(0, "free_in_shared_pages_bytes"), 11 * MiB);
  XT_CHECK_EQ(t_stat(0, "free_in_pinned_handles_bytes"), 0);
  char msg[1024];
  expect_oom(24 * MiB, "fragmentation: of the 31.00 MiB free inside xseg's segments, 11.00 MiB lies in pages that live "
                       "blocks share",
             "0 B in handles that live blocks pin; the whole free pages and the room left come to 10 pages, and the "
             "request needs 12; free tensors",
             msg, sizeof msg);
  XT_CHECK_MSG(strstr(msg, "page_size_mb") == NULL, "pages already at the granularity: %s", msg);
  /* Twenty whole pages fit once the ten blocks between are gone too. */
  for (int i = 0; i < 21; i += 2) {
    if (i % 4 == 2) {
      XT_CHECK_EQ(xseg_free(p[i]), 0);
      p[i] = NULL;
    }
  }
  void *q = xseg_malloc(24 * MiB, 0, NULL);
  XT_CHECK_MSG(q != NULL, "%s", xseg_last_error());
  if (q) XT_CHECK_EQ(xseg_free(q), 0);
  free_all(p, 21);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(oom_memory_used_outside_xseg) {
  /* Another user of the device takes 16 MiB behind xseg's back. */
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  xs_backend_t *b = be();
  xs_handle_t h;
  XT_REQUIRE(b->create(b, 0, 16 * MiB, &h) == 0);
  void *p[20];
  for (int i = 0; i < 20; i++) XT_REQUIRE((p[i] = xseg_malloc(2 * MiB, 0, NULL)) != NULL);
  /* 40 MiB live + 16 MiB asked fits the 64 MiB device, but 8 MiB are left. */
  expect_oom(16 * MiB, "memory held outside this allocator", "16.00 MiB of the device", NULL, 0);
  /* The failed attempt mapped the driver's last 4 pages; with three more
   * of xseg's own free, 7 pages are still short of 8, and the message says
   * what of the free memory is xseg's and where it lies. */
  for (int i = 1; i < 7; i += 2) {
    XT_CHECK_EQ(xseg_free(p[i]), 0);
    p[i] = NULL;
  }
  expect_oom(16 * MiB, "16.00 MiB of the device is neither xseg's nor free; of the 14.00 MiB free inside xseg's "
                       "segments, 0 B lies in pages that live blocks share",
             "0 B in handles that live blocks pin; the whole free pages and the room left come to 7 pages, and the "
             "request needs 8",
             NULL, 0);
  XT_CHECK_EQ(b->release(b, 0, h), 0);
  void *q = xseg_malloc(16 * MiB, 0, NULL); /* and now it fits */
  XT_CHECK(q != NULL);
  XT_CHECK_EQ(xseg_free(q), 0);
  free_all(p, 20);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* ======================================================================== */
/* The summary (xseg_print_summary).                                         */
/* ======================================================================== */

/* One line of the summary, built from the JSON as docs/metrics.md shows it,
 * must be in the text. */
static void want_line(const char *text, const char *line) {
  if (strstr(text, line)) {
    XT_CHECK(1);
    return;
  }
  /* Show the line the summary has in its place: the one that starts alike. */
  char head[16];
  snprintf(head, sizeof head, "%.12s", line);
  const char *got = strstr(text, head);
  int n = got ? (int)strcspn(got, "\n") : 0;
  XT_CHECK_MSG(0, "summary lacks\n  \"%.*s\"; it has\n  \"%.*s\"", (int)strcspn(line, "\n"), line, n,
               got ? got : "");
}

static void check_summary(const char *mode) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  XT_REQUIRE(f);
  xseg_print_summary(0, f);
  fclose(f);
  jv_t *s = read_stats(0);
  XT_REQUIRE(s && text);
  char line[512], a[32], b[32], c[32], d[32], path[160];
  snprintf(line, sizeof line, "xseg memory summary, device 0   (%-10s mode, host backend)", mode);
  want_line(text, line);
  static const struct {
    const char *title, *name;
    int bytes;
  } rows[] = {{"Allocated memory", "allocated_bytes", 1},
              {"Active memory", "active_bytes", 1},
              {"Requested memory", "requested_bytes", 1},
              {"GPU reserved (mapped) memory", "reserved_bytes", 1},
              {"Non-releasable memory", "inactive_split_bytes", 1},
              {"Allocations", "allocation", 0},
              {"Active allocs", "active", 0},
              {"GPU reserved segments", "segment", 0},
              {"Non-releasable allocs", "inactive_split", 0}};
  for (size_t r = 0; r < NELEM(rows); r++) {
    for (int t = 0; t < 3; t++) {
      long long v[4];
      for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "%s.%s.%s", rows[r].name, g_types[t], g_fields[k]);
        v[k] = jint(s, path);
      }
      const char *label = t == 0 ? rows[r].title : t == 1 ? "      from small pool" : "      from large pool";
      if (rows[r].bytes)
        snprintf(line, sizeof line, "| %-27s | %12s | %12s | %12s | %12s |", label, fmtb(a, 32, v[0]), fmtb(b, 32, v[1]),
                 fmtb(c, 32, v[2]), fmtb(d, 32, v[3]));
      else
        snprintf(line, sizeof line, "| %-27s | %12lld | %12lld | %12lld | %12lld |", label, v[0], v[1], v[2], v[3]);
      if (t == 0) {
        want_line(text, line);
      } else {
        /* The pool rows repeat under every title: look after the title. */
        char title_line[64];
        snprintf(title_line, sizeof title_line, "| %-27s |", rows[r].title);
        const char *at = strstr(text, title_line);
        XT_CHECK_MSG(at && strstr(at, line) != NULL, "summary lacks \"%s\" under %s", line, rows[r].title);
      }
    }
  }
  /* Regression test (fixed bug): pool/stats.c xs_stats_summary formats held_bytes.current and
   * cached_handle_bytes.current into the same buffer `a` within one
   * fprintf, so both print whichever was formatted last (the held bytes
   * with GCC): "cached handles: 0 (60.00 MiB)".   */
  snprintf(line, sizeof line, "| Held: %s (peak %s) of a %s limit; cached handles: %lld (%s)\n",
           fmtb(a, 32, jint(s, "held_bytes.current")), fmtb(b, 32, jint(s, "held_bytes.peak")),
           fmtb(c, 32, jint(s, "limit")), jint(s, "handles_cached.current"),
           fmtb(d, 32, jint(s, "cached_handle_bytes.current")));
  want_line(text, line);
  int n = snprintf(line, sizeof line,
                   "| Free inside segments: %s, largest free block %s, external fragmentation %.1f%%",
                   fmtb(a, 32, jint(s, "free_mapped_bytes.current")), fmtb(b, 32, jint(s, "largest_free_block")),
                   100.0 * jdbl(s, "external_fragmentation"));
  if (!strcmp(mode, "expandable"))
    n += snprintf(line + n, sizeof line - (size_t)n, "; in pages live blocks share: %s, in handles they pin: %s",
                  fmtb(a, 32, jint(s, "free_in_shared_pages_bytes")),
                  fmtb(b, 32, jint(s, "free_in_pinned_handles_bytes")));
  snprintf(line + n, sizeof line - (size_t)n, "\n");
  want_line(text, line);
  snprintf(line, sizeof line, "| Utilization (peak allocated / peak reserved): %.1f%%; rounding waste: %s\n",
           100.0 * jdbl(s, "utilization"),
           fmtb(a, 32, jint(s, "allocated_bytes.all.current") - jint(s, "requested_bytes.all.current")));
  want_line(text, line);
  snprintf(line, sizeof line, "| Driver calls: %lld create (", jint(s, "num_device_alloc"));
  want_line(text, line);
  snprintf(line, sizeof line, "retries: %lld; OOMs: %lld; fence waits: %lld; trims: %lld (%s)\n",
           jint(s, "num_alloc_retries"), jint(s, "num_ooms"), jint(s, "num_fence_waits"), jint(s, "num_trims"),
           fmtb(a, 32, jint(s, "trimmed_bytes")));
  want_line(text, line);
  jfree(s);
  free(text);
}

XT_TEST(summary_matches_the_json) {
  void *p[15];
  for (int m = 0; m < 2; m++) {
    char conf[128];
    snprintf(conf, sizeof conf, "%s,host_capacity_mb:64", t_modes[m]);
    XT_REQUIRE(t_init(conf) == 0);
    check_summary(m == 0 ? "expandable" : "binned"); /* empty */
    fill_and_punch(p);
    void *small = xseg_malloc(1000, 0, NULL);
    void *q = xseg_malloc(12 * MiB, 0, NULL); /* binned: OOM */
    check_summary(m == 0 ? "expandable" : "binned");
    xseg_free(q);
    xseg_free(small);
    free_all(p, 15);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

/* ======================================================================== */
/* A program whose locale writes numbers with a decimal comma.               */
/* ======================================================================== */

/* Find or make a locale whose decimal point is ','; its name, or NULL.
 * Made with localedef into dir (LOCPATH) when none is installed. */
static const char *comma_locale(char *dir, size_t n) {
  static const char *const names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "de_DE", "fr_FR"};
  dir[0] = '\0';
  for (size_t i = 0; i < NELEM(names); i++)
    if (setlocale(LC_NUMERIC, names[i]) && strcmp(localeconv()->decimal_point, ",") == 0) return names[i];
  snprintf(dir, n, "/tmp/xseg-test-locale-%ld", (long)getpid());
  char cmd[700];
  snprintf(cmd, sizeof cmd, "mkdir -p %s && localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir, dir);
  if (system(cmd) == -1) return NULL;
  setenv("LOCPATH", dir, 1); /* localedef warns (exit 1) yet writes the locale: try it */
  if (setlocale(LC_NUMERIC, "de_DE.UTF-8") && strcmp(localeconv()->decimal_point, ",") == 0) return "de_DE.UTF-8";
  return NULL;
}

XT_TEST(json_under_a_decimal_comma_locale) {
  char dir[128], cmd[200];
  const char *name = comma_locale(dir, sizeof dir);
  if (!name) {
    printf("     skipped: no locale with a decimal comma here\n");
  } else {
    XT_REQUIRE(t_init("") == 0);
    void *p = xseg_malloc(3 * MiB, 0, NULL); /* utilization 0.75 */
    XT_REQUIRE(p);
    /* The text is written under the comma locale; it is parsed under "C",
     * since this test's parser reads numbers with strtod. */
    static char text[1 << 16];
    size_t n = xseg_stats_json(0, text, sizeof text);
    const char *u = strstr(text, "\"utilization\":");
    XT_CHECK(u != NULL && strchr(u, ',') != NULL && memchr(u, '.', (size_t)(strchr(u, ',') - u)) != NULL);
    setlocale(LC_NUMERIC, "C");
    char err[256];
    jv_t *s = n < sizeof text ? jparse(text, n, err, sizeof err) : NULL;
    XT_CHECK_MSG(s != NULL, "xseg_stats_json under LC_NUMERIC=%s is not JSON", name);
    if (s)
      XT_CHECK(near6(jdbl(s, "utilization"), jdbl(s, "allocated_bytes.all.peak") / jdbl(s, "reserved_bytes.all.peak")));
    jfree(s);
    XT_CHECK_EQ(xseg_free(p), 0);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
  setlocale(LC_NUMERIC, "C");
  if (dir[0]) {
    unsetenv("LOCPATH");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
}

/* ======================================================================== */
/* stats_file                                                                */
/* ======================================================================== */

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (buf) buf[n < cap ? n : cap - 1] = '\0';
  *len = n;
  return buf;
}

XT_TEST(stats_file_at_shutdown) {
  char path[128], conf[256];
  snprintf(path, sizeof path, "/tmp/xseg-test-stats-%ld.json", (long)getpid());
  unlink(path);
  snprintf(conf, sizeof conf, "host_devices:2,stats_file:%s", path);
  XT_REQUIRE(t_init(conf) == 0);
  void *a = xseg_malloc(3 * MiB, 0, NULL), *b = xseg_malloc(1000, 1, NULL), *c = xseg_malloc(100, 0, NULL);
  XT_REQUIRE(a && b && c);
  XT_CHECK_EQ(xseg_free(a), 0);
  XT_CHECK_EQ(xseg_free(b), 0);
  XT_CHECK_EQ(xseg_free(c), 0);
  long long want_alloc0 = t_stat(0, "allocation.all.allocated");
  XT_CHECK_EQ(access(path, F_OK), -1); /* not written before shutdown */
  XT_CHECK_EQ(xseg_shutdown(), 0);
  size_t len = 0;
  char *text = slurp(path, &len);
  XT_REQUIRE(text != NULL);
  char err[200];
  jv_t *v = jparse(text, len, err, sizeof err);
  XT_CHECK_MSG(v != NULL, "stats_file is not JSON: %s\n%.2000s", err, text);
  if (v) {
    XT_CHECK(v->type == J_ARR && v->n == 2);
    for (size_t i = 0; v->type == J_ARR && i < v->n; i++) {
      XT_CHECK_EQ(check_stats_keys(v->v[i], (int)i, "expandable"), 0);
      XT_CHECK_EQ(jint(v->v[i], "allocation.all.current"), 0);
    }
    if (v->type == J_ARR && v->n == 2) {
      XT_CHECK_EQ(jint(v->v[0], "allocation.all.allocated"), want_alloc0);
      XT_CHECK_EQ(jint(v->v[1], "allocation.all.allocated"), 1);
      XT_CHECK_EQ(jint(v->v[1], "requested_bytes.all.allocated"), 1000);
    }
  }
  jfree(v);
  free(text);
  unlink(path);
  /* Only devices that were used are written: one here. */
  XT_REQUIRE(t_init(conf) == 0);
  void *d = xseg_malloc(1, 1, NULL);
  XT_CHECK_EQ(xseg_free(d), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  text = slurp(path, &len);
  XT_REQUIRE(text != NULL);
  v = jparse(text, len, err, sizeof err);
  XT_CHECK_MSG(v && v->type == J_ARR && v->n == 1 && jint(v->v[0], "device") == 1, "%.2000s", text);
  jfree(v);
  free(text);
  unlink(path);
}

int main(void) {
  XT_RUN(json_parser_is_strict);
  XT_RUN(every_documented_key_after_each_operation);
  XT_RUN(json_is_snprintf_like_and_stable);
  XT_RUN(model_expandable_exact);
  XT_RUN(model_binned_exact);
  XT_RUN(peak_reset_semantics);
  XT_RUN(derived_figures_on_known_layouts);
  XT_RUN(oom_larger_than_the_device);
  XT_RUN(oom_memory_pressure);
  XT_RUN(oom_configured_cap);
  XT_RUN(oom_binned_fragmentation);
  XT_RUN(oom_free_memory_in_shared_pages);
  XT_RUN(oom_memory_used_outside_xseg);
  XT_RUN(summary_matches_the_json);
  XT_RUN(json_under_a_decimal_comma_locale);
  XT_RUN(stats_file_at_shutdown);
  free(g_text);
  return XT_DONE();
}
