// Checkpoints: round trip of model + optimizer + RNG state, pruning to keep_last, resuming
// from the newest valid file when newer ones are damaged, leftovers of crashed saves.
#include <nn/checkpoint.h>
#include <nn/io.h>
#include <nn/train.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "test_util.h"

using namespace nn;
namespace fs = std::filesystem;
using test::TempDir;

namespace {

void require_contains(const std::string& text, const std::string& part) {
  INFO("message: " << text);
  INFO("expected to contain: " << part);
  REQUIRE(text.find(part) != std::string::npos);
}

io::Checkpoint small_checkpoint(int64_t step) {
  io::Checkpoint c;
  c.step = step;
  c.model = {{"w", full({2, 2}, double(step))}};
  c.meta = {{"epoch", std::to_string(step / 10)}};
  return c;
}

void flip_last_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = char(f.get());
  f.seekp(-1, std::ios::end);
  f.put(char(c ^ 0x55));
}

}  // namespace

TEST_CASE("checkpoint round trip restores model, optimizer and RNG state", "[io][checkpoint]") {
  TempDir d;
  manual_seed(3);
  auto make = [] {
    auto net = std::make_shared<Sequential>();
    net->push_back(std::make_shared<Linear>(LinearOptions(4, 3)));
    net->push_back(std::make_shared<ReLU>());
    net->push_back(std::make_shared<Linear>(LinearOptions(3, 2)));
    return net;
  };
  auto net = make();
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  Tensor x = randn({8, 4}), y = randint(0, 2, {8});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    cross_entropy(net->forward(x), y).backward();
    opt.step();
  }
  Generator g(1234);
  g.advance(1000);

  io::Checkpoint c;
  c.step = 3;
  c.model = net->state_dict();
  c.optimizer = opt.state();
  c.extra = {{"ema.0.weight", ones({2})}};
  c.meta = {{"run", "test"}, {"config", "{\"lr\": 0.01}"}};
  io::save_generator(c.meta, "rng.dropout", g);
  std::string path = d.file("c.safetensors");
  io::save_checkpoint(path, c);

  io::Checkpoint r = io::load_checkpoint(path);
  REQUIRE(r.step == 3);
  REQUIRE(r.meta == c.meta);
  REQUIRE(r.extra.size() == 1);
  REQUIRE(r.extra[0].first == "ema.0.weight");
  auto net2 = make();
  net2->load_state_dict(r.model);
  optim::AdamW opt2(net2->parameters(), optim::AdamWOptions(1e-2));
  opt2.load_state(r.optimizer);
  Generator g2;
  io::load_generator(r.meta, "rng.dropout", g2);
  REQUIRE(g2.seed() == 1234);
  REQUIRE(g2.offset() == g.offset());

  // The restored run takes the same next step as the original one.
  for (auto* o : {&opt, &opt2}) o->zero_grad();
  cross_entropy(net->forward(x), y).backward();
  cross_entropy(net2->forward(x), y).backward();
  opt.step();
  opt2.step();
  auto a = net->state_dict(), b = net2->state_dict();
  for (size_t i = 0; i < a.size(); ++i) test::require_close(b[i].second, a[i].second, 0, 0);
}

TEST_CASE("checkpoint files that are not libnn checkpoints are refused", "[io][checkpoint][errors]") {
  TempDir d;
  std::string p = d.file("x.safetensors");
  io::save_safetensors(p, {{"model.w", ones({1})}});
  require_contains(test::error_of([&] { io::load_checkpoint(p); }),
                   "checkpoint '" + p + "': not a libnn checkpoint (no 'libnn.step' in its metadata)");
  io::save_safetensors(p, {{"weights", ones({1})}}, {{"libnn.step", "5"}});
  require_contains(test::error_of([&] { io::load_checkpoint(p); }),
                   "tensor 'weights' has none of the prefixes model., optim., extra.");
  io::save_safetensors(p, {}, {{"libnn.step", "-5"}});
  require_contains(test::error_of([&] { io::load_checkpoint(p); }),
                   "'libnn.step' is '-5', expected a non-negative integer");
  io::Checkpoint c;
  c.meta["libnn.step"] = "1";
  require_contains(test::error_of([&] { io::save_checkpoint(p, c); }),
                   "meta key 'libnn.step' is reserved for libnn");
}

TEST_CASE("Checkpointer refuses a folder it cannot read", "[io][checkpoint]") {
  // (a folder not made yet holds none, above; one that cannot be read must not look empty,
  // or a resumed run starts over)
  TempDir d;
  const std::string plain = d.file("plain");
  std::ofstream(plain) << "not a folder";
  io::Checkpointer ck(plain, 2);
  require_contains(test::error_of([&] { ck.list(); }), "cannot read the folder '" + plain + "'");
  require_contains(test::error_of([&] { ck.load_latest(); }), "cannot read the folder");
}

TEST_CASE("Checkpointer keeps the newest keep_last files", "[io][checkpoint]") {
  TempDir d;
  std::string dir = d.file("run/ckpt");  // created by the first save
  io::Checkpointer ck(dir, 2);
  REQUIRE(ck.list().empty());
  REQUIRE_FALSE(ck.load_latest().has_value());
  for (int64_t step : {100, 200, 300, 400, 500})
    REQUIRE(ck.save(small_checkpoint(step)) == dir + "/ckpt-" + std::string(7, '0') + std::to_string(step) + ".safetensors");
  REQUIRE(ck.list() == std::vector<std::string>{dir + "/ckpt-0000000400.safetensors",
                                                dir + "/ckpt-0000000500.safetensors"});
  // no temporaries left behind, nothing but the two checkpoints
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  REQUIRE(names == std::vector<std::string>{"ckpt-0000000400.safetensors", "ckpt-0000000500.safetensors"});

  // Newest means highest step, whatever the file times; other files are ignored.
  std::ofstream(dir + "/notes.txt") << "hi";
  std::ofstream(dir + "/ckpt-12.safetensors") << "too few digits";
  auto c = ck.load_latest();
  REQUIRE(c.has_value());
  REQUIRE(c->step == 500);
  REQUIRE(c->meta.at("epoch") == "50");
  REQUIRE(c->model[0].second.to_vector<float>() == std::vector<float>(4, 500.0f));
  REQUIRE(test::error_of([] { io::Checkpointer("x", 0); }) == "Checkpointer: keep_last must be >= 1, got 0");
  // a newer checkpoint (another run's) is never pruned by saving an older step, and does not
  // push this run's own out
  ck.save(small_checkpoint(10));
  ck.save(small_checkpoint(20));
  REQUIRE(ck.list() == std::vector<std::string>{dir + "/ckpt-0000000010.safetensors",
                                                dir + "/ckpt-0000000020.safetensors",
                                                dir + "/ckpt-0000000400.safetensors",
                                                dir + "/ckpt-0000000500.safetensors"});
}

TEST_CASE("Checkpointer resumes from the newest valid checkpoint", "[io][checkpoint][errors]") {
  TempDir d;
  io::Checkpointer ck(d.path.string(), 5);
  std::vector<std::string> paths;
  for (int64_t step = 1; step <= 4; ++step) paths.push_back(ck.save(small_checkpoint(step)));

  flip_last_byte(paths[3]);                                  // step 4: bit rot
  fs::resize_file(paths[2], fs::file_size(paths[2]) / 2);    // step 3: cut short (crash, full disk)
  std::vector<std::string> warnings;
  auto c = ck.load_latest(&warnings);
  REQUIRE(c.has_value());
  REQUIRE(c->step == 2);
  REQUIRE(warnings.size() == 2);
  require_contains(warnings[0], "skipping " + paths[3] + ": checksum mismatch: the file is corrupt or was modified");
  require_contains(warnings[1], "skipping " + paths[2] + ": ");
  require_contains(warnings[1], "is the file truncated?");

  std::ofstream(paths[1], std::ios::trunc) << "";            // step 2: empty file
  fs::permissions(paths[0], fs::perms::none);               // step 1: unreadable (unless root)
  warnings.clear();
  c = ck.load_latest(&warnings);
  if (c) {  // root reads files whatever their permissions
    REQUIRE(getuid() == 0);
    REQUIRE(c->step == 1);
  } else {
    REQUIRE(warnings.size() == 4);
    require_contains(warnings[3], "Permission denied");
  }
  require_contains(warnings[2], "skipping " + paths[1] + ": the file is 0 bytes");
  flip_last_byte(paths[0]);
  REQUIRE_FALSE(ck.load_latest().has_value());
}

// A pid that no process has now: a child that has exited and been reaped.
static pid_t dead_pid() {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  REQUIRE(dead > 0);
  waitpid(dead, nullptr, 0);
  return dead;
}

TEST_CASE("Checkpointer removes temporaries of crashed saves", "[io][checkpoint]") {
  TempDir d;
  std::string stale = "ckpt-0000000001.safetensors.tmp-" + std::to_string(dead_pid());
  std::string live = "ckpt-0000000001.safetensors.tmp-1";  // pid 1 exists: maybe still writing
  std::ofstream(d.file(stale)) << "half a file";
  std::ofstream(d.file(live)) << "half a file";
  io::Checkpointer ck(d.path.string());
  ck.save(small_checkpoint(2));
  REQUIRE(d.names() == std::vector<std::string>{"ckpt-0000000001.safetensors.tmp-1", "ckpt-0000000002.safetensors"});
}

TEST_CASE("A save removes the temporaries a killed save of the same file left", "[io]") {
  TempDir d;
  const std::string dead = std::to_string(dead_pid());
  // the same file's, a dead process's: removed; a live process's, another file's: kept
  for (const char* name : {"model.st", "model.st.x", "metrics.jsonl", "other.st"})
    std::ofstream(d.file(std::string(name) + ".tmp-" + dead)) << "half a file";
  std::ofstream(d.file("model.st.tmp-1")) << "half a file";
  io::save_safetensors(d.file("model.st"), {{"w", ones({2})}});
  train::write_file(d.file("metrics.jsonl"), "{}\n");
  REQUIRE(d.names() == std::vector<std::string>{"metrics.jsonl", "model.st", "model.st.tmp-1",
                                                "model.st.x.tmp-" + dead, "other.st.tmp-" + dead});
}

// A save through a symbolic link replaces the file it names and keeps the link (renaming over
// the link had replaced it with a file, the target left as it was); a pipe is written where it
// is (it had been replaced by a regular file, as a device such as /dev/full was).
TEST_CASE("saves through a symbolic link and into a pipe keep them", "[io]") {
  namespace fs = std::filesystem;
  TempDir d;
  fs::create_directory(d.file("models"));
  fs::create_symlink("models/v1.st", d.file("latest.st"));
  io::save_safetensors(d.file("latest.st"), {{"w", full({2}, 3.0)}});
  REQUIRE(fs::is_symlink(d.file("latest.st")));
  REQUIRE(io::load_safetensors(d.file("models/v1.st")).tensors[0].second.to_vector<float>() ==
          std::vector<float>{3, 3});
  fs::create_symlink("models/metrics.jsonl", d.file("metrics.jsonl"));
  train::write_file(d.file("metrics.jsonl"), "{}\n");
  REQUIRE(fs::is_symlink(d.file("metrics.jsonl")));
  std::ifstream m(d.file("models/metrics.jsonl"));
  REQUIRE(std::string(std::istreambuf_iterator<char>(m), {}) == "{}\n");
  const std::string fifo = d.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream f(fifo, std::ios::binary);
    got.assign(std::istreambuf_iterator<char>(f), {});
  });
  io::save_safetensors(fifo, {{"w", full({2}, 4.0)}});
  reader.join();
  REQUIRE(fs::is_fifo(fifo));
  std::ofstream(d.file("copy.st"), std::ios::binary) << got;
  REQUIRE(io::load_safetensors(d.file("copy.st")).tensors[0].second.to_vector<float>() ==
          std::vector<float>{4, 4});
  // /dev/stdout when stdout is a pipe: /proc/self/fd/N, a link to "pipe:[inode]" with no file
  // behind it, is written where it is (not resolved to a name to create beside)
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::string piped;
  std::thread drain([&] {
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) piped.append(buf, size_t(n));
  });
  const std::string out = "/proc/self/fd/" + std::to_string(fds[1]);
  io::save_safetensors(out, {{"w", full({2}, 5.0)}});
  train::write_file(out, "and a line\n");
  ::close(fds[1]);
  drain.join();
  ::close(fds[0]);
  REQUIRE(piped.size() > 11);
  REQUIRE(piped.substr(piped.size() - 11) == "and a line\n");
  std::ofstream(d.file("piped.st"), std::ios::binary) << piped.substr(0, piped.size() - 11);
  REQUIRE(io::load_safetensors(d.file("piped.st")).tensors[0].second.to_vector<float>() ==
          std::vector<float>{5, 5});
}

TEST_CASE("generator state in checkpoint meta", "[io][checkpoint]") {
  std::map<std::string, std::string> meta;
  Generator g(~uint64_t(0));
  g.advance(17);
  io::save_generator(meta, "rng", g);
  REQUIRE(meta.at("rng.seed") == "18446744073709551615");
  REQUIRE(meta.at("rng.offset") == "5");
  Generator h;
  io::load_generator(meta, "rng", h);
  REQUIRE(h.seed() == g.seed());
  REQUIRE(h.offset() == g.offset());
  REQUIRE(test::error_of([&] { io::load_generator(meta, "other", h); }) ==
          "checkpoint meta has no 'other.seed' (generator state saved under another key, or not at all)");
  for (const char* bad : {"", "12x", "-1", " 5", "18446744073709551616"}) {
    meta["rng.offset"] = bad;
    REQUIRE(test::error_of([&] { io::load_generator(meta, "rng", h); }) ==
            std::string("checkpoint meta 'rng.offset' is '") + bad + "', expected a non-negative decimal integer");
  }
}
