/* test/xtest.h: the minimal test harness shared by every test binary.
 *
 *   XT_TEST(name) { XT_CHECK(x == 1); XT_CHECK_EQ(a, b); }
 *   int main(void) { XT_RUN(name); return XT_DONE(); }
 *
 * A failed check prints file, line, the expression and (for _EQ) both
 * values, and the binary exits non-zero.  XT_REQUIRE returns from the test
 * on failure.  A test that cannot run here (no GPU) exits XT_SKIP (77), the
 * code ctest's SKIP_RETURN_CODE is set to.
 */
#ifndef XSEG_TEST_XTEST_H
#define XSEG_TEST_XTEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XT_SKIP 77

static int xt_failures;
static int xt_checks;

#define XT_CHECK(cond)                                                              \
  do {                                                                              \
    xt_checks++;                                                                    \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
      xt_failures++;                                                                \
    }                                                                               \
  } while (0)

#define XT_CHECK_MSG(cond, ...)                                                     \
  do {                                                                              \
    xt_checks++;                                                                    \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
      fprintf(stderr, __VA_ARGS__);                                                 \
      fputc('\n', stderr);                                                          \
      xt_failures++;                                                                \
    }                                                                               \
  } while (0)

#define XT_CHECK_EQ(a, b)                                                           \
  do {                                                                              \
    xt_checks++;                                                                    \
    unsigned long long xa_ = (unsigned long long)(a), xb_ = (unsigned long long)(b); \
    if (xa_ != xb_) {                                                               \
      fprintf(stderr, "%s:%d: check failed: %s == %s (%llu vs %llu)\n", __FILE__,   \
              __LINE__, #a, #b, xa_, xb_);                                          \
      xt_failures++;                                                                \
    }                                                                               \
  } while (0)

#define XT_REQUIRE(cond)                                                            \
  do {                                                                              \
    xt_checks++;                                                                    \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: requirement failed: %s\n", __FILE__, __LINE__, #cond); \
      xt_failures++;                                                                \
      return;                                                                       \
    }                                                                               \
  } while (0)

#define XT_TEST(name) static void name(void)

#define XT_RUN(name)                                                                \
  do {                                                                              \
    int f0_ = xt_failures;                                                          \
    name();                                                                         \
    printf("%-4s %s\n", f0_ == xt_failures ? "ok" : "FAIL", #name);                 \
    fflush(stdout);                                                                 \
  } while (0)

#define XT_DONE()                                                                   \
  (printf("%d checks, %d failed\n", xt_checks, xt_failures),                        \
   (xt_checks == 0 || xt_failures != 0) ? 1 : 0)

#endif /* XSEG_TEST_XTEST_H */
