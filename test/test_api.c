/* test_api.c: the public contract, as a user sees it (include/xseg.h). */
#include "testutil.h"

XT_TEST(basic_round_trip) {
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  XT_CHECK_EQ(xseg_device_count(), 1);
  void *p = xseg_malloc(1000, 0, NULL);
  XT_REQUIRE(p != NULL);
  XT_CHECK_EQ((uintptr_t)p % 512, 0);
  memset(p, 0x7e, 1000);
  void *q = xseg_malloc(3 * MiB, 0, NULL);
  XT_REQUIRE(q != NULL);
  XT_CHECK_EQ((uintptr_t)q % 512, 0);
  XT_CHECK(q != p);
  memset(q, 0x11, 3 * MiB);
  XT_CHECK_EQ(xseg_free(p), 0);
  XT_CHECK_EQ(xseg_free(q), 0);
  XT_CHECK_EQ(xseg_free(NULL), 0);
  XT_CHECK_EQ(xseg_check_heap(0), 0);
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(size_zero_is_a_unique_block) {
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  void *a = xseg_malloc(0, 0, NULL), *b = xseg_malloc(0, 0, NULL);
  XT_CHECK(a != NULL && b != NULL && a != b);
  XT_CHECK_EQ(t_stat(0, "requested_bytes.all.current"), 0);
  XT_CHECK_EQ(t_stat(0, "allocated_bytes.all.current"), 1024);
  XT_CHECK_EQ(xseg_free(a), 0);
  XT_CHECK_EQ(xseg_free(b), 0);
  /* The PyTorch entry returns NULL for 0, which PyTorch never frees. */
  XT_CHECK(xseg_torch_alloc(0, 0, NULL) == NULL);
  XT_CHECK(xseg_torch_alloc(-5, 0, NULL) == NULL);
  XT_CHECK_EQ(xseg_last_error_code(), XSEG_EINVAL);
  XT_CHECK(strstr(xseg_last_error(), "negative") != NULL);
  void *t = xseg_torch_alloc(4096, 0, NULL);
  XT_CHECK(t != NULL);
  xseg_torch_free(t, 4096, 0, NULL);
  XT_CHECK_EQ(t_stat(0, "allocation.all.current"), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(stats_json_is_snprintf_like) {
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  size_t need = xseg_stats_json(0, NULL, 0);
  XT_CHECK(need > 100);
  char small[16];
  memset(small, 'x', sizeof small);
  XT_CHECK_EQ(xseg_stats_json(0, small, sizeof small), need);
  XT_CHECK_EQ(strlen(small), sizeof small - 1);
  char *big = malloc(need + 1);
  XT_REQUIRE(big);
  XT_CHECK_EQ(xseg_stats_json(0, big, need + 1), need);
  XT_CHECK_EQ(strlen(big), need);
  XT_CHECK(big[0] == '{' && big[need - 1] == '}');
  free(big);
  XT_CHECK_EQ(xseg_stats_json(5, small, sizeof small), 0);
  XT_CHECK_EQ(xseg_last_error_code(), XSEG_ENODEV);
  XT_CHECK(xseg_snapshot_json(0, NULL, 0) > 10);
  char cfg[4096];
  size_t n = xseg_config_describe(cfg, sizeof cfg);
  XT_CHECK(n > 0 && n < sizeof cfg);
  XT_CHECK(strstr(cfg, "backend:host") != NULL);
  XT_CHECK(strstr(cfg, "host_capacity_mb:64") != NULL);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(bad_configuration_allocates_nothing) {
  XT_CHECK_EQ(xseg_init("backend:host,garbage_collection_threshold:1.5"), XSEG_ECONFIG);
  XT_CHECK(strstr(xseg_last_error(), "garbage_collection_threshold") != NULL);
  XT_CHECK(xseg_malloc(100, 0, NULL) == NULL);
  XT_CHECK_EQ(xseg_last_error_code(), XSEG_ECONFIG);
  XT_CHECK(strstr(xseg_last_error(), "garbage_collection_threshold") != NULL);
  XT_CHECK_EQ(xseg_empty_cache(0), XSEG_ECONFIG);
  XT_CHECK(xseg_device_count() < 0);
  /* A valid configuration repairs it. */
  XT_REQUIRE(t_init("host_capacity_mb:16") == 0);
  void *p = xseg_malloc(100, 0, NULL);
  XT_CHECK(p != NULL);
  XT_CHECK_EQ(xseg_free(p), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(init_and_shutdown_refuse_while_busy) {
  XT_REQUIRE(t_init("host_capacity_mb:16") == 0);
  void *p = xseg_malloc(100, 0, NULL);
  XT_REQUIRE(p != NULL);
  XT_CHECK_EQ(xseg_init("backend:host"), XSEG_EBUSY);
  XT_CHECK_EQ(xseg_shutdown(), XSEG_EBUSY);
  memset(p, 1, 100); /* still ours */
  XT_CHECK_EQ(xseg_free(p), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  /* After shutdown, the host backend is gone and nothing leaked. */
  XT_REQUIRE(t_init("host_capacity_mb:16") == 0);
  xs_host_counters_t c = t_counters();
  XT_CHECK_EQ(c.handles_live, 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(devices_and_streams) {
  XT_REQUIRE(t_init("host_capacity_mb:16,host_devices:3") == 0);
  XT_CHECK_EQ(xseg_device_count(), 3);
  void *p[3];
  for (int d = 0; d < 3; d++) {
    p[d] = xseg_malloc(4096, d, (xseg_stream_t)(uintptr_t)(d + 1));
    XT_CHECK(p[d] != NULL);
  }
  XT_CHECK(xseg_malloc(4096, 3, NULL) == NULL);
  XT_CHECK_EQ(xseg_last_error_code(), XSEG_ENODEV);
  XT_CHECK(xseg_malloc(4096, -1, NULL) == NULL);
  XT_CHECK_EQ(t_stat(1, "allocation.all.current"), 1);
  for (int d = 0; d < 3; d++) XT_CHECK_EQ(xseg_free(p[d]), 0); /* found on its own device */
  XT_CHECK_EQ(xseg_check_heap(-1), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

int main(void) {
  XT_RUN(basic_round_trip);
  XT_RUN(size_zero_is_a_unique_block);
  XT_RUN(stats_json_is_snprintf_like);
  XT_RUN(bad_configuration_allocates_nothing);
  XT_RUN(init_and_shutdown_refuse_while_busy);
  XT_RUN(devices_and_streams);
  return XT_DONE();
}
