# exports.cmake: libxseg.so exports every contract symbol and does not need
# libcuda at load time.  Run as: cmake -DLIB=<path> -P exports.cmake
set(contract xseg_malloc xseg_free xseg_record_stream xseg_empty_cache xseg_reset_peak_stats
    xseg_stats_json xseg_print_summary xseg_last_error xseg_torch_alloc xseg_torch_free
    xseg_init xseg_shutdown xseg_check_heap xseg_snapshot_json xseg_config_describe
    xseg_device_count xseg_enable_peer_access xseg_version xseg_last_error_code
    xseg_set_memory_fraction
    xseg_device_stats xseg_reset_accumulated_stats xseg_mem_info xseg_cache_info xseg_base_allocation xseg_walk
    xseg_pool_create xseg_pool_release xseg_malloc_in_pool xseg_pool_live xseg_malloc_at xseg_device_active
    xseg_capture_begin xseg_capture_end xseg_ipc_export xseg_ipc_open xseg_ipc_close xseg_config_check
    xseg_configure)
execute_process(COMMAND nm -D --defined-only ${LIB} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIB}")
endif()
foreach(s ${contract})
  if(NOT syms MATCHES " T ${s}\n")
    message(FATAL_ERROR "${LIB} does not export ${s}")
  endif()
endforeach()
# Nothing internal leaks out: every exported text symbol is xseg_*.
string(REGEX MATCHALL " T [A-Za-z_][A-Za-z0-9_]*" exported "${syms}")
foreach(e ${exported})
  string(REPLACE " T " "" e "${e}")
  if(NOT e MATCHES "^xseg_" AND NOT e MATCHES "^_(init|fini)$")
    message(FATAL_ERROR "${LIB} exports an internal symbol: ${e}")
  endif()
endforeach()
execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE dyn)
if(dyn MATCHES "libcuda")
  message(FATAL_ERROR "${LIB} needs libcuda at load time:\n${dyn}")
endif()
message(STATUS "${LIB}: all ${CMAKE_ARGC} contract symbols exported, no libcuda dependency")
