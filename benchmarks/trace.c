/* benchmarks/trace.c: reading traces (docs/metrics.md, "Trace format").
 *
 * `a <id> <bytes> [stream]` allocates, `f <id> [stream]` frees, `#` starts
 * a comment.  Ids may be any non-negative integers; they are mapped to
 * dense slots so a replay keeps its pointers in a flat array.  The reader
 * is strict: a free of an id that is not live, an id allocated twice while
 * live, or a malformed line stops it with the line number.
 *
 * A trace is named on the command line by a path or by the name its tables
 * print (logrand for DIR/logrand.trace), and trace_find says which file
 * that is before anything is measured.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"

typedef struct idmap_s {
  uint64_t *keys; /* id + 1, 0 = empty */
  uint32_t *vals;
  size_t mask, count;
} idmap_t;

static uint32_t *idmap_slot(idmap_t *m, uint64_t id, int create) {
  if (create && (m->count + 1) * 2 > m->mask + 1) {
    size_t n = m->mask ? (m->mask + 1) * 2 : 1024;
    idmap_t nm = {calloc(n, 8), calloc(n, 4), n - 1, 0};
    for (size_t i = 0; m->keys && i <= m->mask; i++) {
      if (!m->keys[i]) continue;
      size_t s = (size_t)(m->keys[i] * 0x9E3779B97F4A7C15ull >> 17) & nm.mask;
      while (nm.keys[s]) s = (s + 1) & nm.mask;
      nm.keys[s] = m->keys[i];
      nm.vals[s] = m->vals[i];
      nm.count++;
    }
    free(m->keys);
    free(m->vals);
    *m = nm;
  }
  if (!m->keys) return NULL;
  uint64_t k = id + 1;
  size_t s = (size_t)(k * 0x9E3779B97F4A7C15ull >> 17) & m->mask;
  while (m->keys[s] && m->keys[s] != k) s = (s + 1) & m->mask;
  if (!m->keys[s]) {
    if (!create) return NULL;
    m->keys[s] = k;
    m->count++;
    m->vals[s] = UINT32_MAX;
  }
  return &m->vals[s];
}

/* One line's event: "a <id> <bytes> [stream]" or "f <id> [stream]";
 * 0, or -1 for a malformed line. */
static int parse_line(const char *p, ev_t *e, unsigned long long *id) {
  char op;
  unsigned long long a = 0, b = 0;
  int n = sscanf(p, "%c %llu %llu %llu", &op, id, &a, &b);
  memset(e, 0, sizeof *e);
  if (op == 'a' && n >= 3) { /* 0 bytes is allowed: xseg_malloc(0) records it */
    e->alloc = 1;
    e->bytes = a;
    e->stream = n >= 4 ? (uint8_t)(b < 255 ? b : 255) : 0;
    return 0;
  }
  if (op == 'f' && n >= 2) {
    e->stream = n >= 3 ? (uint8_t)(a < 255 ? a : 255) : 0;
    return 0;
  }
  return -1;
}

/* What the loader keeps while it reads: ids to dense slots, each slot's
 * state, and the live total for the peak. */
typedef struct loader_s {
  idmap_t ids;
  uint8_t *live;  /* per slot */
  uint64_t *size; /* per slot */
  size_t slotcap, evcap;
  uint64_t cur;
} loader_t;

/* Number event e (its id) and check it against what is live; 0, or -1
 * with a message on stderr. */
static int account(loader_t *L, trace_t *t, ev_t *e, unsigned long long id, const char *path, size_t lineno) {
  uint32_t *slot = idmap_slot(&L->ids, id, e->alloc);
  if (e->alloc) {
    if (!slot) return fprintf(stderr, "xseg-bench: out of memory reading %s\n", path), -1;
    if (*slot == UINT32_MAX) {
      if (t->nslots == L->slotcap) {
        size_t n = L->slotcap ? L->slotcap * 2 : 1024;
        uint8_t *lv = realloc(L->live, n);
        if (lv) L->live = lv;
        uint64_t *sz = realloc(L->size, n * sizeof *sz);
        if (sz) L->size = sz;
        if (!lv || !sz) return fprintf(stderr, "xseg-bench: out of memory reading %s\n", path), -1;
        L->slotcap = n;
      }
      *slot = (uint32_t)t->nslots++;
      L->live[*slot] = 0;
    }
    if (L->live[*slot])
      return fprintf(stderr, "xseg-bench: %s:%zu: id %llu allocated while live\n", path, lineno, id), -1;
    L->live[*slot] = 1;
    L->size[*slot] = e->bytes;
    L->cur += e->bytes;
    if (L->cur > t->peak_live) t->peak_live = L->cur;
    t->allocs++;
  } else {
    if (!slot || *slot == UINT32_MAX || !L->live[*slot])
      return fprintf(stderr, "xseg-bench: %s:%zu: free of id %llu, which is not live\n", path, lineno, id), -1;
    L->live[*slot] = 0;
    L->cur -= L->size[*slot];
    t->frees++;
  }
  e->slot = *slot;
  return 0;
}

static int append(loader_t *L, trace_t *t, const ev_t *e) {
  if (t->nev == L->evcap) {
    size_t n = L->evcap ? L->evcap * 2 : 4096;
    ev_t *v = realloc(t->ev, n * sizeof *v);
    if (!v) return -1;
    t->ev = v;
    L->evcap = n;
  }
  t->ev[t->nev++] = *e;
  if (e->stream + 1 > t->nstreams) t->nstreams = e->stream + 1;
  return 0;
}

int trace_load(const char *path, trace_t *t) {
  memset(t, 0, sizeof *t);
  const char *base = strrchr(path, '/');
  snprintf(t->name, sizeof t->name, "%s", base ? base + 1 : path);
  char *dot = strrchr(t->name, '.');
  if (dot && !strcmp(dot, ".trace")) *dot = 0;
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "xseg-bench: cannot open trace %s: %s\n", path, strerror(errno));
    return -1;
  }
  loader_t L;
  memset(&L, 0, sizeof L);
  char line[256];
  size_t lineno = 0;
  int rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    lineno++;
    /* A line longer than the buffer: the rest of it is read away here.
     * Comments may be that long (a recorded trace's header says how it
     * was made); an event never is. */
    int whole = strchr(line, '\n') != NULL || feof(f);
    if (!whole) {
      int c;
      while ((c = fgetc(f)) != EOF && c != '\n') {
      }
    }
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || *p == '\n' || *p == 0) continue;
    if (!whole) {
      fprintf(stderr, "xseg-bench: %s:%zu: line too long for an event\n", path, lineno);
      rc = -1;
      break;
    }
    ev_t e;
    unsigned long long id = 0;
    if (parse_line(p, &e, &id) != 0) {
      fprintf(stderr, "xseg-bench: %s:%zu: malformed line\n", path, lineno);
      rc = -1;
    } else if (account(&L, t, &e, id, path, lineno) != 0) {
      rc = -1;
    } else if (append(&L, t, &e) != 0) {
      fprintf(stderr, "xseg-bench: out of memory reading %s\n", path);
      rc = -1;
    }
  }
  if (rc == 0 && ferror(f)) { /* a directory, or an I/O error */
    fprintf(stderr, "xseg-bench: cannot read trace %s: %s\n", path, strerror(errno));
    rc = -1;
  }
  fclose(f);
  free(L.ids.keys);
  free(L.ids.vals);
  free(L.live);
  free(L.size);
  if (rc) trace_free(t);
  return rc;
}

void trace_free(trace_t *t) {
  free(t->ev);
  memset(t, 0, sizeof *t);
}

/* 0 if path is there and not a directory, else -1 with errno set. */
static int is_file(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    return -1;
  }
  return 0;
}

int trace_find(const char *arg, const char *dir, char *out, size_t len) {
  if (is_file(arg) == 0) {
    snprintf(out, len, "%s", arg);
    return 0;
  }
  int err = errno;
  /* A bare name, as the tables print it: DIR/NAME.trace, or DIR/NAME. */
  if (err == ENOENT && dir && !strchr(arg, '/')) {
    const char *const fmt[2] = {"%s/%s.trace", "%s/%s"};
    for (int i = 0; i < 2; i++) {
      snprintf(out, len, fmt[i], dir, arg);
      if (is_file(out) == 0) return 0;
      if (errno != ENOENT) {
        fprintf(stderr, "xseg-bench: trace '%s': %s: %s\n", arg, out, strerror(errno));
        return -1;
      }
    }
    fprintf(stderr, "xseg-bench: trace '%s': %s (nor is there %s/%s.trace)\n", arg, strerror(err), dir, arg);
    return -1;
  }
  fprintf(stderr, "xseg-bench: trace '%s': %s\n", arg, strerror(err));
  return -1;
}

void trace_prefix(trace_t *t, size_t nev) {
  if (nev >= t->nev) return;
  uint64_t *size = calloc(t->nslots ? t->nslots : 1, sizeof *size), cur = 0;
  if (!size) return; /* the whole trace, then */
  t->nev = nev;
  t->peak_live = t->allocs = t->frees = 0;
  t->nstreams = 0;
  for (size_t i = 0; i < nev; i++) {
    const ev_t *e = &t->ev[i];
    if (e->alloc) {
      size[e->slot] = e->bytes;
      cur += e->bytes;
      if (cur > t->peak_live) t->peak_live = cur;
      t->allocs++;
    } else {
      cur -= size[e->slot];
      t->frees++;
    }
    if (e->stream + 1 > t->nstreams) t->nstreams = e->stream + 1;
  }
  free(size);
}

int trace_scale(trace_t *t, unsigned k) {
  if (k <= 1) return 0;
  /* Checked first, so that a trace too large is left whole. */
  if (t->peak_live > TRACE_MAX_BYTES / k) {
    fprintf(stderr, "xseg-bench: trace '%s': --scale %u would make its peak of %llu bytes pass %llu\n", t->name, k,
            (unsigned long long)t->peak_live, (unsigned long long)TRACE_MAX_BYTES);
    return -1;
  }
  /* No allocation exceeds the peak, so none passes the bound either. */
  for (size_t i = 0; i < t->nev; i++)
    if (t->ev[i].alloc) t->ev[i].bytes *= k;
  t->peak_live *= k;
  return 0;
}
