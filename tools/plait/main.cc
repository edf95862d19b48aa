// The `plait` command: run, bench, info.
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--version") == 0) {
    std::printf("plait %s\n", PLAIT_VERSION);
    return argc < 2 ? 2 : 0;
  }
  std::fprintf(stderr, "plait: unknown command '%s'\n", argv[1]);
  return 2;
}
