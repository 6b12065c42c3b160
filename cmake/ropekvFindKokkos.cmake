# find_package(Kokkos), with the repair that Debian's libtrilinos-kokkos-dev
# needs: its Kokkos::kokkos target points at the missing /usr/lib/include.
# Kokkos's package config forces CMAKE_CXX_EXTENSIONS OFF in the caller's scope
# (with a warning when it was unset); set it first so that a consumer of
# ropekv's package sees no warning about a setting it did not make.
if(NOT DEFINED CMAKE_CXX_EXTENSIONS)
  set(CMAKE_CXX_EXTENSIONS OFF)
endif()
if(ROPEKV_FIND_AS_DEPENDENCY)  # from ropekvConfig.cmake: report "not found", don't stop
  include(CMakeFindDependencyMacro)
  find_dependency(Kokkos)
else()
  find_package(Kokkos REQUIRED)
endif()
if(TARGET Kokkos::kokkos AND NOT EXISTS "/usr/lib/include" AND Kokkos_INCLUDE_DIRS)
  get_target_property(_ropekv_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  if(_ropekv_kk_inc MATCHES "/usr/lib/include")
    get_filename_component(_ropekv_kk_real "${Kokkos_INCLUDE_DIRS}" REALPATH)
    set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_ropekv_kk_real}")
  endif()
endif()
