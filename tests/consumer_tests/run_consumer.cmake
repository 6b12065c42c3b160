# The Consumer.* test command: runs the consumer program EXE and, when
# EXPECT_CUDART is Static or Shared, checks that EXE links exactly that CUDA
# runtime: Static = the runtime's code inside EXE and no libcudart.so needed;
# Shared = libcudart.so needed and none of the runtime's code inside.
#   cmake -DEXE=... [-DEXPECT_CUDART=Static|Shared -DREADELF=... -DNM=...] -P run_consumer.cmake
execute_process(COMMAND "${EXE}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} failed: ${rc}")
endif()
if(NOT EXPECT_CUDART)
  return()
endif()
execute_process(COMMAND "${READELF}" -d "${EXE}" OUTPUT_VARIABLE dyn RESULT_VARIABLE rc1)
execute_process(COMMAND "${NM}" --defined-only "${EXE}" OUTPUT_VARIABLE syms RESULT_VARIABLE rc2)
if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "readelf/nm of ${EXE} failed (${READELF}: ${rc1}, ${NM}: ${rc2})")
endif()
string(REGEX MATCH "NEEDED[^\n]*libcudart[^\n]*" needed "${dyn}")
# A function of the runtime API that ropekv calls: defined in EXE only when
# the static runtime is linked into it.
string(REGEX MATCH "[0-9a-fA-F]+ [Tt] cudaGetDeviceCount\n" inside "${syms}")
message(STATUS "CUDA runtime of ${EXE}: needed shared library: '${needed}'; "
               "static runtime code inside: '${inside}'")
if(EXPECT_CUDART STREQUAL "Static")
  if(needed OR NOT inside)
    message(FATAL_ERROR "expected the static CUDA runtime only")
  endif()
elseif(EXPECT_CUDART STREQUAL "Shared")
  if(NOT needed OR inside)
    message(FATAL_ERROR "expected the shared CUDA runtime only")
  endif()
else()
  message(FATAL_ERROR "EXPECT_CUDART must be Static or Shared, got '${EXPECT_CUDART}'")
endif()
message(STATUS "consumer links the ${EXPECT_CUDART} CUDA runtime only: ok")
