# install/run.cmake: install xseg into a scratch prefix, then build and run
# a tiny consumer twice, as users do: a CMake project with find_package(xseg)
# linking xseg::xseg, and the same program compiled with the flags of
# `pkg-config --cflags --libs xseg`.
#
# The scratch prefix is not the configured CMAKE_INSTALL_PREFIX, so the
# package must find itself where it was put: a .pc file that names the
# configure-time prefix gives flags outside the scratch prefix, which fails
# here (and, with nothing installed there, would not compile either).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

# What the build was configured with: the prefix to differ from, the compiler.
file(STRINGS ${XSEG_BINARY_DIR}/CMakeCache.txt configured_prefix REGEX "^CMAKE_INSTALL_PREFIX:")
string(REGEX REPLACE "^[^=]*=" "" configured_prefix "${configured_prefix}")
file(STRINGS ${XSEG_BINARY_DIR}/CMakeCache.txt cc REGEX "^CMAKE_C_COMPILER:")
string(REGEX REPLACE "^[^=]*=" "" cc "${cc}")
get_filename_component(real_prefix ${prefix} REALPATH)
if(configured_prefix STREQUAL prefix OR configured_prefix STREQUAL real_prefix)
  message(FATAL_ERROR "the scratch prefix ${prefix} is the configured one; it must differ")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} --install ${XSEG_BINARY_DIR} --prefix ${prefix}
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed")
endif()

# 1. find_package(xseg)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${XSEG_SOURCE_DIR}/test/install/consumer -B ${WORK_DIR}/build
  -DCMAKE_PREFIX_PATH=${prefix} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer project did not configure against the installed package")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer project did not build")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "consumer (find_package): ${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer failed (${rc})")
endif()

# 2. pkg-config, where it exists (.ci/run installs it).
find_program(PKGCONF pkg-config)
if(NOT PKGCONF)
  message(STATUS "no pkg-config here: the .pc file is not checked")
  return()
endif()
file(GLOB pcdir ${prefix}/lib*/pkgconfig ${prefix}/lib*/*/pkgconfig)
if(NOT pcdir)
  message(FATAL_ERROR "no pkgconfig directory under ${prefix}")
endif()
# Only the scratch prefix: an xseg.pc installed on the system must not answer.
set(ENV{PKG_CONFIG_PATH} "${pcdir}")
set(ENV{PKG_CONFIG_LIBDIR} "${pcdir}")
execute_process(COMMAND ${PKGCONF} --cflags --libs xseg OUTPUT_VARIABLE flags RESULT_VARIABLE rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
message(STATUS "pkg-config --cflags --libs xseg: ${flags}")
if(NOT rc EQUAL 0 OR NOT flags MATCHES "-lxseg")
  message(FATAL_ERROR "pkg-config xseg failed: '${flags}'")
endif()
separate_arguments(flag_list UNIX_COMMAND "${flags}")
set(dirs 0)
set(libdir "")
foreach(f ${flag_list})
  if(f MATCHES "^-[IL](.+)$")
    get_filename_component(d "${CMAKE_MATCH_1}" REALPATH)
    string(FIND "${d}/" "${real_prefix}/" at)
    if(NOT at EQUAL 0)
      message(FATAL_ERROR "pkg-config flag ${f} points outside the install prefix ${prefix} (${d})")
    endif()
    if(NOT IS_DIRECTORY "${d}")
      message(FATAL_ERROR "pkg-config flag ${f} names no directory")
    endif()
    math(EXPR dirs "${dirs} + 1")
    if(f MATCHES "^-L")
      set(libdir "${d}")
    endif()
  endif()
endforeach()
if(NOT dirs EQUAL 2)
  message(FATAL_ERROR "pkg-config should give one -I and one -L into ${prefix}: '${flags}'")
endif()
execute_process(COMMAND ${cc} ${XSEG_SOURCE_DIR}/test/install/consumer/main.c ${flag_list}
  -o ${WORK_DIR}/consumer-pc RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer did not build with pkg-config's flags: ${err}")
endif()
set(ENV{LD_LIBRARY_PATH} "${libdir}")
execute_process(COMMAND ${WORK_DIR}/consumer-pc RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "consumer (pkg-config): ${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer built with pkg-config's flags failed (${rc})")
endif()
