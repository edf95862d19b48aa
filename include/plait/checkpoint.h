// Checkpoint files: written atomically, checked when read.
//
//   plait::checkpoint::write_file("ckpt/step-100/rank-0.plait", bytes.data(), bytes.size());
//   std::vector<std::byte> back = plait::checkpoint::read_file("ckpt/step-100/rank-0.plait");
//
// write_file writes a temporary file beside `path`, fsyncs it, renames it over `path` and
// fsyncs the directory: whatever happens meanwhile (a kill, a full disk, a power cut), `path`
// holds the old file or the new one, never a part. A file is a 56-byte header (magic, format
// version, payload bytes, SHA-256 of the payload) and the payload; read_file returns the
// payload only when all of it is there and its digest matches. The digest is unkeyed and in
// the file it covers: it detects corruption and torn writes, not tampering (whoever can write
// the file can write a matching digest).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace plait::checkpoint {

// Throws plait::Error (system) naming the path and the call that failed (open, write, fsync,
// rename), with errno's text; the temporary file is removed.
void write_file(const std::string& path, const void* data, size_t bytes);

// The payload of a checkpoint file. Throws plait::Error (system) naming the path and what is
// wrong: missing or unreadable (errno's text), shorter than its header says, not a plait
// checkpoint (magic), another format version, or a digest that does not match.
std::vector<std::byte> read_file(const std::string& path);

// Whether `path` holds a complete checkpoint file whose digest matches (it reads the whole
// file); when it does not and `why` is given, *why says what is wrong.
bool verify_file(const std::string& path, std::string* why = nullptr);

}  // namespace plait::checkpoint
