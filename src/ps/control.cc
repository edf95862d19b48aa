#include "ps/control.h"

namespace plait::ps::wire {

ToServer decode_to_server(uint64_t header, const std::byte* msg, size_t bytes) {
  ToServer out;
  switch (static_cast<Kind>(header)) {
    case Kind::kPullRequest:
      if (bytes != sizeof out.request) return out;
      std::memcpy(&out.request, msg, sizeof out.request);
      out.what = ToServer::What::kPullRequest;
      return out;
    case Kind::kDone:
      out.what = ToServer::What::kDone;
      return out;
    default:
      return out;
  }
}

ToWorker decode_to_worker(uint64_t header, const std::byte* msg, size_t bytes) {
  ToWorker out;
  switch (static_cast<Kind>(header)) {
    case Kind::kCredits: {
      Credits head;
      if (bytes < sizeof head) return out;
      std::memcpy(&head, msg, sizeof head);
      if (bytes != sizeof head + head.count * sizeof(uint32_t)) return out;
      out.slots = msg + sizeof head;
      out.count = head.count;
      out.what = ToWorker::What::kCredits;
      return out;
    }
    case Kind::kDoneAck:
      out.what = ToWorker::What::kDoneAck;
      return out;
    case Kind::kFailure: {
      FailureHeader head;
      if (bytes < sizeof head) return out;
      std::memcpy(&head, msg, sizeof head);
      out.request = head.request;
      out.partition = head.partition;
      // A category this build does not know (a damaged message, another plait) is an error
      // the server reported: kRemote, never a value outside the enum.
      out.category = head.category <= static_cast<uint32_t>(ErrorCategory::kAborted)
                         ? static_cast<ErrorCategory>(head.category)
                         : ErrorCategory::kRemote;
      out.reason = std::string_view(reinterpret_cast<const char*>(msg) + sizeof head,
                                    bytes - sizeof head);
      out.what = ToWorker::What::kFailure;
      return out;
    }
    default:
      return out;
  }
}

}  // namespace plait::ps::wire
