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
// failure. `name` is a temporary "<target>.tmp-<pid>" beside the target: `path`, or the file
// a symbolic link there points to (renaming over the link would replace the link). It is
// synced, renamed over the target and the folder synced, and stale temporaries of earlier
// killed saves are removed. A failure removes the temporary. A special file (a device, a
// pipe: /dev/stdout) is written where it is: `name` is then `path`. `where` starts this
// function's own error messages.
void write(const std::string& path, const std::function<void(const std::string& name)>& write_to,
           const std::string& where = "");

// For a file name "<base>.tmp-<pid>" whose process is gone: <base>. nullopt for other names,
// and for a live process's temporary (it may still be writing it) or this process's own.
std::optional<std::string> stale_tmp_base(const std::string& name);

}  // namespace nn::io::atomic_save
