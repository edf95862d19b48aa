#include "core/setting_parsers.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include "core/config.h"
#include "plait/error.h"

namespace plait {
namespace {

// Digits only: no sign, no spaces inside, nothing after.
bool parse_digits(std::string_view text, uint64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

constexpr int64_t kMaxDurationUs = int64_t{1} << 60;  // ~36,000 years; leaves room to round

}  // namespace

std::string trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string join_choices(Choices choices) {
  std::string out;
  for (std::string_view c : choices) {
    if (!out.empty()) out += '|';
    out += c;
  }
  return out;
}

std::string enum_type(Choices choices) { return "enum: " + join_choices(choices); }

[[noreturn]] void reject(const std::string& name, const std::string& value,
                         const std::string& expected) {
  throw invalid_usage(name + "='" + value + "' is not valid: expected " + expected,
                      {.op = "config"});
}

int64_t parse_int_in(const std::string& name, const std::string& value, int64_t min, int64_t max) {
  uint64_t n = 0;
  if (!parse_digits(trim(value), n) || n < static_cast<uint64_t>(min) ||
      n > static_cast<uint64_t>(max)) {
    std::string range = max == std::numeric_limits<int>::max()
                            ? " >= " + std::to_string(min)
                            : " in " + std::to_string(min) + ".." + std::to_string(max);
    reject(name, value, "an integer" + range);
  }
  return static_cast<int64_t>(n);
}

int64_t parse_duration_us(const std::string& text, int64_t plain_unit_us) {
  std::string t = lower(trim(text));
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  uint64_t n = 0;
  if (!parse_digits(std::string_view(t).substr(0, digits), n)) return -1;
  std::string unit = trim(t.substr(digits));
  int64_t scale = unit.empty()   ? plain_unit_us
                  : unit == "us" ? 1
                  : unit == "ms" ? 1000
                  : unit == "s"  ? 1000 * 1000
                  : unit == "m"  ? int64_t{60} * 1000 * 1000
                  : unit == "h"  ? int64_t{3600} * 1000 * 1000
                                 : 0;
  if (scale == 0 || n > static_cast<uint64_t>(kMaxDurationUs / scale)) {
    return -1;
  }
  return static_cast<int64_t>(n) * scale;
}

std::chrono::milliseconds parse_timeout(const std::string& name, const std::string& value) {
  int64_t us = parse_duration_us(value, 1000);
  if (us <= 0) reject(name, value, "a positive duration: milliseconds, or 500ms, 30s, 2m");
  return std::chrono::milliseconds((us + 999) / 1000);
}

std::chrono::milliseconds parse_duration_or_off(const std::string& name, const std::string& value) {
  if (trim(value) == "0") return std::chrono::milliseconds(0);
  int64_t us = parse_duration_us(value, 1000);
  if (us <= 0) reject(name, value, "a duration such as 1000 (ms), 500ms, 2s, or 0 (off)");
  return std::chrono::milliseconds((us + 999) / 1000);
}

size_t parse_choice(const std::string& name, const std::string& value, Choices choices) {
  const std::string v = lower(trim(value));
  for (size_t i = 0; i < choices.size(); ++i) {
    if (v == choices[i]) return i;
  }
  reject(name, value, "one of " + join_choices(choices));
}

size_t parse_bytes_setting(const std::string& name, const std::string& value, size_t min) {
  size_t n = 0;
  try {
    n = parse_bytes(value);
  } catch (const Error&) {
    reject(name, value, "a size in bytes such as 65536, 256K, 4MiB, 1G");
  }
  if (n < min) reject(name, value, "a size of at least " + std::to_string(min) + " bytes");
  return n;
}

std::string format_bytes(size_t n) {
  constexpr std::string_view kSuffixes[] = {"T", "G", "M", "K"};
  for (size_t i = 0; i < 4; ++i) {
    size_t unit = size_t{1} << (10 * (4 - i));
    if (n != 0 && n % unit == 0) return std::to_string(n / unit) + std::string(kSuffixes[i]);
  }
  return std::to_string(n);
}

// Grammar: <digits>[.<digits>][ ][unit], unit (any case) one of B, K, KB, KiB, M, MB, MiB,
// G, GB, GiB, T, TB, TiB; every multiple is binary (K = 1024, also "KB", as NCCL reads it).
// A fraction is accepted when the result is a whole number of bytes ("1.5M", not "1.1K").
size_t parse_bytes(const std::string& text) {
  auto fail = [&text](const std::string& why) -> Error {
    return invalid_usage(
        "'" + text + "' is not a byte size: " + why + " (examples: 8, 4096, 256K, 64M, 4KiB, 1.5G)",
        {.op = "parse bytes"});
  };
  const std::string t = lower(trim(text));
  size_t pos = 0;
  while (pos < t.size() && std::isdigit(static_cast<unsigned char>(t[pos]))) ++pos;
  uint64_t whole = 0;
  if (!parse_digits(std::string_view(t).substr(0, pos), whole)) throw fail("no number");
  uint64_t fraction = 0, fraction_scale = 1;
  if (pos < t.size() && t[pos] == '.') {
    size_t start = ++pos;
    while (pos < t.size() && std::isdigit(static_cast<unsigned char>(t[pos]))) ++pos;
    if (pos == start || pos - start > 9) throw fail("1 to 9 digits after the point");
    parse_digits(std::string_view(t).substr(start, pos - start), fraction);
    for (size_t i = start; i < pos; ++i) fraction_scale *= 10;
  }
  const std::string unit = trim(t.substr(pos));
  int shift = -1;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else {
    constexpr std::string_view kUnits = "kmgt";
    size_t index = kUnits.find(unit[0]);
    std::string_view rest = std::string_view(unit).substr(1);
    if (index != std::string_view::npos && (rest.empty() || rest == "b" || rest == "ib")) {
      shift = 10 * static_cast<int>(index + 1);
    }
  }
  if (shift < 0) throw fail("unknown unit '" + unit + "'");
  // bytes = (whole + fraction / fraction_scale) << shift, computed exactly.
  uint64_t scaled = 0, numerator = 0;
  if (__builtin_mul_overflow(whole, fraction_scale, &scaled) ||
      __builtin_add_overflow(scaled, fraction, &scaled) || shift >= 64 ||
      __builtin_mul_overflow(scaled, uint64_t{1} << shift, &numerator)) {
    throw fail("too large");
  }
  if (numerator % fraction_scale != 0) throw fail("not a whole number of bytes");
  uint64_t bytes = numerator / fraction_scale;
  if (bytes > std::numeric_limits<size_t>::max()) throw fail("too large");
  return static_cast<size_t>(bytes);
}

}  // namespace plait
