// Writing a command's output without ever destroying its input.
//
// CheckOutputNotInput refuses an output path that names one of the inputs
// (the same file after links, hard links included, or a file inside an input
// folder). OutputFile writes into a temporary file beside the target and
// renames it over the target only in Commit(), so a failed or interrupted
// command leaves the old file (or no file) in place, and memory-mapped
// inputs are never truncated under the reader.
//
// Thread-safety: an OutputFile is used by one thread at a time.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infera/status.h"

namespace infera {

// InvalidArgument("OUT is the input IN: ...") when `output` is, or links to,
// one of `inputs` or a file directly inside an input folder. Inputs and an
// output that do not exist yet are fine.
Status CheckOutputNotInput(const std::string& output, const std::vector<std::string>& inputs);

class OutputFile {
 public:
  // Opens a temporary file beside `path` (beside the file a link points to,
  // so the link survives). An existing non-regular target (/dev/null, a
  // FIFO, a terminal) is written directly instead.
  static StatusOr<std::unique_ptr<OutputFile>> Create(const std::string& path);
  // Without a successful Commit(), removes the temporary file.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // The stream to write; owned by this object, valid until Commit().
  FILE* stream() { return f_; }
  const std::string& path() const { return path_; }
  Status Write(std::string_view data);
  // Flushes, syncs and renames the temporary file over the target. Reports
  // any write error seen on the stream since Create().
  Status Commit();

 private:
  OutputFile() = default;
  std::string path_;      // as given (for messages)
  std::string target_;    // what gets replaced (links resolved)
  std::string tmp_;       // "" when writing the target directly
  FILE* f_ = nullptr;
  bool committed_ = false;
};

// Create + Write + Commit.
Status WriteFileAtomically(const std::string& path, std::string_view data);

}  // namespace infera
