// How much memory this process can still take from the system. Linux hands out more address
// space than it has and kills the process (exit 137, no message) once the pages are touched;
// the CPU allocator asks this first for large blocks and turns a request that cannot fit into
// libnn's out-of-memory error instead.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace nn::cpu {

struct MemoryRoom {
  size_t bytes = 0;
  std::string where;  // "on the machine" or "under the memory cgroup's limit"
};

// The least of: the machine's MemAvailable plus free swap (/proc/meminfo), and, for each
// memory cgroup holding the process (v2 or v1, the group and its ancestors) that sets a limit,
// that limit less the group's usage, its page cache counted as free, plus the free swap.
// `root` is prepended to every path read ("/" for the running system; tests pass a folder of
// fake files). nullopt when none of the files can be read (not Linux).
std::optional<MemoryRoom> memory_room(const std::string& root = "/");

}  // namespace nn::cpu
