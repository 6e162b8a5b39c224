/* test_torch_shim.cc: libxseg_torch.so's entry points raise what PyTorch
 * expects (python/native/xseg_torch.cc), on the host backend. */
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <sys/types.h>

#include "xseg.h"

extern "C" void *xseg_torch_alloc_raising(ssize_t size, int device, xseg_stream_t stream);
extern "C" void xseg_torch_free_raising(void *ptr, ssize_t size, int device, xseg_stream_t stream);

static int checks, failures;
#define CHECK(c, ...)                                      \
  do {                                                     \
    checks++;                                              \
    if (!(c)) {                                            \
      failures++;                                          \
      std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #c); \
      std::fprintf(stderr, __VA_ARGS__);                   \
      std::fputc('\n', stderr);                            \
    }                                                      \
  } while (0)

static const size_t MiB = 1 << 20;

int main() {
  if (xseg_init("backend:host,host_capacity_mb:64") != 0) {
    std::fprintf(stderr, "xseg_init: %s\n", xseg_last_error());
    return 1;
  }
  /* A request that fits: memory, freed through the shim. */
  void *p = xseg_torch_alloc_raising(3 * MiB, 0, nullptr);
  CHECK(p != nullptr, "no memory for 3 MiB");
  std::memset(p, 0x5a, 3 * MiB);
  /* The shim's libxseg is the caller's: it knows the pointer. */
  CHECK(xseg_record_stream(p, reinterpret_cast<xseg_stream_t>(1)) == 0, "%s", xseg_last_error());
  xseg_torch_free_raising(p, 3 * MiB, 0, nullptr);

  /* Zero bytes: NULL and no exception (PyTorch's empty tensors). */
  bool threw = false;
  try {
    CHECK(xseg_torch_alloc_raising(0, 0, nullptr) == nullptr, "0 bytes gave memory");
  } catch (...) {
    threw = true;
  }
  CHECK(!threw, "0 bytes threw");

  /* Out of memory: a runtime_error that says so, and the allocator works on. */
  std::string msg;
  try {
    xseg_torch_alloc_raising(static_cast<ssize_t>(65 * MiB), 0, nullptr);
  } catch (const std::runtime_error &e) {
    msg = e.what();
  }
  CHECK(msg.rfind("CUDA out of memory. ", 0) == 0, "message: '%s'", msg.c_str());
  CHECK(msg.find("xseg: out of memory on device 0") != std::string::npos, "message: '%s'", msg.c_str());
  p = xseg_torch_alloc_raising(static_cast<ssize_t>(32 * MiB), 0, nullptr);
  CHECK(p != nullptr, "no memory for 32 MiB after the failure");
  xseg_torch_free_raising(p, 32 * MiB, 0, nullptr);

  /* A negative size: invalid_argument, naming the size. */
  msg.clear();
  try {
    xseg_torch_alloc_raising(-5, 0, nullptr);
  } catch (const std::invalid_argument &e) {
    msg = e.what();
  }
  CHECK(msg.find("-5") != std::string::npos, "message: '%s'", msg.c_str());

  /* A bad device: an error, not out of memory. */
  msg.clear();
  try {
    xseg_torch_alloc_raising(1024, 7, nullptr);
  } catch (const std::runtime_error &e) {
    msg = e.what();
  }
  CHECK(!msg.empty() && msg.rfind("CUDA out of memory", 0) != 0, "message: '%s'", msg.c_str());

  CHECK(xseg_check_heap(-1) == 0, "%s", xseg_last_error());
  CHECK(xseg_shutdown() == 0, "%s", xseg_last_error());
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures != 0;
}
