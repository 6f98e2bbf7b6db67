#include "io/atomic_save.h"

#include <nn/error.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace nn::io::atomic_save {

namespace {
constexpr const char kTag[] = ".tmp-";

// fsync of `path` (a file, or a folder with O_DIRECTORY). The folder's is best effort where
// it cannot be: a file system that cannot sync a folder (EINVAL), or a folder this process
// may write but not read (mode 0300: the rename has happened, so the save has too).
void sync_path(const std::string& path, int flags, const std::string& where) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0 && (flags & O_DIRECTORY) && errno == EACCES) return;
  NN_CHECK(fd >= 0, where, "cannot open '", path, "' to sync it: ", std::strerror(errno));
  const int r = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  NN_CHECK(r == 0 || (err == EINVAL && (flags & O_DIRECTORY)), where, "cannot sync '", path,
           "': ", std::strerror(err));
}
// "<path>.tmp-<this process's pid>".
std::string tmp_path(const std::string& path) {
  return path + kTag + std::to_string(::getpid());
}

// The file a save to `path` writes: path itself, or, for a symbolic link, the file it points
// to (renaming over the link would replace the link and leave its target as it was). Ask
// is_special_file(path) first: /dev/stdout, a link to a pipe, has no file name to resolve to.
std::string save_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_symlink(path, ec)) return path;
  if (fs::exists(path, ec)) {  // resolved as the kernel resolves it
    const fs::path real = fs::canonical(path, ec);
    if (!ec) return real.string();
  }
  fs::path p = path;
  // a dangling link: link by link to the name the save creates
  for (int hops = 0; hops < 40 && fs::is_symlink(p, ec); ++hops) {
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return p.string();
}

// Whether `path` exists and is not a regular file (a device such as /dev/stdout, a pipe): a
// save writes such a file where it is, since renaming a new file over it would replace it.
bool is_special_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

// Removes the stale temporaries of `path` (best effort: a file that cannot be removed stays).
void remove_stale_tmps(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string base = p.filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(p.has_parent_path() ? p.parent_path() : fs::path("."), ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > base.size() && name.compare(0, base.size(), base) == 0 &&
        stale_tmp_base(name) == base) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}
}  // namespace

void write(const std::string& path, const std::function<void(const std::string& name)>& write_to,
           const std::string& where) {
  // checked before any link is resolved: /dev/stdout on a pipe resolves to a name
  // ('pipe:[inode]') with no file behind it
  if (is_special_file(path)) {
    write_to(path);
    return;
  }
  const std::string target = save_target(path);
  const std::string tmp = tmp_path(target);
  try {
    write_to(tmp);
    sync_path(tmp, 0, where);
    NN_CHECK(std::rename(tmp.c_str(), target.c_str()) == 0, where, "cannot rename '", tmp,
             "' over '", target, "': ", std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  const std::string dir = std::filesystem::path(target).parent_path().string();
  sync_path(dir.empty() ? "." : dir, O_DIRECTORY, where);
  remove_stale_tmps(target);
}

std::optional<std::string> stale_tmp_base(const std::string& name) {
  const size_t pos = name.rfind(kTag);
  if (pos == std::string::npos || pos == 0) return std::nullopt;
  const char* digits = name.data() + pos + sizeof kTag - 1;
  const char* end = name.data() + name.size();
  int pid = 0;
  auto [stop, ec] = std::from_chars(digits, end, pid);
  if (digits == end || ec != std::errc() || stop != end || pid <= 0) return std::nullopt;
  if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) return std::nullopt;
  return name.substr(0, pos);
}

}  // namespace nn::io::atomic_save
