# Install rules: `cmake --install build [--prefix DIR]` puts the `sluice`
# program in bin/ (and the libraries it loads on first use,
# libsluice_{curl,xml2,microhttpd,gnutls,rdkafka}.so, in lib/), libsluice_trainer.so (SONAME libsluice_trainer.so.2) in
# lib/, the public headers in include/sluice/, sluice-trainer.pc in
# lib/pkgconfig/ and the CMake package (find_package(sluice), target
# sluice::trainer) in lib/cmake/sluice/. The .pc file and the CMake package
# locate the prefix from their own path, so an installed tree can be moved.
#
# In the Python package's build (scikit-build-core sets SKBUILD) the library
# is installed inside the package next to _native.py, under the name the
# ctypes loader looks for first (a wheel holds no symlinks), and the program
# as sluice/bin/sluice, which the console script `sluice` (python/sluice_cli)
# executes: inside the package, not in the wheel's scripts, so that its
# place relative to the libraries auditwheel vendors (ops/build-wheel) is
# the same in the wheel and once installed.

if(SKBUILD)
  install(FILES $<TARGET_FILE:sluice_trainer_shared> DESTINATION sluice
          RENAME libsluice_trainer.so)
  if(TARGET sluice)
    install(PROGRAMS $<TARGET_FILE:sluice> DESTINATION sluice/bin)
    # the program's libcurl, libxml2, libmicrohttpd, GnuTLS and librdkafka, loaded on first use
    # (src/netlib/netlib.h) from sluice/bin/..: auditwheel vendors what
    # they name in DT_NEEDED
    install(TARGETS ${SLUICE_NETLIB_LIBRARIES} LIBRARY DESTINATION sluice)
  endif()
  return()
endif()

include(CMakePackageConfigHelpers)
set(SLUICE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)

if(TARGET sluice)
  install(TARGETS sluice RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  # loaded on first use from the program's ../lib (src/netlib/netlib.h)
  install(TARGETS ${SLUICE_NETLIB_LIBRARIES} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(TARGETS sluice_trainer_shared EXPORT sluice-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/sluice DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

install(EXPORT sluice-targets NAMESPACE sluice:: FILE sluice-targets.cmake
        DESTINATION ${SLUICE_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/sluice-config.cmake.in
  ${CMAKE_BINARY_DIR}/sluice-config.cmake INSTALL_DESTINATION ${SLUICE_CMAKE_DIR})
# 0.x: a new minor version may change the ABI (and SLUICE_TRAINER_SOVERSION).
write_basic_package_version_file(${CMAKE_BINARY_DIR}/sluice-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/sluice-config.cmake
              ${CMAKE_BINARY_DIR}/sluice-config-version.cmake
        DESTINATION ${SLUICE_CMAKE_DIR})

# prefix=${pcfiledir}/<relative path back to the prefix>: relocatable.
file(RELATIVE_PATH SLUICE_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" SLUICE_PC_TO_PREFIX "${SLUICE_PC_TO_PREFIX}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/sluice-trainer.pc.in
               ${CMAKE_BINARY_DIR}/sluice-trainer.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/sluice-trainer.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
