// Finite-difference gradient checks of the argument combinations the per-family tests leave
// out: attention over several query blocks, cross-attention, a scale, 3-d, permuted and fully
// masked inputs; cross-entropy in every reduction with smoothing and ignored targets; embedding
// (bag) with empty bags, repeated and i32 ids, wide rows; batch and layer norm with partial
// affines, strided and channels-last inputs, many row blocks; pools and convolutions with
// asymmetric, overlapping, grouped and dilated windows; matmul's vector and broadcast shapes;
// reductions over negative and several dims; broadcasting, views, softmax, dropout and a BERT
// layer. gradcheck clones its inputs contiguous, so the strided and channels-last cases build
// their views inside the checked function.
#include <cmath>
#include <string>

#include "test_util.h"

using namespace nn;

// ---- attention ---------------------------------------------------------------------------------
TEST_CASE("gradcheck: attention over several query blocks, cross-attention, a scale, 3-d and "
          "permuted inputs, a fully masked sample", "[attention][gradcheck]") {
  auto sdpa = [](const std::vector<Tensor>& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2]);
  };
  // T = 70 and 130: two and three 64-row blocks (B = 2: the batch loop's threads too)
  test::require_gradcheck(sdpa, {test::rnd({1, 1, 70, 3}, 1), test::rnd({1, 1, 5, 3}, 2),
                                 test::rnd({1, 1, 5, 2}, 3)});
  test::require_gradcheck(sdpa, {test::rnd({2, 1, 130, 2}, 4), test::rnd({2, 1, 6, 2}, 5),
                                 test::rnd({2, 1, 6, 3}, 6)});
  Tensor keep70 = from_vector<uint8_t>({1, 0, 1, 1, 0}, {1, 5});
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], keep70);
  }, {test::rnd({1, 2, 70, 3}, 7), test::rnd({1, 2, 5, 3}, 8), test::rnd({1, 2, 5, 2}, 9)});
  // T != S, an explicit scale, and sample 1 with every key masked (zeros out, zero gradients)
  Tensor keep = from_vector<uint8_t>({1, 1, 0, 1, 0, 0, 0, 0, 0, 0}, {2, 5});
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], keep, 0.3);
  }, {test::rnd({2, 2, 3, 4}, 10), test::rnd({2, 2, 5, 4}, 11), test::rnd({2, 2, 5, 3}, 12)});
  // 3-d (N, T, D): no head dim, the mask applies per sample
  Tensor keep3 = from_vector<uint8_t>({1, 1, 0, 1, 0, 1, 1, 1}, {2, 4});
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], keep3);
  }, {test::rnd({2, 3, 4}, 13), test::rnd({2, 4, 4}, 14), test::rnd({2, 4, 2}, 15)});
  // q, k, v as BertSelfAttention passes them: permuted (non-contiguous) views
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    auto heads = [](const Tensor& t) { return t.permute({0, 2, 1, 3}); };
    return scaled_dot_product_attention(heads(in[0]), heads(in[1]), heads(in[2]));
  }, {test::rnd({2, 3, 2, 4}, 16), test::rnd({2, 4, 2, 4}, 17), test::rnd({2, 4, 2, 3}, 18)});
}

// ---- loss --------------------------------------------------------------------------------------
TEST_CASE("gradcheck: cross_entropy in every reduction with label smoothing and ignore_index "
          "together", "[loss][gradcheck]") {
  Tensor target = from_vector<int64_t>({1, 0, 3, 3, 2}, {5});
  for (Reduction red : {Reduction::none, Reduction::sum, Reduction::mean}) {
    INFO("reduction " << int(red));
    CrossEntropyOptions o;
    o.reduction = red;
    o.label_smoothing = 0.2;
    o.ignore_index = 3;
    test::require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, o); },
                            {test::rnd({5, 4}, 20)});
  }
  CrossEntropyOptions all_smooth;
  all_smooth.label_smoothing = 1.0;
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, all_smooth); },
                          {test::rnd({5, 4}, 21)});
  Tensor t32 = from_vector<int32_t>({1, 0, 3, 3, 2}, {5});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t32); },
                          {test::rnd({5, 4}, 22)});
  // (N, C, d1, d2) with the default ignore_index (-100) at two positions, mean and none
  Tensor t4 = from_vector<int64_t>({0, -100, 2, 1, -100, 0, 1, 2}, {2, 2, 2});
  for (Reduction red : {Reduction::mean, Reduction::none}) {
    INFO("(N, C, d1, d2), reduction " << int(red));
    CrossEntropyOptions o;
    o.reduction = red;
    o.label_smoothing = 0.1;
    test::require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t4, o); },
                            {test::rnd({2, 3, 2, 2}, 23)});
  }
  // strided logits (a transposed view)
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return cross_entropy(in[0].t(), from_vector<int64_t>({2, 0, 1}, {3}));
  }, {test::rnd({4, 3}, 24)});
  // mse_loss's other reductions
  test::require_gradcheck([](const std::vector<Tensor>& in) { return mse_loss(in[0].t(), in[1], Reduction::none); },
                          {test::rnd({2, 3}, 25), test::rnd({3, 2}, 26)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], Reduction::sum); },
                          {test::rnd({2, 3}, 27), test::rnd({2, 3}, 28)});
}

TEST_CASE("gradcheck: cross_entropy over many rows (threads) with ignored targets and smoothing",
          "[loss][gradcheck]") {
  // Only a (1, C) shift of the logits requires grad: 2C evaluations of a 20000-row loss.
  Tensor logits = test::rnd({20000, 3}, 30, false);
  Generator g(31);
  Tensor t = randint(0, 3, {20000}, kI64, &g);
  {
    NoGradGuard ng;
    t.slice(0, 0, 20000, 7).fill_(-100);
  }
  CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(logits + in[0], t, o); },
                          {test::rnd({1, 3}, 32)});
}

// ---- embedding ---------------------------------------------------------------------------------
TEST_CASE("gradcheck: embedding with 2-d i32 indices, padding_idx, and wide rows",
          "[embedding][gradcheck]") {
  Tensor idx = from_vector<int32_t>({2, 0, 2, 1, 3, 2}, {2, 3});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx); },
                          {test::rnd({4, 3}, 1)});
  // padding_idx -1 (row 3) by design gets no gradient, unlike what finite differences see, so
  // that row is a constant here and the other rows are checked; then its zero on its own.
  Tensor pidx = from_vector<int64_t>({3, 0, 2, 3, 1}, {5});
  Tensor pad_row = test::rnd({1, 3}, 2, false);
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return embedding(concat({in[0], pad_row}, 0), pidx, -1);
  }, {test::rnd({3, 3}, 3)});
  Tensor w = test::rnd({4, 3}, 4);
  sum(embedding(w, pidx, -1) * test::rnd({5, 3}, 5, false)).backward();
  test::require_values(w.grad().select(0, 3), {0, 0, 0});
  // 130 columns: the backward's column ranges go to different threads
  Tensor rep = from_vector<int64_t>({2, 0, 2, 1, 2, 0}, {6});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], rep); },
                          {test::rnd({3, 130}, 6)});
}

TEST_CASE("gradcheck: embedding_bag with an empty bag, repeated ids, i32 ids, a weighted mask, "
          "and wide rows", "[embedding][gradcheck]") {
  Tensor ids = from_vector<int32_t>({2, 2, 0, 1, 3, 1, 1, 0}, {2, 4});
  Tensor keep = from_vector<uint8_t>({1, 1, 0, 1, 0, 0, 0, 0}, {2, 4});  // row 1: no tokens
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding_bag(in[0], ids, keep); },
                          {test::rnd({4, 3}, 10)});
  Tensor keepf = from_vector<float>({1, 0.5, 0, 2, 1, 1, 0, 1}, {2, 4});  // nonzero = kept
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding_bag(in[0], ids, keepf); },
                          {test::rnd({4, 3}, 11)});
  Tensor keep2 = from_vector<uint8_t>({1, 1, 0, 1, 1, 0, 1, 1}, {2, 4});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding_bag(in[0], ids, keep2); },
                          {test::rnd({4, 40}, 12)});  // > 16 columns: split over threads
}

// ---- norm --------------------------------------------------------------------------------------
TEST_CASE("gradcheck: batch_norm with a partial affine, (N, C) input, channels-last eval and "
          "strided input", "[norm][gradcheck]") {
  Tensor rm0 = test::rnd({3}, 80, false) * 0.1, rv0 = abs(test::rnd({3}, 81, false)) + 0.5;
  for (bool training : {true, false}) {
    INFO("training " << training);
    test::require_gradcheck([&](const std::vector<Tensor>& in) {
      Tensor m = rm0.clone(), v = rv0.clone();
      return batch_norm(in[0], m, v, in[1], {}, training, 0.1, 1e-5);  // weight alone
    }, {test::rnd({4, 3, 5}, 82), test::rnd({3}, 83)});
    test::require_gradcheck([&](const std::vector<Tensor>& in) {
      Tensor m = rm0.clone(), v = rv0.clone();
      return batch_norm(in[0], m, v, {}, in[1], training, 0.1, 1e-5);  // bias alone
    }, {test::rnd({4, 3, 5}, 84), test::rnd({3}, 85)});
    test::require_gradcheck([&](const std::vector<Tensor>& in) {
      Tensor m = rm0.clone(), v = rv0.clone();
      return batch_norm(test::channels_last(in[0]), m, v, in[1], in[2], training, 0.1, 1e-5);
    }, {test::rnd({2, 3, 3, 2}, 86), test::rnd({3}, 87), test::rnd({3}, 88)});
    test::require_gradcheck([&](const std::vector<Tensor>& in) {
      Tensor m = rm0.clone(), v = rv0.clone();
      return batch_norm(in[0], m, v, in[1], in[2], training, 0.1, 1e-5);  // (N, C)
    }, {test::rnd({5, 3}, 89), test::rnd({3}, 90), test::rnd({3}, 91)});
    test::require_gradcheck([&](const std::vector<Tensor>& in) {
      Tensor m = rm0.clone(), v = rv0.clone();
      return batch_norm(in[0].transpose(0, 2), m, v, in[1], in[2], training, 0.1, 1e-5);
    }, {test::rnd({4, 3, 2}, 92), test::rnd({3}, 93), test::rnd({3}, 94)});
  }
}

TEST_CASE("gradcheck: batch_norm and batch_norm_relu over several row blocks (parameters only)",
          "[norm][gradcheck]") {
  // 24576 rows of 3 channels: channels-last statistics and backward sums in several row blocks
  // (one per thread). x = base + s * mask makes d/ds = sum(dx * mask), so every element of the
  // input gradient reaches a checked number without an FD pass per element.
  Tensor base = test::rnd({6, 3, 64, 64}, 95, false), mask = test::rnd({6, 3, 64, 64}, 96, false);
  // (Row-major batch norm splits work by channel, which the small cases already reach.)
  const bool chl = true;
  for (bool training : {true, false}) {
      INFO("channels-last " << chl << " training " << training);
      test::require_gradcheck([&](const std::vector<Tensor>& in) {
        Tensor x = base + in[0] * mask, z = mask * in[0];
        if (chl) {
          x = x.contiguous(MemoryFormat::channels_last);
          z = z.contiguous(MemoryFormat::channels_last);
        }
        Tensor m = zeros({3}, kF64), v = ones({3}, kF64);
        return batch_norm(x, m, v, in[1], in[2], training, 0.1, 1e-5) +
               batch_norm_relu(x, z, m.clone(), v.clone(), in[1], in[2], training, 0.1, 1e-5);
      }, {test::rnd({1, 3, 1, 1}, 97), test::rnd({3}, 98), test::rnd({3}, 99)});
    }
}

TEST_CASE("gradcheck: layer_norm with weight alone, a multi-dim affine, strided, 1-d and tall "
          "input", "[norm][gradcheck]") {
  test::require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 3}, in[1]); },
                          {test::rnd({2, 2, 3}, 100), test::rnd({2, 3}, 101)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 3}, in[1], in[2]); },
                          {test::rnd({2, 2, 3}, 102), test::rnd({2, 3}, 103), test::rnd({2, 3}, 104)});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return layer_norm(in[0].transpose(0, 1), {3}, in[1], in[2]);
  }, {test::rnd({4, 2, 3}, 105), test::rnd({3}, 106), test::rnd({3}, 107)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}, in[1], in[2]); },
                          {test::rnd({5}, 108), test::rnd({5}, 109), test::rnd({5}, 110)});
  // 7000 rows: the weight and bias gradients are summed from per-thread parts
  Tensor tall = test::rnd({7000, 4}, 111, false);
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return layer_norm(tall, {4}, in[0], in[1]); },
                          {test::rnd({4}, 112), test::rnd({4}, 113)});
}

// ---- pool --------------------------------------------------------------------------------------
TEST_CASE("gradcheck: pooling with asymmetric windows, overlap, channels-last input and "
          "upsampling", "[pool][gradcheck]") {
  Tensor x = test::rnd({2, 2, 7, 6}, 40);  // continuous values: no ties
  for (bool channels_last : {false, true}) {
    INFO("channels-last " << channels_last);
    auto in_format = [&](const Tensor& t) { return channels_last ? test::channels_last(t) : t; };
    for (Pool2dParams p : {test::pool_params({2, 3}, {1, 2}, {1, 1}, {2, 1}),
                           test::pool_params({3, 3}, {1, 1}, {1, 1})})
      test::require_gradcheck([&, p](const std::vector<Tensor>& in) { return max_pool2d(in_format(in[0]), p); }, {x});
    for (bool incl : {true, false})
      for (Pool2dParams p : {test::pool_params({3, 2}, {2, 1}, {1, 1}, {1, 1}, incl),
                             test::pool_params({3, 3}, {1, 1}, {0, 0}, {1, 1}, incl)})
        test::require_gradcheck([&, p](const std::vector<Tensor>& in) { return avg_pool2d(in_format(in[0]), p); }, {x});
    test::require_gradcheck([&](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in_format(in[0]), {4, 3}); }, {x});
    test::require_gradcheck([&](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in_format(in[0]), {9, 8}); }, {x});
  }
  // a strided (H/W-transposed) input; 2x2 stride 2 takes the row-major fast path
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return max_pool2d(in[0].transpose(2, 3), test::pool_params({2, 2}, {2, 2}, {0, 0}));
  }, {x});
}

// ---- conv --------------------------------------------------------------------------------------
TEST_CASE("gradcheck: conv2d with groups combined with stride, dilation and padding, depthwise, "
          "unread rows, 1x1 off the fast path, no bias, strided and channels-last input",
          "[conv][gradcheck]") {
  struct Case { Shape x, w; Conv2dParams p; };
  const std::vector<Case> cases = {
      {{2, 4, 7, 6}, {6, 2, 3, 2}, test::conv_params({2, 1}, {2, 1}, {1, 2}, 2)},  // everything at once
      {{1, 3, 5, 5}, {6, 1, 3, 3}, test::conv_params({1, 1}, {1, 1}, {1, 1}, 3)},  // depthwise, multiplier 2
      {{2, 3, 4, 5}, {3, 1, 3, 2}, test::conv_params({1, 2}, {1, 0}, {1, 1}, 3)},  // depthwise, asymmetric
      {{1, 2, 7, 8}, {2, 2, 2, 2}, test::conv_params({3, 3}, {0, 0})},             // rows/cols no window reads
      {{1, 3, 3, 4}, {2, 3, 1, 1}, test::conv_params({1, 1}, {1, 1})},             // 1x1 padded
      {{2, 3, 5, 5}, {2, 3, 1, 1}, test::conv_params({2, 2}, {0, 0})},             // 1x1 stride 2
      {{1, 4, 7, 7}, {4, 2, 3, 3}, test::conv_params({2, 2}, {1, 1}, {2, 2}, 2)},  // groups, stride, dilation
  };
  uint64_t seed = 50;
  for (const Case& c : cases)
    for (bool channels_last : {false, true}) {
      INFO("x " << shape_str(c.x) << " w " << shape_str(c.w) << " channels-last " << channels_last);
      test::require_gradcheck([&](const std::vector<Tensor>& in) {
        return conv2d(channels_last ? test::channels_last(in[0]) : in[0], in[1], in[2], c.p);
      }, {test::rnd(c.x, seed), test::rnd(c.w, seed + 1), test::rnd({c.w[0]}, seed + 2)});
      seed += 3;
    }
  // no bias
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return conv2d(in[0], in[1], {}, test::conv_params({1, 1}, {1, 1}));
  }, {test::rnd({1, 2, 4, 4}, 90), test::rnd({3, 2, 3, 3}, 91)});
  // a strided (H/W-transposed) input
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return conv2d(in[0].transpose(2, 3), in[1], in[2], test::conv_params({1, 1}, {1, 0}));
  }, {test::rnd({1, 2, 5, 4}, 92), test::rnd({2, 2, 3, 2}, 93), test::rnd({2}, 94)});
}

// ---- matmul ------------------------------------------------------------------------------------
TEST_CASE("gradcheck: matmul's vector and broadcast shapes, strided operands, linear with a "
          "transposed weight and 1-d input", "[matmul][gradcheck]") {
  auto mm = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  test::require_gradcheck(mm, {test::rnd({3, 4}, 1), test::rnd({4}, 2)});
  test::require_gradcheck(mm, {test::rnd({4}, 3), test::rnd({4}, 4)});
  test::require_gradcheck(mm, {test::rnd({4}, 5), test::rnd({2, 4, 3}, 6)});
  test::require_gradcheck(mm, {test::rnd({2, 3, 4}, 7), test::rnd({4}, 8)});
  test::require_gradcheck(mm, {test::rnd({3, 4}, 9), test::rnd({2, 4, 2}, 10)});
  test::require_gradcheck(mm, {test::rnd({2, 1, 3, 4}, 11), test::rnd({1, 2, 4, 2}, 12)});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return matmul(in[0].slice(1, 0, 8, 2), in[1].slice(0, 1, 8, 2));  // no unit stride
  }, {test::rnd({3, 8}, 13), test::rnd({8, 2}, 14)});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return matmul(in[0].expand({3, 4}), in[1]);  // stride-0 rows
  }, {test::rnd({1, 4}, 15), test::rnd({4, 2}, 16)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1].t(), in[2]); },
                          {test::rnd({3, 4}, 17), test::rnd({4, 2}, 18), test::rnd({2}, 19)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                          {test::rnd({4}, 20), test::rnd({2, 4}, 21), test::rnd({2}, 22)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0].t(), in[1], in[2]); },
                          {test::rnd({4, 3}, 23), test::rnd({2, 4}, 24), test::rnd({2}, 25)});
}

// ---- reduce ------------------------------------------------------------------------------------
TEST_CASE("gradcheck: reductions over negative and several dims, keepdim, corrections, strided "
          "input", "[reduce][gradcheck]") {
  Tensor x = test::rnd({2, 3, 4}, 30);
  using F = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, F>> cases = {
      {"sum {-1, -3}", [](const Tensor& t) { return sum(t, {-1, -3}); }},
      {"mean all, keepdim", [](const Tensor& t) { return mean(t, {}, true); }},
      {"mean {-1, 0}", [](const Tensor& t) { return mean(t, {-1, 0}); }},
      {"amax {0, 2}, keepdim", [](const Tensor& t) { return amax(t, {0, 2}, true); }},
      {"amin {-1, 1}", [](const Tensor& t) { return amin(t, {-1, 1}); }},
      {"amax all", [](const Tensor& t) { return amax(t); }},
      {"var {0, 2}, correction 0, keepdim", [](const Tensor& t) { return var(t, {0, 2}, 0, true); }},
      {"var all", [](const Tensor& t) { return var(t); }},
      {"sum of a transposed view", [](const Tensor& t) { return sum(t.transpose(0, 2), {1}); }},
      {"amax of a transposed view", [](const Tensor& t) { return amax(t.transpose(0, 2), {-1}); }},
  };
  for (auto& [name, f] : cases) {
    INFO(name);
    test::require_gradcheck([f = f](const std::vector<Tensor>& in) { return f(in[0]); }, {x});
  }
}

// amax/amin's backward says "ties share the gradient evenly"; nothing tests it (finite
// differences cannot: a central difference gives 1/2 to each of any number of tied elements).
TEST_CASE("amax and amin share the gradient evenly among tied extrema", "[reduce]") {
  Tensor x = tensor({1, 3, 3, 2, 5, 5, 5, 0}, kF64).reshape({2, 4}).requires_grad_();
  sum(amax(x, {1}) * tensor({1, 2}, kF64)).backward();
  test::require_values(x.grad(), {0, 0.5, 0.5, 0, 2.0 / 3, 2.0 / 3, 2.0 / 3, 0}, 1e-12);
  Tensor y = tensor({4, -1, 2, -1, -1, 7}, kF64).reshape({3, 2}).requires_grad_();
  amin(y).backward();  // three tied minima over every dim
  test::require_values(y.grad(), {0, 1.0 / 3, 0, 1.0 / 3, 1.0 / 3, 0}, 1e-12);
}

// ---- elementwise -------------------------------------------------------------------------------
TEST_CASE("gradcheck: both operands broadcast, strided and channels-last inputs to the fused "
          "activation backwards", "[elementwise][gradcheck]") {
  auto positive = [](const Shape& s, uint64_t seed) {
    return (abs(test::rnd(s, seed, false)) + 0.5).detach().requires_grad_();
  };
  Tensor a = test::rnd({3, 1}, 140), b = test::rnd({1, 4}, 141);
  Tensor ap = positive({3, 1}, 142), bp = positive({1, 4}, 143);
  test::require_gradcheck([](const std::vector<Tensor>& in) { return in[0] + in[1]; }, {a, b});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return in[0] - in[1]; }, {a, b});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {a, b});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return in[0] / in[1]; }, {a, bp});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], in[1]); }, {ap, b});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return maximum(in[0], in[1]); }, {a, b});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return minimum(in[0], in[1]); }, {a, b});
  Tensor cond = gt(test::rnd({3, 4}, 144, false), zeros({}, kF64));
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});

  Tensor x = test::rnd({3, 4}, 145);
  for (auto f : std::vector<Tensor (*)(const Tensor&)>{exp, tanh, sigmoid, gelu, relu, abs, square, neg})
    test::require_gradcheck([f](const std::vector<Tensor>& in) { return f(in[0].t()); }, {x});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return gelu(tanh(sigmoid(test::channels_last(in[0])))); },
                          {test::rnd({2, 3, 2, 2}, 146)});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return relu(test::channels_last(in[0]) * in[1] + 0.1); },
                          {test::rnd({2, 3, 2, 2}, 147), test::rnd({1, 3, 1, 1}, 148)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], 3.0); }, {x});  // negative bases
  test::require_gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], -2.0); }, {positive({3, 4}, 149)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return clamp(in[0], -0.3, INFINITY); }, {x});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0].t(); }, {test::rnd({3, 3}, 150)});
}

// ---- autograd ----------------------------------------------------------------------------------
TEST_CASE("gradients flow through narrow, negative slices, squeeze, index_select of n-d and "
          "strided input, channels-last conversion, and negative-dim concat and stack",
          "[autograd][views][gradcheck]") {
  Tensor x = test::rnd({3, 4, 2}, 170);
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return concat({in[0].narrow(1, 1, 2).reshape({-1}), in[0].slice(-2, -3, -1).reshape({-1}),
                   in[0].select(-1, -1).reshape({-1})}, 0);
  }, {x});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return in[0].unsqueeze(0).unsqueeze(-1).squeeze().squeeze(0).unsqueeze(2).squeeze(2);
  }, {x});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return index_select(in[0], from_vector<int32_t>({2, 2, 0}, {3}));
  }, {x});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return index_select(in[0].transpose(0, 1), from_vector<int64_t>({3, 0, 3}, {3}));
  }, {x});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return stack({concat({in[0], in[1]}, -1), concat({in[1], in[0]}, -1)}, -1);
  }, {test::rnd({2, 3}, 171), test::rnd({2, 3}, 172)});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return in[0].contiguous(MemoryFormat::channels_last).permute({0, 2, 3, 1}).reshape({-1, 3}) * 2.0;
  }, {test::rnd({2, 3, 2, 2}, 173)});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return in[0].expand({3, 4}).unsqueeze(0).expand({2, 3, 4}).transpose(0, 2).reshape({-1});
  }, {test::rnd({3, 1}, 174)});
}

// ---- softmax -----------------------------------------------------------------------------------
TEST_CASE("gradcheck: softmax over negative dims, strided input, a size-1 dim and long rows",
          "[softmax][gradcheck]") {
  Tensor x = test::rnd({3, 4, 2}, 180);
  test::require_gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0], -1); }, {x});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return log_softmax(in[0], -2); }, {x});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0].transpose(0, 2), 1); }, {x});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return log_softmax(in[0].unsqueeze(1), 1); }, {x});
  // only a per-row scalar requires grad; it moves each element by its own amount (softmax is
  // blind to a shift of the whole row, whose gradient would be 0 whatever the backward did)
  Tensor rows = test::rnd({4, 40000}, 181, false), spread = test::rnd({1, 40000}, 183, false);
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return sum(softmax(rows + in[0] * spread, 1) * rows, {1}) + sum(log_softmax(rows * in[0], 1), {1});
  }, {test::rnd({4, 1}, 182)});
}

// ---- dropout -----------------------------------------------------------------------------------
TEST_CASE("gradcheck: dropout with p = 1 and in eval mode", "[dropout][gradcheck]") {
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return dropout(in[0], 1.0, true) + dropout(in[0], 0.5, false);
  }, {test::rnd({3, 4}, 2)});
}

// ---- models ------------------------------------------------------------------------------------
TEST_CASE("gradcheck: a small BERT layer in eval mode, post-LN and pre-LN, with its parameters",
          "[models][bert][gradcheck]") {
  for (bool pre_ln : {false, true}) {
    INFO("pre_ln " << pre_ln);
    auto c = models::BertConfig().hidden(4).heads(2).ffn(6).dropout(0.0).layer_norm_eps(1e-5).pre_ln(pre_ln);
    auto layer = std::make_shared<models::BertLayer>(c);
    layer->to(kF64);
    layer->eval();
    Tensor keep = from_vector<uint8_t>({1, 1, 0, 1, 1, 1}, {2, 3});
    GradcheckOptions opts;  // every weight, bias and layer-norm parameter too
    opts.params = layer->parameters();
    REQUIRE(opts.params.size() == 16);
    test::require_gradcheck([&](const std::vector<Tensor>& in) { return layer->forward(in[0], keep); },
                            {test::rnd({2, 3, 4}, 190)}, opts);
  }
}
