// A tiny streaming JSON writer (no dependencies): objects, arrays, strings, numbers, bools, null.
// Non-finite numbers are written as null (JSON has no NaN/Inf).
#pragma once
#include <string>
#include <vector>

namespace weft::bench {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(const std::string& k);  // inside an object, before each value
  JsonWriter& value(const std::string& s);
  JsonWriter& value(const char* s) { return value(std::string(s)); }
  JsonWriter& value(double d);
  JsonWriter& value(long long i);
  JsonWriter& value(int i) { return value(static_cast<long long>(i)); }
  JsonWriter& value(bool b);
  JsonWriter& null();
  const std::string& str() const { return out_; }

  static std::string escape(const std::string& s);

 private:
  void before_value();
  void newline();
  std::string out_;
  // One entry per open container: true once it has a first element.
  std::vector<bool> has_elem_;
  bool after_key_ = false;
};

}  // namespace weft::bench
