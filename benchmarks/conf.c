/* benchmarks/conf.c: the configuration of every xseg run xseg-bench makes.
 *
 * The library reads XSEG_ALLOC_CONF only when xseg_init is given no string,
 * and the bench must give one: each run picks its backend, and some runs
 * their budget or pool.  So the bench merges the configuration itself, key
 * by key, each layer replacing the keys of the layers below it:
 *
 *   CONF_BENCH     the bench's defaults (backend, host_capacity_mb:16384)
 *   CONF_DEFAULT   a section's defaults (replay: room to spare)
 *   CONF_ENV       XSEG_ALLOC_CONF
 *   CONF_OPTION    --conf, in the order given
 *   CONF_BACKEND   --backend
 *   CONF_SECTION   what a section measures (frag's budget and pool,
 *                  timeline's pool, latency's traced run)
 *
 * The user's texts are checked with the library's own parser before
 * anything runs, so a bad one stops the bench with the message the library
 * would print, naming the text it came from, and the merge below only ever
 * sees well-formed text.  A pair is split at its first ':' and pairs at
 * commas outside brackets, so roundup_power2_divisions:[256:1,>:8] stays
 * one value.  Spaces are dropped, as the parser drops them.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "config.h" /* xs_config_parse: the library's parser, for its messages */

static const char *const src_names[CONF__COUNT] = {"xseg-bench", "section default", "XSEG_ALLOC_CONF",
                                                   "--conf",     "--backend",       "section"};

const char *conf_source_name(int src) { return src >= 0 && src < CONF__COUNT ? src_names[src] : "?"; }

int conf_check(const char *text, const char *origin) {
  xs_config_t c;
  char err[768];
  xs_config_defaults(&c);
  if (xs_config_parse(&c, text, XS_SRC_API, origin, err, sizeof err) == 0) return 0;
  fprintf(stderr, "xseg: %s\n", err); /* as the library words it (pool/api.c) */
  return -1;
}

static conf_pair_t *find(const conf_t *c, const char *key) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->kv[i].key, key)) return (conf_pair_t *)&c->kv[i];
  return NULL;
}

const char *conf_get(const conf_t *c, const char *key, int *src) {
  conf_pair_t *p = find(c, key);
  if (p && src) *src = p->src;
  return p ? p->val : NULL;
}

int conf_set(conf_t *c, const char *key, size_t klen, const char *val, size_t vlen, int src) {
  char k[CONF_KEY_MAX];
  if (klen >= sizeof k) return -1;
  memcpy(k, key, klen);
  k[klen] = 0;
  conf_pair_t *p = find(c, k);
  if (p && p->src > src) return 0; /* a higher layer already set it */
  if (!p) {
    if (c->n == CONF_MAX_PAIRS) return -1;
    p = &c->kv[c->n++];
    memcpy(p->key, k, klen + 1);
    p->val = NULL;
  }
  char *v = malloc(vlen + 1);
  if (!v) return -1;
  memcpy(v, val, vlen);
  v[vlen] = 0;
  free(p->val);
  p->val = v;
  p->src = src;
  return 0;
}

int conf_add(conf_t *c, const char *text, int src) {
  if (!text) return 0;
  size_t n = strlen(text);
  char *buf = malloc(n + 1); /* the text without spaces */
  if (!buf) return -1;
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (!strchr(" \t\n\r\f\v", text[i])) buf[m++] = text[i];
  buf[m] = 0;
  int rc = 0;
  for (size_t i = 0; i < m && rc == 0;) {
    size_t j = i;
    int depth = 0;
    while (j < m && (buf[j] != ',' || depth > 0)) {
      depth += (buf[j] == '[') - (buf[j] == ']');
      j++;
    }
    if (j > i) { /* "a:1,,b:2" has no empty pair once checked; a trailing ',' leaves one */
      const char *colon = memchr(buf + i, ':', j - i);
      size_t klen = colon ? (size_t)(colon - (buf + i)) : j - i;
      const char *v = colon ? colon + 1 : buf + j;
      rc = conf_set(c, buf + i, klen, v, (size_t)(buf + j - v), src);
    }
    i = j + 1;
  }
  free(buf);
  return rc;
}

int conf_copy(conf_t *dst, const conf_t *src) {
  memset(dst, 0, sizeof *dst);
  for (int i = 0; i < src->n; i++) {
    const conf_pair_t *p = &src->kv[i];
    if (conf_set(dst, p->key, strlen(p->key), p->val, strlen(p->val), p->src) != 0) return -1;
  }
  return 0;
}

void conf_free(conf_t *c) {
  for (int i = 0; i < c->n; i++) free(c->kv[i].val);
  memset(c, 0, sizeof *c);
}

/* key:value,key:value (sources: 0), or for people, layer by layer,
 * key:value (source), key:value (source) (sources: 1); snprintf-like. */
static size_t write_pairs(const conf_t *c, char *buf, size_t len, int sources) {
  size_t pos = 0;
  if (len) buf[0] = 0;
  for (int layer = 0; layer < (sources ? CONF__COUNT : 1); layer++)
    for (int i = 0; i < c->n; i++) {
      const conf_pair_t *p = &c->kv[i];
      if (sources && p->src != layer) continue;
      size_t room = pos < len ? len - pos : 0;
      int w = sources ? snprintf(room ? buf + pos : NULL, room, "%s%s:%s (%s)", pos ? ", " : "", p->key, p->val,
                                 src_names[p->src])
                      : snprintf(room ? buf + pos : NULL, room, "%s%s:%s", pos ? "," : "", p->key, p->val);
      if (w > 0) pos += (size_t)w;
    }
  return pos;
}

size_t conf_text(const conf_t *c, char *buf, size_t len) { return write_pairs(c, buf, len, 0); }
size_t conf_describe(const conf_t *c, char *buf, size_t len) { return write_pairs(c, buf, len, 1); }

int conf_run_text(const conf_t *base, const char *defaults, const char *forced, char **out) {
  conf_t r;
  *out = NULL;
  int rc = conf_copy(&r, base);
  if (rc == 0) rc = conf_add(&r, defaults, CONF_DEFAULT);
  if (rc == 0) rc = conf_add(&r, forced, CONF_SECTION);
  if (rc == 0) {
    size_t need = conf_text(&r, NULL, 0) + 1;
    *out = malloc(need);
    if (*out) conf_text(&r, *out, need);
    else rc = -1;
  }
  conf_free(&r);
  return rc;
}

int bench_init(const char *conf) {
  int rc = xseg_init(conf);
  /* The library prints its own initialisation failures to stderr, once
   * (docs/guarantees.md); only "still busy" is left for the caller to say.
   * Printing xseg_last_error() here as well is what made every error of
   * --conf appear twice. */
  if (rc == XSEG_EBUSY) fprintf(stderr, "xseg-bench: %s\n", xseg_last_error());
  if (rc == 0) bench_model_on();
  return rc;
}
