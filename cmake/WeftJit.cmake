# Run-time compiled variants (include/weft/jit.h, src/jit/): the jit component links NVRTC, and
# the device headers NVRTC compiles against are copied to <build>/include/weft/device (the build
# tree's libweft and test programs find them there, src/jit/paths.cpp) and installed to
# <prefix>/include/weft/device. The copies are configure_file() outputs, so editing a source
# header re-runs the configure step and refreshes them.
function(weft_jit_device_headers)
  if(NOT TARGET weft_jit)
    return()
  endif()
  # The include closure of the decode mainloops, the FA2 prefill kernel and jit/jit_variant.cuh
  # (whole directories: a header added to them later is shipped without a list to update).
  file(GLOB_RECURSE _hdr CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/src
    ${PROJECT_SOURCE_DIR}/src/common/*.h ${PROJECT_SOURCE_DIR}/src/common/*.cuh
    ${PROJECT_SOURCE_DIR}/src/attention/*.h ${PROJECT_SOURCE_DIR}/src/attention/*.cuh
    ${PROJECT_SOURCE_DIR}/src/decode/*.h ${PROJECT_SOURCE_DIR}/src/decode/*.cuh
    ${PROJECT_SOURCE_DIR}/src/paged/*.h ${PROJECT_SOURCE_DIR}/src/paged/*.cuh
    ${PROJECT_SOURCE_DIR}/src/prefill/kernel/*.h ${PROJECT_SOURCE_DIR}/src/prefill/kernel/*.cuh
    ${PROJECT_SOURCE_DIR}/src/jit/*.cuh)
  list(APPEND _hdr prefill/prefill_config.h)
  set(_dst ${WEFT_GENERATED_INCLUDE}/weft/device)
  foreach(h IN LISTS _hdr)
    configure_file(${PROJECT_SOURCE_DIR}/src/${h} ${_dst}/${h} COPYONLY)
  endforeach()
  install(DIRECTORY ${_dst} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/weft)
  # Last resort for the CUDA headers (after Options::cuda_include_dir and the directory next to
  # the loaded libnvrtc): the toolkit this build used.
  list(GET CUDAToolkit_INCLUDE_DIRS 0 _cuda_inc)
  target_compile_definitions(weft_jit PRIVATE WEFT_CUDA_INCLUDE_DIR="${_cuda_inc}")
endfunction()
