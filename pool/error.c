/* pool/error.c: per-thread errors (xseg_last_error, xseg_last_error_code).
 *
 * Thread-local, so threads never see each other's messages and setting one
 * costs no lock.  A message is only written on failure: the hot path never
 * touches it.
 */
#include <stdarg.h>
#include <stdio.h>

#include "error.h"
#include "vmm.h"
#include "xseg.h"

static _Thread_local char t_err[1024];
static _Thread_local int t_code;

int xs_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_err, sizeof t_err, fmt, ap);
  va_end(ap);
  t_code = code;
  return code;
}

void xs_error_clear(void) {
  t_err[0] = '\0';
  t_code = 0;
}

int xs_error_vmm(int rc) { return rc == 0 ? 0 : xs_error(rc, "%s", xs_vmm_error()); }

const char *xseg_last_error(void) { return t_err; }
int xseg_last_error_code(void) { return t_code; }
