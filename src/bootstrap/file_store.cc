// A store in a directory shared by every rank (local disk or NFS), for jobs where no rank can
// host a TCP server.
//
// One file per key. A value is written to a private temporary file and rename()d into place,
// so a reader sees either no file or the whole value, never a torn one (rename is atomic on
// POSIX file systems and on NFS). Nothing here is fsync'ed: rendezvous data only has to
// outlive the job, not a crash. get() and wait() poll with a growing backoff, the price of
// having no server. add() is a read-modify-write under flock() on one lock file, which Linux
// also honours across NFS clients; the kernel drops the lock if its holder dies.
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <thread>
#include <utility>

#include "bootstrap/store_protocol.h"
#include "core/clock.h"
#include "plait/error.h"
#include "plait/store.h"

namespace plait {
namespace {

using std::chrono::milliseconds;

// add() has no timeout parameter; a lock held this long means a stuck process, not load.
constexpr auto kLockTimeout = std::chrono::seconds(60);
constexpr auto kFirstBackoff = milliseconds(1);
// NFS attribute caches make faster polling pointless, and a cap keeps latency reasonable.
constexpr auto kMaxBackoff = milliseconds(50);
// File names stay well under NAME_MAX (255) even after escaping.
constexpr size_t kMaxPlainName = 200;

char hex_digit(unsigned v) { return "0123456789ABCDEF"[v & 0xf]; }

std::string sha256_hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr) != 1)
    throw Error(ErrorCategory::kSystem, "SHA-256 of a store key failed", {.op = "file store"});
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(hex_digit(digest[i] >> 4));
    out.push_back(hex_digit(digest[i]));
  }
  return out;
}

// Keys are arbitrary bytes; file names must not contain '/', NUL or start with '.', and
// distinct keys need distinct names. Letters, digits, '_' and '-' stay as they are, every
// other byte becomes %XX. A name too long for the file system keeps a readable prefix and
// gets the key's SHA-256 appended.
std::string file_name_for(const std::string& key) {
  std::string out;
  for (unsigned char ch : key) {
    bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '-';  // not isalnum(): file names must not depend on the locale
    if (plain) {
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back('%');
      out.push_back(hex_digit(ch >> 4));
      out.push_back(hex_digit(ch));
    }
  }
  if (out.empty()) return "%";  // the empty key; '%' alone is no escape of anything else
  if (out.size() > kMaxPlainName) out = out.substr(0, kMaxPlainName / 2) + "~" + sha256_hex(key);
  return out;
}

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  return out;
}

class FileStore : public Store {
 public:
  explicit FileStore(std::string directory) : dir_(std::move(directory)) {
    if (dir_.empty()) throw invalid_usage("file store directory is empty", {.op = "file store"});
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec)
      throw system_error("cannot create file store directory " + dir_, ec.value(),
                         {.op = "file store"});
    if (!std::filesystem::is_directory(dir_, ec))
      throw invalid_usage("file store path " + dir_ + " is not a directory", {.op = "file store"});
  }

  void set(const std::string& key, const Bytes& value) override {
    write_atomically(path_of(key), value, "store set");
  }

  Bytes get(const std::string& key, milliseconds timeout) override {
    Deadline deadline = Deadline::after(timeout);
    std::string path = path_of(key);
    Bytes value;
    poll_until(
        deadline, [&] { return read_if_present(path, value, "store get"); },
        [&] { return missing_error("store get", {key}, timeout); });
    return value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    FileLock lock = FileLock::acquire(dir_ + "/.lock", Deadline::after(kLockTimeout));
    std::string path = path_of(key);
    int64_t value = 0;
    Bytes old;
    if (read_if_present(path, old, "store add")) {
      std::optional<int64_t> parsed = store_wire::parse_decimal(old);
      if (!parsed) {
        throw invalid_usage("the value of key '" + key + "' in the file store at " + dir_ +
                                " is not a decimal integer",
                            {.op = "store add"});
      }
      value = *parsed;
    }
    if (__builtin_add_overflow(value, delta, &value))
      throw invalid_usage("adding " + std::to_string(delta) + " to key '" + key + "' overflows",
                          {.op = "store add"});
    std::string text = std::to_string(value);
    write_atomically(path, Bytes(text.begin(), text.end()), "store add");
    return value;
  }

  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    Deadline deadline = Deadline::after(timeout);
    std::vector<std::string> absent = keys;
    auto all_present = [&] {
      std::erase_if(absent, [&](const std::string& k) { return exists(path_of(k)); });
      return absent.empty();
    };
    poll_until(deadline, all_present, [&] { return missing_error("store wait", absent, timeout); });
  }

  bool check(const std::string& key) override { return exists(path_of(key)); }

 private:
  // Holds flock() on a lock file; polls with LOCK_NB so even this wait has a deadline.
  class FileLock {
   public:
    static FileLock acquire(const std::string& path, const Deadline& deadline) {
      FileLock lock;
      lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (lock.fd_ < 0)
        throw system_error("cannot open lock file " + path, errno, {.op = "store add"});
      auto backoff = kFirstBackoff;
      while (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR)
          throw system_error("cannot lock " + path, errno, {.op = "store add"});
        if (deadline.expired())
          throw timeout_error("Timed out after " + std::to_string(kLockTimeout.count()) +
                                  " s waiting for the lock file " + path + " (a stuck process?)",
                              {.op = "store add"});
        std::this_thread::sleep_for(
            std::min<std::chrono::nanoseconds>(backoff, deadline.remaining()));
        backoff = std::min(backoff * 2, kMaxBackoff);
      }
      return lock;
    }
    FileLock(FileLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    FileLock& operator=(FileLock&&) = delete;
    ~FileLock() {
      if (fd_ >= 0) ::close(fd_);  // closing releases the lock
    }

   private:
    FileLock() = default;
    int fd_ = -1;
  };

  std::string path_of(const std::string& key) const { return dir_ + "/" + file_name_for(key); }

  static bool exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }

  // Calls `ready` until it returns true, sleeping with backoff; throws make_error() at the
  // deadline. `ready` is always tried at least once, so a zero timeout means "check".
  template <typename Ready, typename MakeError>
  static void poll_until(const Deadline& deadline, Ready&& ready, MakeError&& make_error) {
    auto backoff = kFirstBackoff;
    while (!ready()) {
      if (deadline.expired()) throw make_error();
      std::this_thread::sleep_for(
          std::min<std::chrono::nanoseconds>(backoff, deadline.remaining()));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  Error missing_error(const char* op, const std::vector<std::string>& keys,
                      milliseconds timeout) const {
    return timeout_error("Timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
                             (keys.size() == 1 ? "key " : "keys ") + quoted(keys) +
                             " in the file store at " + dir_,
                         {.op = op});
  }

  // Reads the whole file into `out`; false if it does not exist (yet).
  static bool read_if_present(const std::string& path, Bytes& out, const char* op) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return false;
      throw system_error("cannot open " + path, errno, {.op = op});
    }
    out.clear();
    uint8_t buf[65536];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        out.insert(out.end(), buf, buf + n);
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        int err = errno;
        ::close(fd);
        throw system_error("cannot read " + path, err, {.op = op});
      }
    }
    ::close(fd);
    return true;
  }

  void write_atomically(const std::string& path, const Bytes& value, const char* op) const {
    auto [tmp, fd] = create_temp_file(op);
    auto fail = [&](const std::string& what) {
      int err = errno;
      if (fd >= 0) ::close(fd);
      ::unlink(tmp.c_str());
      return system_error(what, err, {.op = op});
    };
    size_t done = 0;
    while (done < value.size()) {
      ssize_t n = ::write(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw fail("cannot write " + tmp);
      done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0) {
      fd = -1;
      throw fail("cannot write " + tmp);
    }
    fd = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw fail("cannot rename " + tmp + " to " + path);
  }

  // A fresh file no other writer (thread, process or host) can be using: random names,
  // created exclusively.
  std::pair<std::string, int> create_temp_file(const char* op) const {
    for (;;) {
      unsigned char raw[8];
      if (RAND_bytes(raw, sizeof raw) != 1)
        throw Error(ErrorCategory::kSystem, "RAND_bytes failed", {.op = op});
      std::string name = dir_ + "/.tmp.";
      for (unsigned char b : raw) {
        name.push_back(hex_digit(b >> 4));
        name.push_back(hex_digit(b));
      }
      int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) return {name, fd};
      if (errno != EEXIST) throw system_error("cannot create " + name, errno, {.op = op});
    }
  }

  const std::string dir_;
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& directory) {
  return std::make_shared<FileStore>(directory);
}

}  // namespace plait
