#include "base/output_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace infera {
namespace {

std::string Errno() { return std::strerror(errno); }

bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

}  // namespace

Status CheckOutputNotInput(const std::string& output, const std::vector<std::string>& inputs) {
  struct stat out;
  if (stat(output.c_str(), &out) != 0) return Status::Ok();  // does not exist (yet): it cannot be an input
  // Writing to a character device or FIFO (/dev/null, /dev/stdout, a pipe)
  // replaces no file.
  if (S_ISCHR(out.st_mode) || S_ISFIFO(out.st_mode)) return Status::Ok();
  for (const std::string& in : inputs) {
    if (in.empty()) continue;
    struct stat st;
    if (stat(in.c_str(), &st) != 0) continue;
    if (SameFile(st, out)) {
      return InvalidArgument(output + " is the input " + in + "; write the output to another file");
    }
    if (!S_ISDIR(st.st_mode)) continue;
    // A model folder: none of its files may be overwritten either.
    DIR* d = opendir(in.c_str());
    if (d == nullptr) continue;
    bool inside = false;
    while (dirent* e = readdir(d)) {
      struct stat f;
      const std::string p = in + "/" + e->d_name;
      if (stat(p.c_str(), &f) == 0 && S_ISREG(f.st_mode) && SameFile(f, out)) {
        inside = true;
        break;
      }
    }
    closedir(d);
    if (inside) {
      return InvalidArgument(output + " is a file of the input folder " + in + "; write the output elsewhere");
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path) {
  if (path.empty()) return InvalidArgument("the output path is empty");
  std::unique_ptr<OutputFile> o(new OutputFile());
  o->path_ = path;
  o->target_ = path;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return InvalidArgument(path + ": is a directory");
    if (!S_ISREG(st.st_mode)) {  // a device or FIFO: write it in place
      o->f_ = std::fopen(path.c_str(), "wb");
      if (o->f_ == nullptr) return InvalidArgument(path + ": cannot open for writing: " + Errno());
      return o;
    }
    char resolved[PATH_MAX];
    if (realpath(path.c_str(), resolved) != nullptr) o->target_ = resolved;  // through links
  }
  const auto slash = o->target_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : o->target_.substr(0, slash);
  const std::string base = slash == std::string::npos ? o->target_ : o->target_.substr(slash + 1);
  std::string tmpl = (dir == "/" ? "" : dir) + "/." + base + ".tmp-XXXXXX";
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) return InvalidArgument(path + ": cannot create a file in " + dir + ": " + Errno());
  // mkstemp makes 0600; give the file the mode a plain create would (or the
  // mode of the file it replaces).
  mode_t mode;
  if (stat(o->target_.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = umask(0);
    umask(mask);
    mode = 0666 & ~mask;
  }
  fchmod(fd, mode);
  o->tmp_ = tmpl;
  o->f_ = fdopen(fd, "wb");
  if (o->f_ == nullptr) {
    close(fd);
    unlink(o->tmp_.c_str());
    return InvalidArgument(path + ": cannot open for writing: " + Errno());
  }
  return o;
}

OutputFile::~OutputFile() {
  if (f_ != nullptr) std::fclose(f_);
  if (!committed_ && !tmp_.empty()) unlink(tmp_.c_str());
}

Status OutputFile::Write(std::string_view data) {
  if (f_ == nullptr) return InvalidArgument(path_ + ": already closed");
  if (std::fwrite(data.data(), 1, data.size(), f_) != data.size()) {
    return InvalidArgument(path_ + ": write failed: " + Errno());
  }
  return Status::Ok();
}

Status OutputFile::Commit() {
  if (f_ == nullptr) return InvalidArgument(path_ + ": already closed");
  bool ok = std::fflush(f_) == 0 && !std::ferror(f_);
  std::string why = ok ? "" : Errno();
  if (ok && !tmp_.empty() && fsync(fileno(f_)) != 0) {
    ok = false;
    why = Errno();
  }
  if (std::fclose(f_) != 0 && ok) {
    ok = false;
    why = Errno();
  }
  f_ = nullptr;
  if (!ok) return InvalidArgument(path_ + ": write failed: " + why);
  if (!tmp_.empty() && std::rename(tmp_.c_str(), target_.c_str()) != 0) {
    return InvalidArgument(path_ + ": cannot replace: " + Errno());
  }
  committed_ = true;
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view data) {
  auto f = OutputFile::Create(path);
  if (!f.ok()) return f.status();
  if (Status st = (*f)->Write(data); !st.ok()) return st;
  return (*f)->Commit();
}

}  // namespace infera
