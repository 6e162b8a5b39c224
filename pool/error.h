/* pool/error.h: the calling thread's last error (xseg_last_error).
 *
 * Every public function that fails leaves a message here that names the
 * problem; the physical layer keeps its own (vmm/vmm.h: xs_vmm_error), which
 * xs_error_vmm turns into this one where the allocator gives up on a call.
 */
#ifndef XSEG_POOL_ERROR_H
#define XSEG_POOL_ERROR_H

/* Set the calling thread's error and return `code`. */
int xs_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void xs_error_clear(void);
/* rc from a vmm/ call: 0 stays 0; otherwise the vmm's message becomes the
 * thread's error, and rc is returned. */
int xs_error_vmm(int rc);

#endif /* XSEG_POOL_ERROR_H */
