// How the registry's rows read and print their values: every layer that registers settings
// (core/settings_registry.h) parses with these, so that every PLAIT_* variable accepts the
// same syntax for the same kind of value and fails with the same kind of message.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace plait {

// The accepted words of an enum setting: parsing, the type column and the error messages
// all read one list.
using Choices = std::span<const std::string_view>;

std::string trim(const std::string& text);
std::string lower(std::string text);
std::string upper(std::string_view text);
std::string join_choices(Choices choices);
std::string enum_type(Choices choices);  // "enum: a|b|c"

// Throws Error(kInvalidUsage): "<name>='<value>' is not valid: expected <expected>".
[[noreturn]] void reject(const std::string& name, const std::string& value,
                         const std::string& expected);

int64_t parse_int_in(const std::string& name, const std::string& value, int64_t min,
                     int64_t max);
// "<digits>[unit]", unit one of us|ms|s|m|h, `plain_unit_us` when there is none. Returns
// microseconds, or -1 when the text does not parse or is absurdly large.
int64_t parse_duration_us(const std::string& text, int64_t plain_unit_us);
// Timeouts: at least 1 ms; a value in us rounds up so a timeout never becomes shorter.
std::chrono::milliseconds parse_timeout(const std::string& name, const std::string& value);
// A period that 0 turns off.
std::chrono::milliseconds parse_duration_or_off(const std::string& name,
                                                const std::string& value);
// Case-insensitive; returns the index of the choice.
size_t parse_choice(const std::string& name, const std::string& value, Choices choices);
// parse_bytes() with the setting's name in the error, and at least `min`.
size_t parse_bytes_setting(const std::string& name, const std::string& value, size_t min);
// 262144 -> "256K": the largest binary unit that divides it.
std::string format_bytes(size_t n);

}  // namespace plait
