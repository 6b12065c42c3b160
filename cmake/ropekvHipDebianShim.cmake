# Debian 12's hipcc/libamdhip64-dev (HIP 5.2.3, clang-15) lays out its CMake
# packages where CMake 3.25's enable_language(HIP) does not look. This shim
# points CMake at them without touching system files. A real ROCm install
# (or an explicit CMAKE_HIP_COMPILER / HIPCXX / CMAKE_HIP_COMPILER_ROCM_ROOT)
# is left alone.
if(NOT CMAKE_HIP_COMPILER AND NOT DEFINED ENV{HIPCXX} AND EXISTS /usr/bin/clang++-15
   AND NOT EXISTS /opt/rocm)
  set(CMAKE_HIP_COMPILER /usr/bin/clang++-15)  # /usr/bin/clang++ is clang 14
endif()
if(NOT CMAKE_LIBRARY_ARCHITECTURE)
  set(CMAKE_LIBRARY_ARCHITECTURE x86_64-linux-gnu)
endif()
set(_ropekv_deb_hip /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake)
if(NOT CMAKE_HIP_COMPILER_ROCM_ROOT AND EXISTS ${_ropekv_deb_hip}/hip-lang
   AND NOT EXISTS /usr/lib/cmake/hip-lang)
  set(_ropekv_shim ${CMAKE_BINARY_DIR}/rocm-root-shim)
  file(MAKE_DIRECTORY ${_ropekv_shim}/lib/cmake)
  foreach(p hip-lang amd_comgr hsa-runtime64 hip)
    if(NOT EXISTS ${_ropekv_shim}/lib/cmake/${p})
      file(CREATE_LINK ${_ropekv_deb_hip}/${p} ${_ropekv_shim}/lib/cmake/${p} SYMBOLIC)
    endif()
  endforeach()
  set(CMAKE_HIP_COMPILER_ROCM_ROOT ${_ropekv_shim})
  list(APPEND CMAKE_PREFIX_PATH ${_ropekv_deb_hip})
  set(ENV{CMAKE_PREFIX_PATH} "${_ropekv_deb_hip}:$ENV{CMAKE_PREFIX_PATH}")
  set(CMAKE_HIP_FLAGS_INIT
      "--rocm-path=/usr --hip-device-lib-path=/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/amdgcn/bitcode")
endif()
