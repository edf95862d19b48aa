#include "plait/option_reader.h"

#include <charconv>
#include <cmath>

#include "core/config.h"
#include "plait/error.h"

namespace plait::cli {

bool OptionReader::next() {
  const size_t at = started_ ? last_ + 1 : 0;
  started_ = true;
  if (at >= args_.size()) {
    first_ = last_ = args_.size() - 1;  // nothing more: keeps arg() in range for messages
    return false;
  }
  first_ = last_ = at;
  const std::string& a = args_[at];
  const size_t eq = a.find('=');
  has_inline_ = a.starts_with("--") && eq != std::string::npos;
  name_ = has_inline_ ? a.substr(0, eq) : a;
  inline_value_ = has_inline_ ? a.substr(eq + 1) : "";
  return true;
}

std::string OptionReader::value() {
  if (has_inline_) return inline_value_;
  if (last_ + 1 >= args_.size()) throw invalid_usage(name_ + " needs a value");
  return args_[++last_];
}

int OptionReader::integer(int min) {
  const std::string text = value();
  int v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || v < min)
    throw invalid_usage(name_ + " takes an integer >= " + std::to_string(min) + ", not '" + text + "'");
  return v;
}

size_t OptionReader::bytes() {
  const std::string text = value();
  try {
    return parse_bytes(text);
  } catch (const Error& e) {
    throw invalid_usage(name_ + ": " + e.message());
  }
}

namespace {

bool to_number(const std::string& text, double* v) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *v);
  return ec == std::errc() && ptr == end && std::isfinite(*v);
}

}  // namespace

double OptionReader::number() {
  const std::string text = value();
  double v = 0;
  if (!to_number(text, &v)) throw invalid_usage(name_ + " takes a number, not '" + text + "'");
  return v;
}

double OptionReader::factor() {
  const std::string text = value();
  double v = 0;
  if (!to_number(text, &v) || !(v > 1.0))
    throw invalid_usage(name_ + " takes a number > 1, not '" + text + "'");
  return v;
}

std::vector<std::string> OptionReader::taken() const {
  return {args_.begin() + static_cast<std::ptrdiff_t>(first_),
          args_.begin() + static_cast<std::ptrdiff_t>(last_) + 1};
}

void OptionReader::unknown(const std::string& hint) const {
  throw invalid_usage("unknown option '" + arg() + "'" + hint);
}

}  // namespace plait::cli
