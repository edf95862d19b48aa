// The command line of a `plait` subcommand, read one argument at a time: options as
// "--name value" or "--name=value", values checked as they are read, and every error a
// plait::Error(kInvalidUsage) naming the option and what it takes. What was read of an
// argument (the option and its value) can be passed on whole (taken()), as `plait bench -n`
// passes the options to the ranks it starts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace plait::cli {

class OptionReader {
 public:
  explicit OptionReader(const std::vector<std::string>& args) : args_(args) {}

  // Moves to the next argument; false when there is none.
  bool next();
  // The argument as given, and its name: "--min" for "--min=4K" as for "--min".
  const std::string& arg() const { return args_[first_]; }
  const std::string& name() const { return name_; }
  bool is_option() const { return arg().size() >= 2 && arg()[0] == '-'; }

  // The option's value: after its '=', else the next argument.
  std::string value();
  int integer(int min);
  size_t bytes();   // with K/M/G suffixes
  double number();  // any finite number
  double factor();  // a number above 1

  // The arguments this one took: itself, and its value when that was the next one.
  std::vector<std::string> taken() const;
  [[noreturn]] void unknown(const std::string& hint = "") const;

 private:
  const std::vector<std::string>& args_;
  size_t first_ = 0, last_ = 0;  // the argument, and the last one it took
  bool started_ = false;
  std::string name_, inline_value_;
  bool has_inline_ = false;
};

}  // namespace plait::cli
