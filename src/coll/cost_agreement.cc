#include "coll/cost_agreement.h"

#include <cstdio>
#include <sstream>

#include "plait/error.h"

namespace plait::coll {
namespace {

std::string encode(const CostParams& p) {
  std::ostringstream out;
  out.precision(17);
  out << p.alpha_us << ' ' << p.beta_bytes_per_us << ' ' << p.gamma_bytes_per_us << ' ' << p.copy_bytes_per_us
      << ' ' << p.flag_us << ' ' << p.inter_alpha_us << ' ' << p.inter_beta_bytes_per_us << ' ' << p.ring_contention
      << ' ' << p.host_memory_bytes_per_us << ' ' << p.host_contention.size();
  for (double c : p.host_contention) out << ' ' << c;
  return out.str();
}

CostParams decode(const std::string& text) {
  std::istringstream in(text);
  CostParams p;
  size_t n = 0;
  in >> p.alpha_us >> p.beta_bytes_per_us >> p.gamma_bytes_per_us >> p.copy_bytes_per_us >> p.flag_us >>
      p.inter_alpha_us >> p.inter_beta_bytes_per_us >> p.ring_contention >> p.host_memory_bytes_per_us >> n;
  p.host_contention.resize(n);
  for (double& c : p.host_contention) in >> c;
  if (!in) throw remote_error("member 0's cost parameters are malformed: '" + text + "'");
  return p;
}

}  // namespace

CostParams agree_on_cost_params(const CostParams& mine, int rank, Store& store, const std::string& key,
                                std::chrono::milliseconds timeout) {
  if (rank == 0) {
    store.set(key, encode(mine));
    return mine;
  }
  try {
    return decode(store.get_string(key, timeout));
  } catch (const Error& e) {
    throw e.with_context({.rank = rank, .peer = 0, .op = "communicator setup: cost parameters"});
  }
}

}  // namespace plait::coll
