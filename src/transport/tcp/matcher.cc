// The matching logic lives in transport/tag_matcher.h, shared with the shm provider; this
// instantiates it once for tcp ops.
#include "transport/tcp/matcher.h"

namespace plait::transport {

template class TagMatcher<Op, tcp::Unexpected>;

}  // namespace plait::transport
