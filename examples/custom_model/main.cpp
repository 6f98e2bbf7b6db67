// A custom model trained on a toy problem: a small gated CNN classifying which quadrant of
// an image holds a bright square. Shows a module of our own, training with AdamW and a
// cosine schedule, evaluation, and saving the weights.
#include <nn/nn.h>

#include <cstdio>

// conv -> (relu(a) * sigmoid(b)) gate -> pool -> linear
class GatedCNN : public nn::Module {
 public:
  explicit GatedCNN(int64_t classes) : nn::Module("GatedCNN") {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(
                                       nn::Conv2dOptions(1, 16, 3).padding({1, 1})));
    head = register_module("head", std::make_shared<nn::Linear>(8 * 4 * 4, classes));
  }
  nn::Tensor forward(const nn::Tensor& x) override {
    nn::Tensor h = conv->forward(x);                           // (N, 16, 8, 8)
    nn::Tensor gated = nn::relu(h.slice(1, 0, 8)) * nn::sigmoid(h.slice(1, 8, 16));
    nn::Pool2dParams p;                                        // 2x2 max pool
    return head->forward(nn::max_pool2d(gated, p).flatten(1));
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::Linear> head;
};

// Images (N, 1, 8, 8) of noise with a bright 4x4 square in the quadrant given by the label.
nn::data::Batch quadrants(int64_t n, uint64_t seed) {
  nn::Generator g(seed);
  nn::Tensor y = nn::randint(0, 4, {n}, nn::kI64, &g);
  nn::Tensor x = nn::randn({n, 1, 8, 8}, nn::kF32, &g) * 0.3;
  auto labels = y.to_vector<int64_t>();
  nn::NoGradGuard no_grad;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = labels[i] / 2 * 4, c = labels[i] % 2 * 4;
    x.select(0, i).select(0, 0).slice(0, r, r + 4).slice(1, c, c + 4).add_(nn::ones({4, 4}));
  }
  return {x, y};
}

int main() {
  nn::manual_seed(0);
  GatedCNN model(4);
  auto train = quadrants(512, 1), test = quadrants(256, 2);
  nn::optim::AdamW opt(model.parameters(), nn::optim::AdamWOptions(3e-3));
  const int steps = 60;
  nn::optim::CosineLR schedule(opt, 5, steps);
  for (int step = 1; step <= steps; ++step) {
    nn::Tensor loss = nn::cross_entropy(model.forward(train.data), train.target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    schedule.step();
    if (step % 20 == 0) std::printf("step %d loss %.4f\n", step, loss.item());
  }
  model.eval();
  nn::NoGradGuard no_grad;
  nn::Tensor pred = nn::argmax(model.forward(test.data), 1);
  double acc = nn::mean(nn::eq(pred, test.target).to(nn::kF32)).item();
  std::printf("test accuracy %.1f%%\n", 100 * acc);
  nn::io::save_safetensors("gated_cnn.safetensors", model.state_dict());
  return acc > 0.9 ? 0 : 1;
}
