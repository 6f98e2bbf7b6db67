// Atomic saves: a file is written to "<path>.tmp-<pid>" and renamed over <path>, so a reader
// never sees half a file and a failed save leaves the old file as it was. A process killed
// midway (SIGKILL, a machine taken back) leaves its temporary; these helpers find and remove
// such leftovers.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace nn::io::atomic_save {

// Saves `path` whole or not at all; every file libnn writes goes through it.
// write_to(name) creates the file `name`, writes all of it and closes it, throwing on any
// failure. `name` is a temporary beside the file save_target(path) names (the file a
// symbolic link points to, not the link); it is synced, renamed over that file and the
// folder synced, and stale temporaries of earlier killed saves are removed. A failure
// removes the temporary. A special file (a device, a pipe: /dev/stdout) is written where it
// is: `name` is then `path`. `where` starts this function's own error messages.
void write(const std::string& path, const std::function<void(const std::string& name)>& write_to,
           const std::string& where = "");

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
