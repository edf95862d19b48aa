// What `plait bench ps` and `plait bench rdma` share around their own work: parse the
// arguments (a usage error exits 2 with the message), --help, -n N (launch N local ranks that
// run the same subcommand), or run inside the job; an error exits 1 (2 for a usage error).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "plait/commands.h"
#include "plait/error.h"

namespace plait::cli {

// Options: has `help`, `nranks` and `forwarded_args` (what the launched ranks get).
template <typename Options>
int bench_subcommand_main(const std::string& name, const std::vector<std::string>& args,
                          Options (*parse)(const std::vector<std::string>&),
                          std::string (*usage)(), int (*run)(const Options&)) {
  const std::string prefix = "plait bench " + name + ": ";
  Options o;
  try {
    o = parse(args);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s%s\n(plait bench %s --help for usage)\n", prefix.c_str(), e.what(),
                 name.c_str());
    return 2;
  }
  if (o.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  try {
    if (o.nranks > 0) {
      std::vector<std::string> command = {"/proc/self/exe", "bench", name};
      command.insert(command.end(), o.forwarded_args.begin(), o.forwarded_args.end());
      return launch_local_job(o.nranks, command);
    }
    return run(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s%s\n", prefix.c_str(), e.what());
    return e.category() == ErrorCategory::kInvalidUsage ? 2 : 1;
  }
}

}  // namespace plait::cli
