# FindNCCL: NCCL's headers and library, from the CUDA toolkit directory, $NCCL_HOME or the system.
# A standard find module (so -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=ON makes NCCL absent, and the
# version / component checks are find_package's own). Used by weft's build and, installed next
# to weftConfig.cmake, by weft's consumers (comm.h includes nccl.h).
#
#   find_package(NCCL [<version>] [COMPONENTS device] [QUIET] [REQUIRED])
#
# Component `device`: NCCL's device API (nccl_device.h: symmetric windows, LSA, ncclDevComm),
# which weft's comm kernels need (NCCL 2.28+). Results: NCCL_FOUND, NCCL_VERSION,
# NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_device_FOUND, and the imported target NCCL::nccl.
# Reads CUDAToolkit_INCLUDE_DIRS / CUDAToolkit_LIBRARY_DIR when find_package(CUDAToolkit) ran.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

unset(NCCL_VERSION)
set(NCCL_device_FOUND FALSE)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${_part} +([0-9]+).*" "\\1" _nccl_${_part} "${_nccl_v}")
  endforeach()
  set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
  if(EXISTS "${NCCL_INCLUDE_DIR}/nccl_device.h")
    set(NCCL_device_FOUND TRUE)
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION
  HANDLE_COMPONENTS)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
