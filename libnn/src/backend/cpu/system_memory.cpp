#include "backend/cpu/system_memory.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
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

// `key value` lines (memory.stat; /proc/meminfo with a colon and " kB").
std::optional<uint64_t> read_field(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::istringstream in(line);
    std::string k;
    uint64_t v = 0;
    if (in >> k >> v && (k == key || k == key + ":")) {
      std::string unit;
      in >> unit;
      return unit == "kB" ? v * 1024 : v;
    }
  }
  return std::nullopt;
}

// A cgroup's room: its limit less its usage, its inactive file pages counted as free. Limits
// at or above 2^60 mean none (cgroup v1 writes "no limit" as a page-rounded INT64_MAX).
std::optional<uint64_t> cgroup_room(std::optional<uint64_t> limit, std::optional<uint64_t> usage,
                                    std::optional<uint64_t> inactive_file) {
  if (!limit || !usage || *limit >= (uint64_t(1) << 60)) return std::nullopt;
  const uint64_t used = *usage - std::min(*usage, inactive_file.value_or(0));
  return *limit > used ? *limit - used : 0;
}

}  // namespace

std::optional<MemoryRoom> memory_room(const std::string& root_in) {
  const std::string root = root_in.empty() || root_in.back() != '/' ? root_in + "/" : root_in;
  std::optional<MemoryRoom> room;
  auto consider = [&](std::optional<uint64_t> bytes, const char* why) {
    if (bytes && (!room || *bytes < room->bytes)) room = MemoryRoom{size_t(*bytes), why};
  };
  if (auto available = read_field(root + "proc/meminfo", "MemAvailable"))
    consider(*available + read_field(root + "proc/meminfo", "SwapFree").value_or(0), "on the machine");

  // The process's cgroups: "0::/path" (v2) and "N:...memory...:/path" (v1). Inside a container
  // the path may not exist under /sys/fs/cgroup (its own namespace's root is mounted there):
  // then the mount's root files are the group's. Every v2 ancestor may set its own limit; v1
  // reports the tightest one as hierarchical_memory_limit.
  std::ifstream groups(root + "proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    // The mount's folder, then one per path component: the group's folder and its ancestors.
    auto folders = [&](const std::string& mount, const char* probe) {
      std::vector<std::string> chain{root + mount};
      std::istringstream parts(path);
      for (std::string part; std::getline(parts, part, '/');)
        if (!part.empty()) chain.push_back(chain.back() + "/" + part);
      if (!std::ifstream(chain.back() + "/" + probe).good()) chain.resize(1);
      return chain;
    };
    const char* why = "under the memory cgroup's limit";
    if (line.compare(0, 3, "0::") == 0) {
      for (const std::string& d : folders("sys/fs/cgroup", "memory.max"))
        consider(cgroup_room(read_bytes(d + "/memory.max"), read_bytes(d + "/memory.current"),
                             read_field(d + "/memory.stat", "inactive_file")),
                 why);
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      const std::string d = folders("sys/fs/cgroup/memory", "memory.limit_in_bytes").back();
      const auto usage = read_bytes(d + "/memory.usage_in_bytes");
      const auto inactive = read_field(d + "/memory.stat", "total_inactive_file");
      consider(cgroup_room(read_bytes(d + "/memory.limit_in_bytes"), usage, inactive), why);
      consider(cgroup_room(read_field(d + "/memory.stat", "hierarchical_memory_limit"), usage, inactive), why);
    }
  }
  return room;
}

}  // namespace nn::cpu
