/* pool/trace.c: the trace recorder (trace_file:PATH).
 *
 * Every allocation and free is written in the format the replay benchmark
 * reads (docs/metrics.md, "Trace format"): `a <id> <bytes> [stream]`,
 * `f <id> [stream]`, one event a line.  Ids number allocations in order;
 * streams are numbered in order of first use, 0 for the default stream.
 * Lines go to a 256 KiB buffer under one lock and reach the file when the
 * buffer fills, on xseg_shutdown and at exit, so the hot path pays a lock,
 * a little formatting and no system call (xseg-bench latency reports it).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "trace.h"

#define TRACE_BUF (256u << 10)
#define TRACE_STREAMS 256

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_fp;
static char trace_buf[TRACE_BUF];
static size_t trace_len;
static uint64_t trace_ids;
static xseg_stream_t trace_streams[TRACE_STREAMS]; /* index + 1 = the stream's number */
static int trace_nstreams;

int xs_trace_open(const char *path) {
  pthread_mutex_lock(&trace_lock);
  int rc = 0;
  if (!trace_fp) {
    trace_fp = fopen(path, "w");
    if (!trace_fp) {
      rc = xs_error(XSEG_ECONFIG, "xseg: trace_file: cannot open '%s': %s", path, strerror(errno));
    } else {
      trace_len = 0;
      trace_ids = 0;
      trace_nstreams = 0;
      fprintf(trace_fp, "# xseg trace: a <id> <bytes> [stream] | f <id> [stream]\n");
    }
  }
  pthread_mutex_unlock(&trace_lock);
  return rc;
}

static void flush_locked(void) {
  if (trace_fp && trace_len) fwrite(trace_buf, 1, trace_len, trace_fp);
  trace_len = 0;
}

static int stream_number(xseg_stream_t s) {
  if (s == NULL) return 0;
  for (int i = 0; i < trace_nstreams; i++)
    if (trace_streams[i] == s) return i + 1;
  if (trace_nstreams == TRACE_STREAMS) return TRACE_STREAMS; /* more streams share the last number */
  trace_streams[trace_nstreams++] = s;
  return trace_nstreams;
}

uint64_t xs_trace_next_id(void) { return __atomic_add_fetch(&trace_ids, 1, __ATOMIC_RELAXED); }

/* " <v>" in decimal at p; returns the end.  (snprintf cost ~150 ns a line,
 * this a few.) */
static char *put_u64(char *p, uint64_t v) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  *p++ = ' ';
  while (n) *p++ = tmp[--n];
  return p;
}

void xs_trace_alloc(uint64_t id, size_t bytes, int dev, xseg_stream_t s) {
  (void)dev;
  pthread_mutex_lock(&trace_lock);
  if (trace_fp) {
    if (TRACE_BUF - trace_len < 80) flush_locked();
    char *p = trace_buf + trace_len;
    *p++ = 'a';
    p = put_u64(p, id);
    p = put_u64(p, bytes);
    int n = stream_number(s);
    if (n) p = put_u64(p, (uint64_t)n);
    *p++ = '\n';
    trace_len = (size_t)(p - trace_buf);
  }
  pthread_mutex_unlock(&trace_lock);
}

void xs_trace_free(uint64_t id, int dev) {
  (void)dev;
  pthread_mutex_lock(&trace_lock);
  if (trace_fp) {
    if (TRACE_BUF - trace_len < 80) flush_locked();
    char *p = trace_buf + trace_len;
    *p++ = 'f';
    p = put_u64(p, id);
    *p++ = '\n';
    trace_len = (size_t)(p - trace_buf);
  }
  pthread_mutex_unlock(&trace_lock);
}

void xs_trace_flush(void) {
  pthread_mutex_lock(&trace_lock);
  flush_locked();
  if (trace_fp) fflush(trace_fp);
  pthread_mutex_unlock(&trace_lock);
}

void xs_trace_close(void) {
  pthread_mutex_lock(&trace_lock);
  flush_locked();
  if (trace_fp) fclose(trace_fp);
  trace_fp = NULL;
  pthread_mutex_unlock(&trace_lock);
}
