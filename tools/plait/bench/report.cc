#include "plait/bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace plait::cli {
namespace {

std::string printf_string(const char* format, auto... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  std::string out(static_cast<size_t>(n > 0 ? n : 0), '\0');
  std::snprintf(out.data(), out.size() + 1, format, args...);
  return out;
}

// Names here are ours (ops, dtypes, algorithms), but an algorithm name comes from the
// command line, so escape anyway rather than write broken JSON.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += printf_string("\\u%04x", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// JSON has no inf or nan; a zero-time row would otherwise print one.
std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  return printf_string("%.6g", value);
}

}  // namespace

std::optional<double> BenchRecord::cpu_s_per_gb() const {
  if (bytes == 0) return std::nullopt;
  return (cpu_us_per_op * 1e-6) / (static_cast<double>(bytes) * 1e-9);
}

void fill_call_times(BenchRecord& record, std::vector<double> call_seconds) {
  if (call_seconds.empty()) {
    record.min_us = record.median_us = record.max_us = 0;
    return;
  }
  std::sort(call_seconds.begin(), call_seconds.end());
  const size_t n = call_seconds.size();
  record.min_us = call_seconds.front() * 1e6;
  record.max_us = call_seconds.back() * 1e6;
  record.median_us = (call_seconds[(n - 1) / 2] + call_seconds[n / 2]) / 2 * 1e6;
}

void fill_bandwidth(BenchRecord& record, double busbw_factor) {
  record.algbw_gbps = record.time_us > 0 ? record.bytes / (record.time_us * 1e3) : 0.0;
  record.busbw_gbps = record.algbw_gbps * busbw_factor;
}

std::string format_header(const std::string& op, int ranks, const std::string& dtype,
                          const std::string& redop, const std::string& algo,
                          const std::string& iters, int warmup, bool check, bool in_place,
                          bool sync) {
  return printf_string(
      "# plait bench: op %s, ranks %d, dtype %s, redop %s, algo %s, iters %s, warmup %d, "
      "check %s, %s, %s\n",
      op.c_str(), ranks, dtype.c_str(), redop.c_str(), algo.c_str(), iters.c_str(), warmup,
      check ? "on" : "off", in_place ? "in place" : "out of place",
      sync ? "a barrier before each call" : "calls back to back");
}

std::string format_settings(const Config& config) {
  const Config defaults;
  std::string line;
  for (const SettingInfo& row : settings()) {
    const std::string value = setting_value(config, row.name);
    if (value != setting_value(defaults, row.name)) line += " " + row.name + "=" + value;
  }
  return line.empty() ? "" : "# settings:" + line + "\n";
}

std::string format_table_header() {
  return "#       size      count   type  redop        algo   root   time(us)  algbw(GB/s)"
         "  busbw(GB/s)  cpu(s/GB)  #wrong\n";
}

std::string format_table_row(const BenchRecord& r) {
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
  const std::optional<double> cpu = r.cpu_s_per_gb();
  const std::string cpu_text = cpu ? printf_string("%.3g", *cpu) : "N/A";
  return printf_string("%12zu %10zu %6s %6s %11s %6d %10.2f %12.3f %12.3f %10s %7s\n", r.bytes,
                       r.count, r.dtype.c_str(), r.redop.c_str(), r.algo.c_str(), r.root,
                       r.time_us, r.algbw_gbps, r.busbw_gbps, cpu_text.c_str(), wrong.c_str());
}

std::string format_average(const std::vector<BenchRecord>& records) {
  double sum = 0;
  for (const BenchRecord& r : records) sum += r.busbw_gbps;
  const double avg = records.empty() ? 0.0 : sum / records.size();
  return printf_string("# Avg bus bandwidth: %.3f GB/s\n", avg);
}

std::string format_json_line(const BenchRecord& r) {
  std::string out = "{";
  out += "\"op\":" + json_string(r.op);
  out += ",\"algo\":" + json_string(r.algo);
  out += ",\"dtype\":" + json_string(r.dtype);
  out += ",\"redop\":" + json_string(r.redop);
  out += ",\"root\":" + std::to_string(r.root);
  out += ",\"bytes\":" + std::to_string(r.bytes);
  out += ",\"count\":" + std::to_string(r.count);
  out += ",\"ranks\":" + std::to_string(r.ranks);
  out += ",\"iters\":" + std::to_string(r.iters);
  out += ",\"inplace\":" + std::string(r.in_place ? "true" : "false");
  out += ",\"time_us\":" + json_number(r.time_us);
  out += ",\"min_us\":" + json_number(r.min_us);
  out += ",\"median_us\":" + json_number(r.median_us);
  out += ",\"max_us\":" + json_number(r.max_us);
  out += ",\"algbw_GBps\":" + json_number(r.algbw_gbps);
  out += ",\"busbw_GBps\":" + json_number(r.busbw_gbps);
  out += ",\"cpu_us_per_op\":" + json_number(r.cpu_us_per_op);
  const std::optional<double> cpu = r.cpu_s_per_gb();
  out += ",\"cpu_s_per_GB\":" + (cpu ? json_number(*cpu) : std::string("null"));
  out += ",\"wrong\":" + (r.wrong ? std::to_string(*r.wrong) : std::string("null"));
  return out + "}";
}

}  // namespace plait::cli
