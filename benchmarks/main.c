/* benchmarks/main.c: xseg-bench, the command line (docs/benchmarks.md). */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

FILE *g_json;

static int cmd_frag(const opts_t *o, int argc, char **argv) {
  const char *modes[2][2] = {{"expandable", "expandable_segments:True"}, {"binned", "expandable_segments:False"}};
  printf("%-18s %9s %8s | %-10s %9s %8s %8s\n", "trace", "events", "peak MiB", "mode", "budget", "overhead",
         "replays");
  for (int i = 0; i < argc; i++) {
    trace_t t;
    if (trace_load(argv[i], &t) != 0) return 1;
    for (int m = 0; m < 2; m++) {
      char conf[512];
      snprintf(conf, sizeof conf, "%s%s%s", modes[m][1], o->extra ? "," : "", o->extra ? o->extra : "");
      int replays = 0;
      double t0 = now_s();
      size_t mb = min_budget_mb(&t, conf, 2, &replays);
      double dt = now_s() - t0;
      double peak_mb = (double)t.peak_live / (1 << 20);
      printf("%-18s %9zu %8.0f | %-10s %9zu %8.4f %8d  (%.1fs)\n", t.name, t.nev, peak_mb, modes[m][0], mb,
             mb ? (double)mb / peak_mb : 0.0, replays, dt);
      fflush(stdout);
    }
    trace_free(&t);
  }
  return 0;
}

static int cmd_replay(const opts_t *o, int argc, char **argv) {
  if (argc < 1) {
    fprintf(stderr, "xseg-bench replay TRACE\n");
    return 2;
  }
  trace_t t;
  if (trace_load(argv[0], &t) != 0) return 1;
  char conf[512];
  snprintf(conf, sizeof conf, "%s%s%s", o->host ? "backend:host,host_capacity_mb:65536" : "", o->extra && o->host ? "," : "",
           o->extra ? o->extra : "");
  if (xseg_init(conf) != 0) {
    fprintf(stderr, "%s\n", xseg_last_error());
    return 1;
  }
  void **ptr = calloc(t.nslots, sizeof *ptr);
  size_t fails = 0;
  double t0 = now_s();
  for (size_t i = 0; i < t.nev; i++) {
    const ev_t *e = &t.ev[i];
    if (e->alloc) {
      ptr[e->slot] = xseg_malloc(e->bytes, 0, (xseg_stream_t)(uintptr_t)e->stream);
      fails += !ptr[e->slot];
    } else if (ptr[e->slot]) {
      xseg_free(ptr[e->slot]);
      ptr[e->slot] = NULL;
    }
  }
  double dt = now_s() - t0;
  printf("replayed %s: %zu events in %.3f s (%.0f ns/event), %zu failed allocations, peak live %.1f MiB\n", t.name,
         t.nev, dt, dt * 1e9 / (double)t.nev, fails, (double)t.peak_live / (1 << 20));
  xseg_print_summary(0, stdout);
  static char json[1 << 16];
  xseg_stats_json(0, json, sizeof json);
  printf("%s\n", json);
  for (size_t s = 0; s < t.nslots; s++)
    if (ptr[s]) xseg_free(ptr[s]);
  free(ptr);
  xseg_shutdown();
  trace_free(&t);
  return fails ? 1 : 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: xseg-bench [--backend host|cuda] [--quick] [--json FILE] [--conf K:V,...] COMMAND [ARGS]\n"
          "  frag TRACE...   min-budget overhead by bisection (host backend)\n"
          "  replay TRACE    replay a trace and print the statistics\n");
}

int main(int argc, char **argv) {
  opts_t o = {1, 0, NULL, NULL};
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
      o.host = !strcmp(argv[++i], "host");
    } else if (!strcmp(argv[i], "--quick")) {
      o.quick = 1;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
      o.json = argv[++i];
    } else if (!strcmp(argv[i], "--conf") && i + 1 < argc) {
      o.extra = argv[++i];
    } else {
      usage();
      return 2;
    }
  }
  if (i >= argc) {
    usage();
    return 2;
  }
  const char *cmd = argv[i++];
  if (!strcmp(cmd, "frag")) return cmd_frag(&o, argc - i, argv + i);
  if (!strcmp(cmd, "replay")) return cmd_replay(&o, argc - i, argv + i);
  usage();
  return 2;
}

void json_begin(const char *section) { (void)section; }
void json_end(void) {}
