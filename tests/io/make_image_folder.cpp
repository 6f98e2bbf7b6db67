// make_image_folder DIR: writes a tiny ImageNet-layout folder for the resnet50_train test,
// DIR/{train,val}/{dark,bright}/N.jpg (12 and 4 images a class, 40x48 noise around a class
// brightness), using libnn's own JPEG writer.
#include <nn/data.h>
#include <nn/nn.h>
#include <nn/random.h>
#include <nn/tensor.h>

#include <cstdio>
#include <filesystem>

using namespace nn;

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  if (!data::have_jpeg()) {
    std::fprintf(stderr, "libnn built without JPEG support\n");
    return 77;
  }
  try {
    const std::filesystem::path dir = argv[1];
    Generator g(7);
    for (auto [split, n] : {std::pair{"train", 12}, std::pair{"val", 4}})
      for (auto [cls, base] : {std::pair{"dark", 20.0}, std::pair{"bright", 190.0}}) {
        const auto sub = dir / split / cls;
        std::filesystem::create_directories(sub);
        for (int i = 0; i < n; ++i)
          data::write_jpeg((sub / (std::to_string(i) + ".jpg")).string(),
                           (rand({40, 48, 3}, kF32, &g) * 50.0 + base).to(kU8));
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
