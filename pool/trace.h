/* pool/trace.h: the trace recorder (trace_file:PATH), pool/trace.c. */
#ifndef XSEG_POOL_TRACE_H
#define XSEG_POOL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "xseg.h"

int xs_trace_open(const char *path); /* 0 or an error with message */
uint64_t xs_trace_next_id(void);
void xs_trace_alloc(uint64_t id, size_t bytes, int dev, xseg_stream_t s);
void xs_trace_free(uint64_t id, int dev);
void xs_trace_flush(void);
void xs_trace_close(void);

#endif /* XSEG_POOL_TRACE_H */
