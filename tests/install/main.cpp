#include <nn/nn.h>

#include <cstdio>

int main() {
  nn::Linear fc(3, 2);
  nn::Tensor x = nn::ones({4, 3}).requires_grad_();
  nn::Tensor loss = nn::sum(fc.forward(x));
  loss.backward();
  // d(sum)/dx = column sums of W, identical for every row
  auto g = x.grad().to_vector<float>();
  bool ok = x.grad().shape() == nn::Shape{4, 3} && g[0] == g[3];
  std::printf("install_check %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
