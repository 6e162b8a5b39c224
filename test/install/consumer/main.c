/* A user's program: allocate through the installed xseg on the host
 * backend and print what happened. */
#include <stdio.h>
#include <string.h>
#include <xseg.h>

int main(void) {
  if (xseg_init("backend:host,host_capacity_mb:64") != 0) {
    fprintf(stderr, "%s\n", xseg_last_error());
    return 1;
  }
  char *p = xseg_malloc(1 << 20, 0, NULL);
  if (!p) {
    fprintf(stderr, "%s\n", xseg_last_error());
    return 1;
  }
  memset(p, 0x5a, 1 << 20);
  int rc = xseg_free(p) || xseg_shutdown();
  printf("xseg %s: allocated and freed 1 MiB (%s)\n", xseg_version(), rc ? "FAILED" : "ok");
  return rc;
}
