// Writes the sample files that tests/io/read_safetensors.py and read_tfevents.py check
// against the formats' specs: DIR/sample.safetensors and one event file in DIR/tb/.
// The expected contents are spelled out again in those scripts; change both together.
#include <nn/io.h>
#include <nn/tensorboard.h>
#include <nn/tensor.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

using namespace nn;

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '-') {  // (--help is not a folder to empty)
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    std::filesystem::path dir = argv[1];
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);

    Tensor base = tensor({0.0, 1.5, -2.25, 1024.0, -0.0, std::ldexp(1.0, -149)}, {2, 3}, kF32);
    NamedTensors t{
        {"f32_t", base.t()},  // non-contiguous: written as the (3, 2) transpose
        {"f64", tensor({1.0 / 3, -1e300, 5e-324}, kF64)},
        {"f16", tensor({1.0, -2.5, 65504.0, std::ldexp(1.0, -24), std::ldexp(1.0, -14)}, kF16)},
        {"bf16", tensor({1.0, -3.0, 0.15625, std::ldexp(1.0, 100)}, {2, 2}, kBF16)},
        {"i32", from_vector<int32_t>({INT32_MIN, -1, 70000, INT32_MAX}, {4})},
        {"i64", from_vector<int64_t>({INT64_MIN, int64_t(1) << 40, INT64_MAX}, {3})},
        {"u8", from_vector<uint8_t>({0, 7, 128, 255}, {2, 2})},
        {"scalar", full({}, 42.0, kF32)},
        {"empty", zeros({0, 3}, kF32)},
    };
    io::save_safetensors((dir / "sample.safetensors").string(), t,
                         {{"note", "hello \"world\"\n"}, {"unicode", "\xc3\xbcn\xc3\xaf \xe2\x82\xac"}});

    train::TensorBoardWriter w((dir / "tb").string());
    w.add_scalar("loss", 0.5, 1);
    w.add_scalar("loss", 0.25, 2);
    w.add_scalar("acc/top1", 0.875, 2);
    w.add_scalar("big_step", -1.5, int64_t(1) << 40);
    w.add_scalar("neg_step", 3.0, -1);
    std::printf("wrote %s/sample.safetensors and %s\n", dir.c_str(), w.path().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
