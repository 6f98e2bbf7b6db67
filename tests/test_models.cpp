#include "test_util.h"

using namespace nn;

TEST_CASE("ResNet-50 has torchvision's parameter count, names and output shape", "[models]") {
  auto net = models::resnet50();
  REQUIRE(net->num_parameters() == 25557032);
  auto names = net->named_parameters();
  REQUIRE(names.front().first == "conv1.weight");
  REQUIRE(names.back().first == "fc.bias");
  bool has_downsample = false;
  for (auto& [n, t] : names) has_downsample |= n == "layer2.0.downsample.0.weight";
  REQUIRE(has_downsample);
  net->eval();
  NoGradGuard ng;
  Tensor y = net->forward(randn({2, 3, 64, 64}));
  REQUIRE(y.shape() == Shape{2, 1000});
  REQUIRE(std::isfinite(sum(y).item()));
  auto small = models::resnet50(models::ResNetOptions().num_classes(10).zero_init_residual(true));
  REQUIRE(small->num_parameters() == 25557032 - 2048 * 990 - 990);
  REQUIRE(sum(abs(small->layer1->named_children()[0].second->named_parameters()[7].second)).item() == 0);
  REQUIRE(test::error_of([&] { net->forward(randn({1, 1, 32, 32})); }).find("(N, 3, H, W)") !=
          std::string::npos);
}
