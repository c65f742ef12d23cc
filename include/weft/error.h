// weft::Error: every rejected call throws it, before any kernel is launched, and its message
// names the offending argument and what was expected.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

#include "weft/export.h"

namespace weft WEFT_API {

class Error : public std::runtime_error {
 public:
  // `argument` is the name of the offending argument as the caller knows it ("kv_indptr",
  // "q.shape[1]", ...) or a subsystem ("CUDA", "NCCL") for failures not caused by input.
  Error(std::string argument, const std::string& what)
      : std::runtime_error(argument + ": " + what), argument_(std::move(argument)) {}
  const std::string& argument() const noexcept { return argument_; }

 private:
  std::string argument_;
};

}  // namespace weft

// WEFT_CHECK_ARG(cond, "arg", "expected ... got " << x): throw weft::Error naming "arg".
#define WEFT_CHECK_ARG(cond, arg, stream_expr)                 \
  do {                                                         \
    if (!(cond)) {                                             \
      std::ostringstream weft_check_os_;                       \
      weft_check_os_ << stream_expr;                           \
      throw ::weft::Error((arg), weft_check_os_.str());        \
    }                                                          \
  } while (0)
