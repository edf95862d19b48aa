#include "plait/sort/files.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "plait/error.h"

namespace plait::cli {

std::string rank_file(const std::string& dir, const char* stem, int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s-%05d", stem, rank);
  return (std::filesystem::path(dir) / name).string();
}

std::vector<std::string> record_files(const std::string& dir, const std::string& stem) {
  std::vector<std::string> parts, inputs, named;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("part-", 0) == 0) parts.push_back(e.path().string());
    if (name.rfind("input-", 0) == 0) inputs.push_back(e.path().string());
    if (!stem.empty() && name.rfind(stem + "-", 0) == 0) named.push_back(e.path().string());
  }
  if (ec) throw system_error("list " + dir, ec.value());
  std::vector<std::string>& files = !stem.empty() ? named : parts.empty() ? inputs : parts;
  if (files.empty())
    throw invalid_usage(dir + ": no " + (stem.empty() ? "part-* or input-*" : stem + "-*") +
                        " record files");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace plait::cli
