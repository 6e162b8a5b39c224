# xsegPkgConfig.cmake: writes xseg.pc, relocatable.
#
# The .pc file names its prefix relative to where it is installed
# (${pcfiledir}, which pkg-config and pkgconf both set), not the prefix
# given at configure time, so `cmake --install build --prefix X` (or a
# package built with DESTDIR and unpacked elsewhere) gives flags that point
# into X.  The .pc lies in LIBDIR/pkgconfig, so the prefix is one `..` for
# pkgconfig plus one per component of LIBDIR (lib: ../..; lib/x86_64-linux-gnu:
# ../../..).  An absolute LIBDIR or INCLUDEDIR is used as given: there is
# nothing to be relative to.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(XSEG_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(XSEG_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH xseg_pc_up "/xseg-root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/xseg-root")
  string(REGEX REPLACE "/$" "" xseg_pc_up "${xseg_pc_up}") # ../../ -> ../..
  set(XSEG_PC_PREFIX "\${pcfiledir}/${xseg_pc_up}")
  set(XSEG_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(XSEG_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(XSEG_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/xseg.pc.in ${PROJECT_BINARY_DIR}/xseg.pc @ONLY)
