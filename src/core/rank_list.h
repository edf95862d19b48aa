// "0,1,3": ranks as messages and logs print them.
#pragma once

#include <string>
#include <vector>

namespace plait {

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s;
}

}  // namespace plait
