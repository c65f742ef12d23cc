// WEFT_API: marks what libweft.so exports.
//
// libweft.so is compiled with hidden visibility (-fvisibility=hidden, also for nvcc's host
// compiler): nothing is exported unless it says so. Every public header opens its namespace as
//   namespace weft WEFT_API { ... }
// so everything declared in include/weft/ -- classes (with their typeinfo and vtables: a
// weft::Error thrown inside the library is caught by type in the caller), free functions,
// exception types -- is exported, and nothing else is: internal headers (src/) open their
// namespaces plainly, so weft::plan::, weft::decode::, ... stay inside the library.
// A symbol takes the visibility of its first declaration, so the definitions in src/ need no
// annotation. (A namespace attribute, not one per declaration: a function added to a public
// header later is exported without anyone remembering to mark it.)
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define WEFT_API __attribute__((visibility("default")))
#define WEFT_HIDDEN __attribute__((visibility("hidden")))
#else
#define WEFT_API
#define WEFT_HIDDEN
#endif
// WEFT_HIDDEN: a name a public header must declare (a friend of a public class) that stays inside
// the library.
