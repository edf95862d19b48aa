#include "transport/shm/segment.h"

#include <openssl/hmac.h>

#include "core/random.h"
#include "core/shared_memory.h"
#include "plait/error.h"

namespace plait::transport::shm {
namespace {

std::array<uint8_t, 32> hmac(const std::string& key, const std::string& message) {
  std::array<uint8_t, 32> mac{};
  unsigned int len = 0;
  static const uint8_t kEmpty = 0;  // HMAC() treats a null key as "reuse the last one"
  const void* k = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  if (HMAC(EVP_sha256(), k, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(),
           &len) == nullptr)
    throw Error(ErrorCategory::kSystem, "HMAC-SHA256 failed", {.op = "shm segment name"});
  return mac;
}

}  // namespace

std::string segment_name(const std::string& job_token, const std::string& fabric_name, int rank) {
  auto job = hmac(job_token, "plait shm job/" + fabric_name);
  uint32_t nonce = static_cast<uint32_t>(random_u64());
  std::string name = "/";
  name += kSharedMemoryPrefix;
  name += hex(job.data(), 8);
  name += '-';
  name += std::to_string(rank);
  name += '-';
  name += hex(reinterpret_cast<const uint8_t*>(&nonce), sizeof nonce);
  return name;
}

std::array<uint8_t, kTagBytes> segment_tag(const std::string& job_token,
                                           const std::string& fabric_name, int rank,
                                           const std::string& segment_name) {
  return hmac(job_token, "plait shm segment/" + fabric_name + "/" + std::to_string(rank) + "/" +
                             segment_name);
}

}  // namespace plait::transport::shm
