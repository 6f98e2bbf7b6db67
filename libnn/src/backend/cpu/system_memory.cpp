#include "backend/cpu/system_memory.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace nn::cpu {
namespace {

// The first line of a file, or "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// A byte count as the kernel writes it; nullopt for "max", garbage or no file.
std::optional<uint64_t> read_bytes(const std::string& path) {
  const std::string s = first_line(path);
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The `key value` lines of a file (memory.stat; /proc/meminfo, whose keys end in a colon and
// whose values in " kB"), read once; empty when it cannot be read.
std::unordered_map<std::string, uint64_t> read_fields(const std::string& path) {
  std::unordered_map<std::string, uint64_t> fields;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::istringstream in(line);
    std::string k, unit;
    uint64_t v = 0;
    if (!(in >> k >> v)) continue;
    if (!k.empty() && k.back() == ':') k.pop_back();
    fields.emplace(k, in >> unit && unit == "kB" ? v * 1024 : v);
  }
  return fields;
}

std::optional<uint64_t> field(const std::unordered_map<std::string, uint64_t>& fields, const std::string& key) {
  auto it = fields.find(key);
  return it == fields.end() ? std::nullopt : std::optional<uint64_t>(it->second);
}

// A cgroup's room: its limit less its usage, its file pages (page cache, which the kernel
// reclaims before it kills) counted as free, plus the machine's free swap (a group at its
// limit swaps first, unless its swap is limited too; that limit is not read). Limits at or
// above 2^60 mean none (cgroup v1 writes "no limit" as a page-rounded INT64_MAX).
std::optional<uint64_t> cgroup_room(std::optional<uint64_t> limit, std::optional<uint64_t> usage,
                                    uint64_t file_pages, uint64_t swap_free) {
  if (!limit || !usage || *limit >= (uint64_t(1) << 60)) return std::nullopt;
  const uint64_t used = *usage - std::min(*usage, file_pages);
  return (*limit > used ? *limit - used : 0) + swap_free;
}

}  // namespace

std::optional<MemoryRoom> memory_room(const std::string& root_in) {
  const std::string root = root_in.empty() || root_in.back() != '/' ? root_in + "/" : root_in;
  std::optional<MemoryRoom> room;
  auto consider = [&](std::optional<uint64_t> bytes, const char* why) {
    if (bytes && (!room || *bytes < room->bytes)) room = MemoryRoom{size_t(*bytes), why};
  };
  const auto meminfo = read_fields(root + "proc/meminfo");
  const uint64_t swap_free = field(meminfo, "SwapFree").value_or(0);
  if (auto available = field(meminfo, "MemAvailable")) consider(*available + swap_free, "on the machine");

  // The process's cgroups: "0::/path" (v2) and "N:...memory...:/path" (v1). Each folder from
  // the mount down to the group's may set a limit, and its usage includes its children's.
  // Inside a container the group's path may not exist under the mount (the container's own
  // group is mounted there): then the mount's files are the group's.
  std::ifstream groups(root + "proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = line.compare(0, 3, "0::") == 0;
    if (!v2 && ("," + controllers + ",").find(",memory,") == std::string::npos) continue;
    const std::string mount = root + (v2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory");
    std::vector<std::string> chain{mount};
    std::istringstream parts(path);
    for (std::string part; std::getline(parts, part, '/');)
      if (!part.empty()) chain.push_back(chain.back() + "/" + part);
    if (!std::ifstream(chain.back() + "/cgroup.procs").good()) chain.resize(1);
    const char* why = "under the memory cgroup's limit";
    const char* file_keys[2][2] = {{"total_active_file", "total_inactive_file"}, {"active_file", "inactive_file"}};
    for (const std::string& d : chain) {
      const auto stat = read_fields(d + "/memory.stat");
      const uint64_t file = field(stat, file_keys[v2][0]).value_or(0) + field(stat, file_keys[v2][1]).value_or(0);
      const auto usage = read_bytes(d + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
      consider(cgroup_room(read_bytes(d + (v2 ? "/memory.max" : "/memory.limit_in_bytes")), usage, file, swap_free), why);
      // v1 also states the tightest ancestor's limit; against this group's usage it
      // overstates the room, but it is all there is when the ancestors are not mounted.
      if (!v2 && d == chain.back())
        consider(cgroup_room(field(stat, "hierarchical_memory_limit"), usage, file, swap_free), why);
    }
  }
  return room;
}

}  // namespace nn::cpu
