// The temporaries of atomic saves: a file is written to "<path>.tmp-<pid>" and renamed over
// <path>, so a reader never sees half a file. A process killed midway (SIGKILL, a machine
// taken back) leaves its temporary; these helpers find and remove such leftovers.
#pragma once
#include <optional>
#include <string>

namespace nn::io::atomic_save {

// "<path>.tmp-<this process's pid>".
std::string tmp_path(const std::string& path);

// The file a save to `path` writes: path itself, or, for a symbolic link, the file it points
// to (renaming over the link would replace the link and leave its target as it was). Ask
// is_special_file(path) first: /dev/stdout, a link to a pipe, has no file name to resolve to.
std::string save_target(const std::string& path);

// Whether `path` exists and is not a regular file (a device such as /dev/stdout, a pipe): a
// save writes such a file where it is, since renaming a new file over it would replace it.
bool is_special_file(const std::string& path);

// For a file name "<base>.tmp-<pid>" whose process is gone: <base>. nullopt for other names,
// and for a live process's temporary (it may still be writing it) or this process's own.
std::optional<std::string> stale_tmp_base(const std::string& name);

// Removes the stale temporaries of `path` (best effort: a file that cannot be removed stays).
void remove_stale_tmps(const std::string& path);

}  // namespace nn::io::atomic_save
