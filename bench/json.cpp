#include "json.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace weft::bench {

std::string JsonWriter::escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 2);
  o += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  o += '"';
  return o;
}

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(2 * has_elem_.size(), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {  // the key already placed the separator
    after_key_ = false;
    return;
  }
  if (!has_elem_.empty()) {
    if (has_elem_.back()) out_ += ',';
    has_elem_.back() = true;
    newline();
  }
}

JsonWriter& JsonWriter::key(const std::string& k) {
  if (has_elem_.empty() || after_key_) throw std::logic_error("JsonWriter: key outside an object");
  if (has_elem_.back()) out_ += ',';
  has_elem_.back() = true;
  newline();
  out_ += escape(k);
  out_ += ": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  has_elem_.push_back(false);
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  bool had = has_elem_.back();
  has_elem_.pop_back();
  if (had) newline();
  out_ += '}';
  if (has_elem_.empty()) out_ += '\n';
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  has_elem_.push_back(false);
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  bool had = has_elem_.back();
  has_elem_.pop_back();
  if (had) newline();
  out_ += ']';
  return *this;
}
JsonWriter& JsonWriter::value(const std::string& s) {
  before_value();
  out_ += escape(s);
  return *this;
}
JsonWriter& JsonWriter::value(double d) {
  before_value();
  if (!std::isfinite(d)) {
    out_ += "null";
  } else {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", d);
    out_ += buf;
  }
  return *this;
}
JsonWriter& JsonWriter::value(long long i) {
  before_value();
  out_ += std::to_string(i);
  return *this;
}
JsonWriter& JsonWriter::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
  return *this;
}
JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

}  // namespace weft::bench
