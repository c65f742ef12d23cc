# weft_component(<name> [DEPENDS <components>...] [LIBS <link libs>...])
# Builds src/<name>/**.{cpp,cu} as OBJECT library weft_<name>. Tests of a component link only
# its own objects and those of its dependencies, so one component's build break never blocks
# another's tests.
set(WEFT_COMPONENTS "" CACHE INTERNAL "")
# Generated public headers (weft/config.h) live here; every component and libweft see them.
set(WEFT_GENERATED_INCLUDE ${PROJECT_BINARY_DIR}/include)
# Generated internal sources and headers (the kernel instances, cmake/WeftInstances.cmake): every
# component sees them too, none is installed.
set(WEFT_GENERATED_SRC ${PROJECT_BINARY_DIR}/generated)

# weft_hide_symbols(<target>): nothing the target compiles is exported unless declared with
# WEFT_API (include/weft/export.h: everything in include/weft/). Set on every component's
# objects, since those are what libweft.so is linked from.
function(weft_hide_symbols target)
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  # CMake forwards CUDA_VISIBILITY_PRESET to nvcc's host compiler (-Xcompiler=-fvisibility=hidden)
  # but has no CUDA flag for VISIBILITY_INLINES_HIDDEN: pass it through ourselves.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fvisibility-inlines-hidden>)
endfunction()
function(weft_component name)
  cmake_parse_arguments(A "" "" "DEPENDS;LIBS" ${ARGN})
  # Families can be switched off at configure time: -DWEFT_DISABLE="prefill;comm".
  # A component whose dependency is off is off too.
  if(name IN_LIST WEFT_DISABLE)
    message(STATUS "weft: component ${name} disabled")
    return()
  endif()
  foreach(d IN LISTS A_DEPENDS)
    if(NOT TARGET weft_${d})
      message(STATUS "weft: component ${name} disabled (needs ${d})")
      return()
    endif()
  endforeach()
  file(GLOB_RECURSE _src CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp ${PROJECT_SOURCE_DIR}/src/${name}/*.cu)
  if(NOT _src)  # a component with no sources yet still links (keeps the list of components fixed)
    set(_src ${PROJECT_BINARY_DIR}/weft_empty_${name}.cpp)
    file(WRITE ${_src} "// component ${name}: no sources yet\n")
  endif()
  add_library(weft_${name} OBJECT ${_src})
  target_include_directories(weft_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include ${WEFT_GENERATED_INCLUDE}
    ${PROJECT_SOURCE_DIR}/src ${WEFT_GENERATED_SRC})
  weft_hide_symbols(weft_${name})
  target_link_libraries(weft_${name} PUBLIC CUDA::cudart ${A_LIBS})
  target_compile_options(weft_${name} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${WEFT_CUDA_FLAGS}>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(WEFT_ENABLE_MULTIMEM)
    target_compile_definitions(weft_${name} PRIVATE WEFT_ENABLE_MULTIMEM=1)
  endif()
  set(_closure ${name})
  set(_libs ${A_LIBS})
  foreach(d IN LISTS A_DEPENDS)
    get_target_property(_dc weft_${d} WEFT_CLOSURE)
    get_target_property(_dl weft_${d} WEFT_LINK_LIBS)
    list(APPEND _closure ${_dc})
    if(_dl)
      list(APPEND _libs ${_dl})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _closure)
  if(_libs)
    list(REMOVE_DUPLICATES _libs)
  endif()
  set_target_properties(weft_${name} PROPERTIES WEFT_CLOSURE "${_closure}" WEFT_LINK_LIBS "${_libs}")
  set(WEFT_COMPONENTS ${WEFT_COMPONENTS} ${name} CACHE INTERNAL "")
endfunction()

# weft_link_component(<target> <component>...): objects (and link libraries) of the components
# and all they depend on. For programs that use weft's internals (tests, weft-bench): libweft.so
# exports the public API only.
function(weft_link_component target)
  set(_closure)
  set(_libs)
  foreach(name IN LISTS ARGN)
    get_target_property(_c weft_${name} WEFT_CLOSURE)
    get_target_property(_l weft_${name} WEFT_LINK_LIBS)
    list(APPEND _closure ${_c})
    if(_l)
      list(APPEND _libs ${_l})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _closure)  # each object once, however many components share it
  foreach(c IN LISTS _closure)
    # Linking an OBJECT library adds its objects to the target (not transitively: hence the closure).
    target_link_libraries(${target} PRIVATE weft_${c})
  endforeach()
  target_link_libraries(${target} PRIVATE CUDA::cudart ${_libs})
endfunction()
