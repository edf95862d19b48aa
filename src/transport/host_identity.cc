#include "transport/host_identity.h"

#include <sys/stat.h>

#include <fstream>
#include <map>

namespace plait::transport {
namespace {

std::string read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string namespace_inode(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return "?";
  return std::to_string(static_cast<unsigned long long>(st.st_ino));
}

}  // namespace

std::string machine_identity() {
  std::string boot = read_line("/proc/sys/kernel/random/boot_id");
  // Without a boot id (an unusual /proc), the host name is the next best thing.
  return boot.empty() ? "host:" + read_line("/proc/sys/kernel/hostname") : boot;
}

std::string host_identity(const Config& config) {
  if (!config.host_id.empty()) return "id:" + config.host_id;
  return "boot:" + machine_identity() + "/net:" + namespace_inode("/proc/self/ns/net") +
         "/pid:" + namespace_inode("/proc/self/ns/pid");
}

std::vector<int> host_indices(const std::vector<std::string>& identities) {
  std::map<std::string, int> index;
  std::vector<int> out;
  out.reserve(identities.size());
  for (const std::string& id : identities) {
    auto [it, fresh] = index.emplace(id, static_cast<int>(index.size()));
    out.push_back(it->second);
  }
  return out;
}

}  // namespace plait::transport
