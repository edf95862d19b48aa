// The tune file: parsing, formatting, atomic saving, and applying it to cost models.
#include "transport/tuned_costs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "core/log.h"
#include "plait/bootstrap.h"

namespace plait::transport {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

// contention_at_D with D a power of two.
bool contention_field(std::string_view field) {
  if (!field.starts_with(kContentionAt)) return false;
  const std::string_view digits = field.substr(kContentionAt.size());
  uint64_t d = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), d);
  return ec == std::errc() && end == digits.data() + digits.size() && d > 0 && (d & (d - 1)) == 0;
}

bool known_field(std::string_view scope, std::string_view field) {
  if (scope == kNetworkScope) return field == kRingContention || contention_field(field);
  return std::find(std::begin(kTunedFields), std::end(kTunedFields), field) !=
         std::end(kTunedFields);
}

// Scopes are provider names: lower-case words, so that "TCP" or "tcp " cannot silently make a
// second scope that nothing reads.
bool valid_scope(std::string_view scope) {
  return !scope.empty() && std::all_of(scope.begin(), scope.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string fields_list(std::string_view scope) {
  if (scope == kNetworkScope) return std::string(kRingContention) + ", " + std::string(kContentionAt) + "1, 2, 4, ...";
  std::string out;
  for (std::string_view f : kTunedFields) out += (out.empty() ? "" : ", ") + std::string(f);
  return out;
}

std::string key_of(std::string_view scope, std::string_view field) {
  return std::string(scope) + "." + std::string(field);
}

// Why `scope.field = value` is not acceptable, or empty when it is.
std::string check_entry(std::string_view scope, std::string_view field, double value) {
  // Appended piecewise: g++ 12 warns falsely (-Wrestrict) on "literal" + std::string(view).
  std::string why;
  if (!valid_scope(scope)) {
    why.append("'").append(scope).append("' is not a provider name");
    why.append(" (lower-case letters, digits, _)");
  } else if (!known_field(scope, field)) {
    why.append("unknown field '").append(field).append("' (known: ").append(fields_list(scope)) += ')';
  } else if (!std::isfinite(value) || value <= 0) {
    why.append("value of ").append(key_of(scope, field)).append(" must be a positive number");
  }
  return why;
}

std::string read_file(const std::string& path, bool* found) {
  *found = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return {};  // no file: the defaults apply
    throw system_error("cannot open tune file '" + path + "'", errno, {.op = "tune file"});
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw system_error("cannot read tune file '" + path + "'", err, {.op = "tune file"});
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  *found = true;
  return text;
}

void write_all(int fd, std::string_view text, const std::string& path) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("cannot write '" + path + "'", errno, {.op = "tune file"});
    text.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

std::optional<double> TunedCosts::get(std::string_view scope, std::string_view field) const {
  auto it = values_.find(key_of(scope, field));
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

void TunedCosts::set(std::string_view scope, std::string_view field, double value) {
  std::string why = check_entry(scope, field, value);
  if (!why.empty()) throw invalid_usage(why, {.op = "tune file"});
  values_[key_of(scope, field)] = value;
}

std::string tune_file_path(const Config& config, const std::map<std::string, std::string>& env) {
  if (!config.tune_file.empty()) return config.tune_file;
  auto var = [&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  // The XDG base-directory spec ignores a relative XDG_CACHE_HOME.
  const std::string xdg = var("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg.front() == '/') return xdg + "/plait/tune.conf";
  const std::string home = var("HOME");
  if (!home.empty()) return home + "/.cache/plait/tune.conf";
  return {};
}

std::string tune_file_path(const Config& config) {
  return tune_file_path(config, environ_map());
}

TunedCosts parse_tuned_costs(std::string_view text, const std::string& source) {
  TunedCosts costs;
  std::map<std::string, int, std::less<>> first_line;
  int line_no = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view raw = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_no;
    std::string_view line = trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;

    auto fail = [&](const std::string& why) -> Error {
      return invalid_usage(source + ":" + std::to_string(line_no) + ": " + why + " in '" +
                               std::string(trim(raw)) +
                               "'; fix or delete the file, or run `plait tune` again",
                           {.op = "tune file"});
    };
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) throw fail("expected 'scope.field = value'");
    const std::string_view key = trim(line.substr(0, eq));
    const std::string_view value_text = trim(line.substr(eq + 1));
    const size_t dot = key.find('.');
    if (dot == std::string_view::npos) throw fail("expected 'scope.field' before '='");
    const std::string_view scope = key.substr(0, dot);
    const std::string_view field = key.substr(dot + 1);

    double value = 0;
    auto [ptr, ec] =
        std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
    if (value_text.empty() || ec != std::errc() || ptr != value_text.data() + value_text.size())
      throw fail("'" + std::string(value_text) + "' is not a number");
    if (std::string why = check_entry(scope, field, value); !why.empty()) throw fail(why);
    auto [it, fresh] = first_line.emplace(std::string(key), line_no);
    if (!fresh) throw fail("duplicate key (first set on line " + std::to_string(it->second) + ")");
    costs.set(scope, field, value);
  }
  return costs;
}

std::string format_tuned_costs(const TunedCosts& costs, std::string_view header) {
  std::string out;
  while (!header.empty()) {
    const size_t end = header.find('\n');
    std::string_view line = header.substr(0, end);
    header.remove_prefix(end == std::string_view::npos ? header.size() : end + 1);
    out += line.empty() ? "#\n" : "# " + std::string(line) + "\n";
  }
  for (const auto& [key, value] : costs.values()) {
    // Shortest text that parses back to the same double.
    char buf[64];
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, value);
    out += key + " = " + std::string(buf, ptr) + "\n";
  }
  return out;
}

TunedCosts load_tuned_costs_file(const std::string& path) {
  if (path.empty()) return {};
  bool found = false;
  const std::string text = read_file(path, &found);
  TunedCosts costs = found ? parse_tuned_costs(text, path) : TunedCosts{};
  costs.path = path;
  costs.found = found;
  return costs;
}

TunedCosts load_tuned_costs(const Config& config) {
  return load_tuned_costs_file(tune_file_path(config));
}

void save_tuned_costs(const std::string& path, const TunedCosts& costs, std::string_view header) {
  const ErrorContext ctx{.op = "tune file"};
  if (path.empty())
    throw invalid_usage("no tune file to write: set PLAIT_TUNE_FILE or HOME", ctx);
  const std::filesystem::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec) throw system_error("cannot create directory '" + target.parent_path().string() + "'",
                               ec.value(), ctx);
  }
  // Same directory as the target, so rename() is atomic; the pid keeps two concurrent runs
  // from writing into one temporary file.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw system_error("cannot create '" + tmp + "'", errno, ctx);
  try {
    write_all(fd, format_tuned_costs(costs, header), tmp);
    // Without fsync a crash after rename() could leave an empty file under the final name.
    if (::fsync(fd) != 0) throw system_error("cannot flush '" + tmp + "'", errno, ctx);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw system_error("cannot rename '" + tmp + "' to '" + path + "'", err, ctx);
  }
}

CostModel apply_tuned(const CostModel& defaults, const TunedCosts& costs,
                      std::string_view provider) {
  CostModel m = defaults;
  auto from = [&](std::string_view field, bool host_fallback) -> std::optional<double> {
    if (auto v = costs.get(provider, field)) return v;
    return host_fallback ? costs.get(kHostScope, field) : std::nullopt;
  };
  if (auto v = from("alpha_us", false)) m.alpha_us = *v;
  if (auto v = from("beta_bytes_per_us", false)) m.beta_bytes_per_us = *v;
  if (auto v = from("gamma_bytes_per_us", true)) m.gamma_bytes_per_us = *v;
  if (auto v = from("copy_bytes_per_us", true)) m.copy_bytes_per_us = *v;
  if (auto v = from("flag_us", true)) m.flag_us = *v;
  return m;
}

}  // namespace plait::transport
