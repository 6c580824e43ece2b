# Installs the libraries, headers and a package config so that a program outside the tree can
# find_package(mitra) and link mitra::worker.
include(CMakePackageConfigHelpers)

set(MITRA_INSTALL_TARGETS mitra_common mitra_contract mitra_rendezvous mitra_planner
                          mitra_checkpoint_store)
if(MITRA_WITH_TORCH)
  list(APPEND MITRA_INSTALL_TARGETS mitra_checkpoint mitra_cutpoint mitra_worker)
endif()
install(TARGETS ${MITRA_INSTALL_TARGETS} EXPORT mitraTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The public API is include/mitra/: what a training program includes, as <mitra/<folder>/<name>.h>,
# and what those headers include (they include each other only). Everything else stays inside
# the libraries.
if(MITRA_WITH_TORCH)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mitra DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()
if(TARGET mitra)
  install(TARGETS mitra RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT mitraTargets NAMESPACE mitra:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mitra)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mitraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mitraConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mitra)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mitraConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mitraConfig.cmake ${PROJECT_BINARY_DIR}/mitraConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mitra)
