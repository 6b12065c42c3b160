# find_package(Kokkos), with the repair that Debian's libtrilinos-kokkos-dev
# needs: its Kokkos::kokkos target points at the missing /usr/lib/include.
find_package(Kokkos REQUIRED)
if(TARGET Kokkos::kokkos AND NOT EXISTS "/usr/lib/include" AND Kokkos_INCLUDE_DIRS)
  get_target_property(_ropekv_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  if(_ropekv_kk_inc MATCHES "/usr/lib/include")
    get_filename_component(_ropekv_kk_real "${Kokkos_INCLUDE_DIRS}" REALPATH)
    set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_ropekv_kk_real}")
  endif()
endif()
