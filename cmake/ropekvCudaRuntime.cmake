# The CUDA runtime library that ropekv links and passes on to its users,
# chosen by CMake's own convention: CMAKE_CUDA_RUNTIME_LIBRARY (and the
# CUDA_RUNTIME_LIBRARY target property it initialises), Static or Shared, case
# insensitive; unset means Static, CMake's default. A program must link one
# runtime, so ropekv's exported target names the one chosen here
# (CUDA::cudart_static or CUDA::cudart) and its package config exports the
# choice as ropekv_CUDA_RUNTIME_LIBRARY.
#
# Sets ROPEKV_CUDA_RUNTIME (Static|Shared) and ROPEKV_CUDART_TARGET.
if(DEFINED CMAKE_CUDA_RUNTIME_LIBRARY AND NOT CMAKE_CUDA_RUNTIME_LIBRARY STREQUAL "")
  string(TOUPPER "${CMAKE_CUDA_RUNTIME_LIBRARY}" _ropekv_rt)
else()
  set(_ropekv_rt STATIC)
endif()
if(_ropekv_rt STREQUAL "STATIC")
  set(ROPEKV_CUDA_RUNTIME Static)
  set(ROPEKV_CUDART_TARGET CUDA::cudart_static)
elseif(_ropekv_rt STREQUAL "SHARED")
  set(ROPEKV_CUDA_RUNTIME Shared)
  set(ROPEKV_CUDART_TARGET CUDA::cudart)
else()
  # None would leave the runtime to the user, and ropekv's own tests, perf
  # suite and examples without one.
  message(FATAL_ERROR "ropekv: CMAKE_CUDA_RUNTIME_LIBRARY must be Static or Shared for a build "
                      "with ROPEKV_ENABLE_CUDA, got '${CMAKE_CUDA_RUNTIME_LIBRARY}'.")
endif()
unset(_ropekv_rt)
message(STATUS "ropekv: CUDA runtime ${ROPEKV_CUDA_RUNTIME} (${ROPEKV_CUDART_TARGET})")
