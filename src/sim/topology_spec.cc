#include "sim/topology_spec.h"

#include <charconv>
#include <map>
#include <string>
#include <vector>

#include "plait/error.h"

namespace plait::sim {
namespace {

// A number followed by a unit from `units` (suffix -> multiplier).
double number_with_unit(std::string_view text, std::string_view what,
                        const std::vector<std::pair<std::string_view, double>>& units,
                        std::string_view expected, bool zero_ok) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit(end, text.data() + text.size() - end);
  if (ec == std::errc() && (value > 0 || (zero_ok && value == 0)))
    for (const auto& [suffix, scale] : units)
      if (unit == suffix) return value * scale;
  throw invalid_usage("sim: " + std::string(what) + " takes " + std::string(expected) +
                      ", not '" + std::string(text) + "'");
}

int to_int(std::string_view text, std::string_view what) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    throw invalid_usage("sim: " + std::string(what) + " takes an integer, not '" +
                        std::string(text) + "'");
  return v;
}

double to_double(std::string_view text, std::string_view what) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    throw invalid_usage("sim: " + std::string(what) + " takes a number, not '" +
                        std::string(text) + "'");
  return v;
}

// The key=value pairs after the colon; every key once.
std::map<std::string, std::string> pairs_of(std::string_view family, std::string_view rest) {
  std::map<std::string, std::string> out;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      throw invalid_usage("sim: '" + std::string(item) + "' in the " + std::string(family) +
                          " spec is not key=value");
    if (!out.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1))).second)
      throw invalid_usage("sim: " + std::string(item.substr(0, eq)) + " given twice in the " +
                          std::string(family) + " spec");
  }
  return out;
}

class Spec {
 public:
  Spec(std::string_view family, std::map<std::string, std::string> values)
      : family_(family), values_(std::move(values)) {}

  std::string take(const std::string& key) {
    auto it = values_.find(key);
    if (it == values_.end())
      throw invalid_usage("sim: a " + family_ + " spec needs " + key + "=");
    std::string v = it->second;
    values_.erase(it);
    return v;
  }
  std::string take_or(const std::string& key, std::string fallback) {
    return values_.count(key) ? take(key) : fallback;
  }
  LinkSpec link() {
    LinkSpec l;
    l.bytes_per_s = parse_rate(take_or("rate", "1gbit"), "rate=");
    l.latency_s = parse_latency(take_or("latency", "1us"), "latency=");
    if (values_.count("burst")) {
      l.burst_bytes = parse_size(take("burst"), "burst=");
      // A shaper lets its burst through as fast as the wire under it: ten times the rate
      // unless told.
      l.peak_bytes_per_s = values_.count("peak") ? parse_rate(take("peak"), "peak=")
                                                 : 10 * l.bytes_per_s;
      if (l.peak_bytes_per_s < l.bytes_per_s)
        throw invalid_usage("sim: peak= is at least rate=");
    }
    if (values_.count("mtu")) {
      l.mtu = to_int(take("mtu"), "mtu=");
      if (l.mtu < 576 || l.mtu > 65535) throw invalid_usage("sim: mtu= is 576 to 65535 bytes");
    }
    if (values_.count("queue")) {
      const std::string q = take("queue");
      if (q != "fifo" && q != "fair") throw invalid_usage("sim: queue= is fifo or fair, not '" + q + "'");
      l.fifo = q == "fifo";
    }
    return l;
  }
  // After every known key was taken: what is left is a mistake.
  void done() const {
    if (values_.empty()) return;
    throw invalid_usage("sim: a " + family_ + " spec has no key '" + values_.begin()->first + "'");
  }

 private:
  std::string family_;
  std::map<std::string, std::string> values_;
};

std::vector<int> dims_of(const std::string& text) {
  std::vector<int> dims;
  size_t start = 0;
  for (;;) {
    const size_t x = text.find('x', start);
    dims.push_back(to_int(std::string_view(text).substr(start, x - start), "dims="));
    if (x == std::string::npos) break;
    start = x + 1;
  }
  return dims;
}

}  // namespace

double parse_size(std::string_view text, std::string_view what) {
  return number_with_unit(text, what, {{"b", 1.0}, {"kb", 1024.0}, {"mb", 1024.0 * 1024}},
                          "a size in bytes as tc writes it (512kb, 8mb)", false);
}

double parse_rate(std::string_view text, std::string_view what) {
  return number_with_unit(text, what,
                          {{"bit", 1.0 / 8}, {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8},
                           {"gbit", 1e9 / 8}, {"tbit", 1e12 / 8}},
                          "a rate in bits per second (200mbit, 1gbit, 100gbit)", false);
}

double parse_latency(std::string_view text, std::string_view what) {
  // Zero is a latency: the per-message cost may already hold the path's (a tune file's alpha).
  return number_with_unit(text, what, {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}},
                          "a time (500ns, 20us, 1ms)", true);
}

std::unique_ptr<Topology> parse_topology(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string family(spec.substr(0, colon));
  Spec s(family, pairs_of(family, colon == std::string_view::npos ? std::string_view()
                                                                   : spec.substr(colon + 1)));
  std::unique_ptr<Topology> t;
  if (family == "ring" || family == "mesh" || family == "star") {
    const int hosts = to_int(s.take("hosts"), "hosts=");
    const LinkSpec link = s.link();
    t = family == "ring" ? make_ring(hosts, link)
        : family == "mesh" ? make_mesh(hosts, link)
                           : make_star(hosts, link);
  } else if (family == "torus") {
    const std::vector<int> dims = dims_of(s.take("dims"));
    t = make_torus(dims, s.link());
  } else if (family == "fattree") {
    const int k = to_int(s.take("k"), "k=");
    const double oversub = to_double(s.take_or("oversub", "1"), "oversub=");
    const std::string ecmp = s.take_or("ecmp", "flow");
    if (ecmp != "flow" && ecmp != "packet")
      throw invalid_usage("sim: ecmp= is flow (one hashed path per flow) or packet (sprayed), not '" +
                          ecmp + "'");
    t = make_fat_tree(k, oversub, ecmp == "flow" ? Ecmp::kPerFlow : Ecmp::kPerPacket, s.link());
  } else if (family == "dragonfly") {
    const int a = to_int(s.take("a"), "a="), p = to_int(s.take("p"), "p="),
              h = to_int(s.take("h"), "h=");
    const std::string arrangement = s.take_or("arrangement", "absolute");
    const std::string routing = s.take_or("routing", "minimal");
    if (arrangement != "absolute" && arrangement != "circulant")
      throw invalid_usage("sim: arrangement= is absolute or circulant, not '" + arrangement + "'");
    if (routing != "minimal" && routing != "valiant")
      throw invalid_usage("sim: routing= is minimal or valiant, not '" + routing + "'");
    t = make_dragonfly(a, p, h,
                       arrangement == "absolute" ? DragonflyArrangement::kAbsolute
                                                 : DragonflyArrangement::kCirculant,
                       routing == "minimal" ? DragonflyRouting::kMinimal : DragonflyRouting::kValiant,
                       s.link());
  } else {
    throw invalid_usage("sim: unknown topology '" + family +
                        "' (ring, mesh, torus, fattree, dragonfly, star)");
  }
  s.done();
  return t;
}

}  // namespace plait::sim
