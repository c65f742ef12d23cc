# Options that follow what is present on the machine (tests: GoogleTest; comm: NCCL).

# weft_auto_option(<var> <doc>): a cache option AUTO (default), ON or OFF.
function(weft_auto_option var doc)
  set(${var} AUTO CACHE STRING "${doc}")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
endfunction()

# weft_resolve_auto(<var> <found> <what> <hint> <out_on> <out_why>): decides an auto option.
# AUTO: ON when <what> was found (<found> true), else OFF; ON (or any true value): <what> must be
# found, else configure stops with <hint>; OFF (or any false value): OFF. <out_on> receives ON or
# OFF, <out_why> the reason, for the configure summary line.
function(weft_resolve_auto var found what hint out_on out_why)
  string(TOUPPER "${${var}}" _v)
  if(_v STREQUAL "AUTO")
    if(found)
      set(_on ON)
      set(_why "${what} found")
    else()
      set(_on OFF)
      set(_why "${what} not found")
    endif()
  elseif(${var})
    if(NOT found)
      message(FATAL_ERROR "weft: ${var}=${${var}} but ${what} was not found: ${hint}")
    endif()
    set(_on ON)
    set(_why "${var}=${${var}}, ${what}")
  else()
    set(_on OFF)
    set(_why "${var}=${${var}}")
  endif()
  set(${out_on} ${_on} PARENT_SCOPE)
  set(${out_why} "${_why}" PARENT_SCOPE)
endfunction()
