// Differentiable tensor operations. Each computes through the tensor's device backend and,
// when an input requires grad, records its backward rule.
#pragma once
#include <nn/tensor.h>

#include <array>
#include <optional>
#include <vector>

namespace nn {

// ---- elementwise (broadcasting as in NumPy) -----------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor rdiv(const Tensor& a, double b);  // b / a
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor relu(const Tensor& x);  // NaN stays NaN
Tensor gelu(const Tensor& x);  // exact form: x * Phi(x)
Tensor silu(const Tensor& x);  // x * sigmoid(x) (swish)
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);  // x > 0 ? x : slope x
Tensor elu(const Tensor& x, double alpha = 1.0);  // x > 0 ? x : alpha (exp(x) - 1)
// log(1 + exp(beta x)) / beta, as PyTorch's: x itself where beta x > 20 (its threshold).
Tensor softplus(const Tensor& x, double beta = 1.0);
Tensor log1p(const Tensor& x);  // log(1 + x), accurate where x is small
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor clamp(const Tensor& x, double lo, double hi);
// Comparisons give 1 or 0 in the inputs' dtype; not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// cond != 0 ? a : b (differentiable in a and b)
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);

// The dtype two operands meet in: the wider one (f16 with bf16 meet at f32; integers with
// floats at the float). Binary ops convert both operands to it.
DType promote_types(DType a, DType b);
// The shape both broadcast to; throws nn::Error when they do not.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// ---- reductions (dims empty = all dims; negative dims count from the end) ---------------
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // i64
// Sums broadcast dims away so the result has `shape` (the gradient of expand).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- shape --------------------------------------------------------------------------------
// Tensors of mixed dtypes are concatenated (and stacked) in their common dtype
// (promote_types), as torch.cat and torch.stack.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of x along dim, as torch.split / torch.chunk: split in pieces of `size` (the last
// shorter when size does not divide the dim), chunk in `chunks` pieces of ceil(n / chunks)
// (fewer pieces when the dim is short). Each piece's gradient is a tensor of x's shape:
// meant for a few pieces (gates, heads), not one per step of a long sequence.
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Constant padding as torch.nn.functional.pad(x, pads, value=value): pads = {before, after}
// for the last dim, then for the one before it, and so on (at most two per dim); a negative
// amount crops.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);
// F.pad's other modes, amounts >= 0 in the same order: reflect (mirrored about the edge
// element, each amount less than its dim's size), replicate (the edge element repeated;
// a non-empty dim), circular (wrapped around, each amount at most the dim's size); any
// dims, where PyTorch takes the last one to three. Differentiable; a new tensor.
enum class PadMode { constant, reflect, replicate, circular };
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value = 0.0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Rows of x (dim 0) picked by an i64/i32 index tensor; differentiable in x.
Tensor index_select(const Tensor& x, const Tensor& index);

// ---- norms along a dim (PyTorch's F.normalize and F.cosine_similarity) ----------------------
// x / max(||x||_p, eps) along dim (p >= 1), the norm's gradient blocked where it is below eps
// (a zero row's gradient is the incoming one over eps, as PyTorch's). Computed in f32 for
// 16-bit x, the result in x's dtype (f32 under autocast, as PyTorch's).
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
// sum(x1 x2) / (max(||x1||, eps) max(||x2||, eps)) along dim, x1 and x2 of one dtype and
// broadcast (PyTorch's F.cosine_similarity; a norm below eps blocks its gradient, where
// PyTorch's still passes it); the result has dim removed.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);

// ---- linear algebra -------------------------------------------------------------------------
// 1-D and 2-D as usual; >2-D is batched with broadcasting batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in) * weight (out, in)^T + bias (out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// ---- convolution and pooling (NCHW) --------------------------------------------------------
struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};
// x (N, C, H, W), weight (O, C/groups, KH, KW), bias (O) or undefined
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const Conv2dParams& p = {});

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0 = same as kernel
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};  // max pool only (avg_pool2d refuses another)
  bool count_include_pad = true;          // avg pool only
  // Output size rounded up, as PyTorch's ceil_mode: a last window may hang past the input's
  // end (it then takes what it covers; an average divides by the part within input and
  // padding, or by the input part without count_include_pad).
  bool ceil_mode = false;
};
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

// ---- 1-D convolution and pooling (N, C, L): the 2-D ops over a (N, C, 1, L) view ----------
struct Conv1dParams {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};
// x (N, C, L), weight (O, C/groups, K), bias (O) or undefined. An (N, L, C) tensor
// transposed to (N, C, L) needs no copy: the view is channels-last, and the output is laid
// out as the input (a (N, L, O) tensor seen as (N, O, L)).
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const Conv1dParams& p = {});
struct Pool1dParams {
  int64_t kernel = 2;
  int64_t stride = 0;  // 0 = same as kernel
  int64_t padding = 0;
  int64_t dilation = 1;  // max pool only
  bool count_include_pad = true;  // avg pool only
  bool ceil_mode = false;         // as Pool2dParams::ceil_mode
};
Tensor max_pool1d(const Tensor& x, const Pool1dParams& p);
Tensor avg_pool1d(const Tensor& x, const Pool1dParams& p);
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);

// Mean of the embeddings of each row's real tokens: weight (V, D), ids (N, L), keep (N, L)
// (nonzero = a real token; undefined = all) -> (N, D). A row without tokens gives zeros.
Tensor embedding_bag(const Tensor& weight, const Tensor& ids, const Tensor& keep = {});

// ---- attention --------------------------------------------------------------------------------
// softmax(q k^T * scale) v over the last two dims, fused: no (T x S) score matrix is kept.
// q (..., T, D), k (..., S, D), v (..., S, E) with equal leading dims (e.g. (N, heads));
// key_padding_mask (N, S), nonzero = attend, applied to every head of sample n. scale
// defaults to 1/sqrt(D). A query whose keys are all masked gets zeros; a NaN or +inf score
// makes its query's row NaN, as softmax would (a -inf score weighs nothing, as a masked key).
// dropout_p > 0 drops attention probabilities (after the softmax, before the product with v)
// and scales the rest by 1/(1-p), as dropout(softmax(...), dropout_p, true, gen) would with
// the same generator, without the (T x S) matrix; pass 0 outside training.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& key_padding_mask = {},
                                    std::optional<double> scale = std::nullopt,
                                    double dropout_p = 0.0, Generator* gen = nullptr);
// The same over one packed projection, as a fused QKV linear layer gives it: qkv (N, T, 3,
// heads, D) holds q, k and v of every head (a (N, T, 3 * heads * D) output reshaped), and the
// result is (N, T, heads, D), so neither side needs a transpose or a copy: the kernels read
// the heads where they lie, and the gradient comes back as one (N, T, 3, heads, D) tensor.
// key_padding_mask (N, T); dropout as above (the same draws as scaled_dot_product_attention
// on the permuted q, k, v).
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, const Tensor& key_padding_mask = {},
                                           std::optional<double> scale = std::nullopt,
                                           double dropout_p = 0.0, Generator* gen = nullptr);

// ---- activations, normalisation, losses --------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

enum class Reduction { none, mean, sum };
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;  // targets equal to this count neither in loss nor in the mean
};
// logits (N, C) or (N, C, d...), target i64 of class indices (N) or (N, d...)
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& opts = {});
// PyTorch's nll_loss: input (N, C) or (N, C, d...) of log-probabilities (log_softmax's
// output), target i64/i32 class indices (N) or (N, d...): -weight[t] input[t] per element (0
// where the target is ignore_index); the mean divides by the counted elements' weights. weight
// (C, floating, on the input's device) is optional and not differentiated. A target outside [0, C)
// other than ignore_index is an error (on CUDA reported at the next synchronisation, as an
// index out of range). Ignored elements are never read (an inf there gives no NaN). cross_entropy(logits, ...) is log_softmax and nll_loss in one op.
struct NllLossOptions {
  Tensor weight;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
};
Tensor nll_loss(const Tensor& input, const Tensor& target, const NllLossOptions& opts = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// |input - target|, as PyTorch's l1_loss (its gradient 0 where they are equal).
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// PyTorch's smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input -
// target; beta 0 is l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::mean, double beta = 1.0);
// PyTorch's huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (delta > 0).
Tensor huber_loss(const Tensor& input, const Tensor& target,
                  Reduction reduction = Reduction::mean, double delta = 1.0);
// How many rows (N, C) of logits have their target class (N, i64/i32) among their k
// largest: those with fewer than k logits above the target's (a tie counts for the target; a
// NaN logit counts as above it, as torch.topk ranks NaN first, and a NaN target's row is not
// counted). An i64 scalar on the logits' device; not differentiable. k = 1 is top-1 accuracy's count but for ties, which argmax breaks by the
// first index.
Tensor top_k_correct(const Tensor& logits, const Tensor& target, int64_t k);
// PyTorch's binary_cross_entropy_with_logits: for logits x and targets y in [0, 1] (same
// shape), (1 - y) x + (1 + (pos_weight - 1) y) softplus(-x), times weight; weight and
// pos_weight broadcast to the input's shape (pos_weight usually one per class of a
// multi-label target, along the last dim). Under autocast in f32, as PyTorch's; differentiable in every tensor.
struct BceWithLogitsOptions {
  Tensor weight;
  Tensor pos_weight;
  Reduction reduction = Reduction::mean;
};
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceWithLogitsOptions& opts = {});

// Zeroes elements with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

// x (N, C, ...). In training uses batch statistics and updates running_* in place (momentum
// as in PyTorch: new = (1-m)*old + m*batch, unbiased variance); in eval uses running_*.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training,
                  double momentum = 0.1, double eps = 1e-5);
// relu(batch_norm(x) + residual), the tail of a ResNet block, in one pass over the data
// forward and one backward where the backend fuses it. residual may be undefined (then
// relu(batch_norm(x))); else it has x's shape, dtype and device.
Tensor batch_norm_relu(const Tensor& x, const Tensor& residual, const Tensor& running_mean,
                       const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                       bool training, double momentum = 0.1, double eps = 1e-5);
// Normalises over the trailing dims given by normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// x (N, C, ...) normalised over each of num_groups groups of C / num_groups channels (with all
// their positions), then weight (C) and bias (C) per channel, as PyTorch's group_norm; in
// f32 under autocast, else in x's dtype.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// layer_norm(add(residual, dropout(x, p, training, gen)), ...): a post-LN transformer's
// residual step, the same values, draws and gradients, in one pass where the backend has
// one (CUDA) instead of four (dropout, the promotion of a 16-bit x, the add, the norm).
Tensor dropout_add_layer_norm(const Tensor& x, const Tensor& residual,
                              const Shape& normalized_shape, const Tensor& weight,
                              const Tensor& bias, double p, bool training, double eps = 1e-5,
                              Generator* gen = nullptr);
// weight (V, D), indices (any shape, i64/i32) -> (indices..., D). Rows at padding_idx get no
// gradient (a negative padding_idx counts from the end: -1 is row V - 1).
Tensor embedding(const Tensor& weight, const Tensor& indices,
                 std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace nn
