# Install libmgs, its header, the launcher and tools, and export a CMake
# package (find_package(mgs) -> mgs::mgs) plus a pkg-config file.
include(CMakePackageConfigHelpers)

install(TARGETS mgs EXPORT mgsTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mgs)
install(EXPORT mgsTargets NAMESPACE mgs:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mgs)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mgsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mgsConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mgs)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mgsConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mgsConfig.cmake ${PROJECT_BINARY_DIR}/mgsConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mgs)

# pkg-config: the prefix is written relative to the .pc file's own folder
# (${pcfiledir}), so it is right wherever the tree is installed, including
# `cmake --install --prefix X` after a configure with another prefix.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(MGS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH mgs_pc_up "/mgs-prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/mgs-prefix")
  string(REGEX REPLACE "/$" "" mgs_pc_up "${mgs_pc_up}")
  set(MGS_PC_PREFIX "\${pcfiledir}/${mgs_pc_up}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/mgs.pc.in ${PROJECT_BINARY_DIR}/mgs.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/mgs.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
