// CUDA conv family on cuDNN (the long-standing descriptor API, present in cuDNN 8 and 9), in
// NCHW or, for channels-last tensors, NHWC: the layout whose FP16/BF16 kernels run on tensor
// cores without transposes.
// Each shape's descriptors and algorithms are made once (the algorithm by cuDNN's benchmark,
// Find, or with LIBNN_CUDNN_FIND=0 its heuristics) and cached, so a repeated call costs a map
// lookup; workspaces come from our caching allocator.
#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/util.h"

namespace nn::backend {
using namespace cuda;

namespace {
cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: NN_ERROR("conv2d: not implemented for dtype ", dtype_name(t), " on CUDA");
  }
}

// Descriptors for one convolution, destroyed with the object.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ConvDescs(const Shape& xs, const Shape& ws, const Shape& ys, const Conv2dParams& p, DType t,
            bool nhwc) {
    for (const Shape* s : {&xs, &ws, &ys}) check_cudnn_numel(*s, "conv2d");
    const cudnnDataType_t dt = cudnn_type(t);
    // Dims are always given as (N, C, H, W) and (O, C, KH, KW); the format says how they lie.
    const cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    NN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    NN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    NN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    NN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    NN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, fmt, dt, int(xs[0]), int(xs[1]),
                                              int(xs[2]), int(xs[3])));
    NN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, fmt, dt, int(ys[0]), int(ys[1]),
                                              int(ys[2]), int(ys[3])));
    NN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, dt, fmt, int(ws[0]), int(ws[1]),
                                              int(ws[2]), int(ws[3])));
    // 16-bit data accumulates in FP32 on tensor cores; FP32 data stays exact FP32 (no TF32).
    NN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv, int(p.padding[0]), int(p.padding[1]), int(p.stride[0]), int(p.stride[1]),
        int(p.dilation[0]), int(p.dilation[1]), CUDNN_CROSS_CORRELATION,
        t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    NN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, int(p.groups)));
    NN_CUDNN_CHECK(cudnnSetConvolutionMathType(
        conv, (t == DType::f16 || t == DType::bf16) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }
  ~ConvDescs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

// An algorithm with the math type Find measured it under (with tensor-op math allowed, Find
// also reports default-math entries; the descriptor is set to the chosen one before use).
struct Choice {
  int algo;
  size_t workspace;
  cudnnMathType_t math;
};

// (pass, device, layout, shapes, params, dtype, buffer alignments) as integers: cuDNN may
// choose kernels that need aligned buffers, so a choice holds for the alignments it was
// found on.
enum Pass { kFwd, kBwdData, kBwdFilter };
using PlanKey = std::array<int64_t, 24>;
PlanKey plan_key(Pass pass, int dev, const Shape& xs, const Shape& ws, const Conv2dParams& p,
                 DType t, bool nhwc, std::initializer_list<const Tensor*> buffers) {
  PlanKey k{pass, dev, nhwc, xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], ws[3],
            p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1],
            p.groups, int64_t(t)};
  size_t i = 19;
  for (const Tensor* b : buffers) k[i++] = address_alignment(b->data_ptr());
  return k;
}

// One pass of one shape: its descriptors (math type set to the current algorithm's) and the
// usable algorithms, best first; `current` moves on when one fails where it was chosen
// (guarded by g_plans_mu).
struct Plan {
  std::unique_ptr<ConvDescs> d;
  std::vector<Choice> choices;
  size_t current = 0;
};
std::mutex g_plans_mu;
// leaked on purpose, as the backends are: destroying cuDNN descriptors from static
// destructors at exit runs after the library may have gone
std::map<PlanKey, Plan>& g_plans = *new std::map<PlanKey, Plan>;

constexpr size_t kMaxWorkspace = size_t(1) << 30;

// The workspace Find may try algorithms with: 1 GiB, or a quarter as much at a time while the
// device cannot spare it (a nearly full GPU then gets the algorithms that fit, not an error).
Tensor find_workspace(CudaBackend& be, size_t& bytes) {
  for (bytes = kMaxWorkspace; bytes >= (size_t(1) << 20); bytes /= 4) {
    try {
      return be.scratch(bytes);
    } catch (const Error&) {
    }
  }
  bytes = 0;
  return be.scratch(0);
}

// The usable entries of a list cuDNN ranked (Find: by measured time; the heuristics: by
// expected time), in its order, filled by run(perf, requested, returned). For f32 and f64
// (`exact`) only FMA-math entries count: one reported with default math would run f32 in
// TF32 on Ampere and later, which libnn's FP32 never does.
template <typename Perf, typename Run>
std::vector<Choice> usable(int max_count, bool exact, Run&& run) {
  std::vector<Perf> perf(size_t(std::max(max_count, 1)));
  int returned = 0;
  run(perf.data(), int(perf.size()), &returned);
  std::vector<Choice> out;
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && (!exact || perf[i].mathType == CUDNN_FMA_MATH))
      out.push_back(Choice{int(perf[i].algo), perf[i].memory, perf[i].mathType});
  return out;
}

// LIBNN_CUDNN_FIND=0: cuDNN's heuristics choose (cudnnGet*Algorithm_v7, PyTorch's default,
// cudnn.benchmark = False) instead of its benchmark over every algorithm: no algorithm is run
// to choose, which spares compute-sanitizer instrumenting each (the GPU suite's memcheck
// step) at the cost of the measured fastest. Find still chooses where no heuristic is usable.
bool cudnn_find_enabled() {
  static const bool on = env_switch_on("LIBNN_CUDNN_FIND");
  return on;
}

// The plan for `key`, made on first use: descriptors, then the algorithm: cuDNN's benchmark
// (find(descs, perf, requested, returned, workspace, bytes) runs it over the pass's
// algorithms, on the real buffers, before they are computed for real), or its heuristics
// (guess(descs, perf, requested, returned)). Plans are never removed, so the reference stays
// valid.
template <typename Perf, typename Count, typename Find, typename Guess>
Plan& plan_for(CudaBackend& be, const PlanKey& key, const Shape& xs, const Shape& ws,
                     const Shape& ys, const Conv2dParams& p, DType t, bool nhwc, Count&& count,
                     Find&& find, Guess&& guess) {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second;
  Plan plan;
  plan.d = std::make_unique<ConvDescs>(xs, ws, ys, p, t, nhwc);
  int n = 0;
  NN_CUDNN_CHECK(count(&n));
  const ConvDescs& d = *plan.d;
  const bool exact = t == DType::f32 || t == DType::f64;
  if (!cudnn_find_enabled())
    plan.choices = usable<Perf>(n, exact, [&](auto* perf, int req, int* ret) { guess(d, perf, req, ret); });
  if (plan.choices.empty()) {
    size_t bytes = 0;
    Tensor w = find_workspace(be, bytes);
    plan.choices = usable<Perf>(n, exact, [&](auto* perf, int req, int* ret) {
      find(d, perf, req, ret, w.data_ptr(), bytes);
    });
  }
  NN_CHECK(!plan.choices.empty(), "cuDNN found no working convolution algorithm for this shape");
  NN_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.d->conv, plan.choices[0].math));
  return g_plans.emplace(key, std::move(plan)).first->second;
}

std::once_flag g_fallback_said;

// Runs a pass by its plan: exec(algorithm, workspace pointer, its bytes) gives cuDNN's status.
// An algorithm that fails where it was chosen gives way to the next of the ranked list, for
// good, as PyTorch's convolutions do: cuDNN refusing it for these buffers (the heuristics run
// nothing to choose), or its workspace not fitting in the memory free now (the heuristics'
// sizes are not checked against it, and Find's choice was made with more free). The last
// one's error is thrown.
template <typename Exec>
void run_plan(CudaBackend& be, Plan& plan, Exec&& exec) {
  for (;;) {
    size_t i;
    Choice c;
    {
      std::lock_guard<std::mutex> lock(g_plans_mu);
      i = plan.current;
      c = plan.choices[i];
    }
    const bool last = i + 1 == plan.choices.size();
    std::string failed;
    Tensor ws;
    try {
      ws = be.scratch(c.workspace);
    } catch (const Error& e) {
      if (last) throw;
      failed = detail::cat("its workspace of ", c.workspace, " bytes: ", e.what());
    }
    if (failed.empty()) {
      const cudnnStatus_t st = exec(c.algo, ws.data_ptr(), c.workspace);
      if (st == CUDNN_STATUS_SUCCESS) return;
      if (last || !cudnn_refused(st)) NN_CUDNN_CHECK(st);
      failed = detail::cat(cudnnGetErrorString(st), " (", int(st), ")");
    }
    std::lock_guard<std::mutex> lock(g_plans_mu);
    if (plan.current == i) {
      plan.current = i + 1;
      NN_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.d->conv, plan.choices[i + 1].math));
    }
    std::call_once(g_fallback_said, [&] {
      std::fprintf(stderr, "libnn: cuDNN convolution algorithm %d failed where it was chosen "
                   "(%s); the next one it ranked runs instead (said once)\n", c.algo,
                   failed.c_str());
    });
  }
}

// cuDNN's alpha = 1 and beta = 0, as double for f64 data and float otherwise.
struct Scale {
  float f1 = 1, f0 = 0;
  double d1 = 1, d0 = 0;
  bool f64;
  explicit Scale(DType t) : f64(t == DType::f64) {}
  const void* one() const { return f64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return f64 ? static_cast<const void*>(&d0) : &f0; }
};
}  // namespace

void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                                 const Conv2dParams& p) {
  activate();
  const bool nhwc = is_channels_last(x);
  Plan& plan = plan_for<cudnnConvolutionFwdAlgoPerf_t>(
      *this, plan_key(kFwd, index_, x.shape(), w.shape(), p, x.dtype(), nhwc, {&x, &w, &out}),
      x.shape(), w.shape(), out.shape(), p, x.dtype(), nhwc,
      [&](int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(cudnn_, n); },
      [&](const ConvDescs& d, auto* perf, int req, int* ret, void* ws, size_t wsb) {
        NN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            cudnn_, d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv, d.y, out.data_ptr(), req, ret,
            perf, ws, wsb));
      },
      [&](const ConvDescs& d, auto* perf, int req, int* ret) {
        NN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn_, d.x, d.w, d.conv, d.y, req,
                                                              ret, perf));
      });
  const ConvDescs& d = *plan.d;
  const Scale k(x.dtype());
  run_plan(*this, plan, [&](int algo, void* ws, size_t bytes) {
    return cudnnConvolutionForward(cudnn_, k.one(), d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv,
                                   cudnnConvolutionFwdAlgo_t(algo), ws, bytes, k.zero(), d.y,
                                   out.data_ptr());
  });
  if (bias.defined()) {  // out += bias over (N, ., H, W): a broadcast add in place
    const Shape& s = out.shape();
    Tensor o = nhwc ? nhwc_view(out) : out;  // contiguous either way
    Tensor b4 = nhwc ? make_view(bias, {s[0], s[2], s[3], s[1]}, {0, 0, 0, bias.strides()[0]},
                                 bias.offset())
                     : make_view(bias, s, {0, bias.strides()[0], 0, 0}, bias.offset());
    binary(BinaryOp::add, o, b4, o);
  }
}

void CudaBackend::conv2d_backward_input(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                        const Conv2dParams& p) {
  activate();
  const bool nhwc = is_channels_last(grad_x);
  Plan& plan = plan_for<cudnnConvolutionBwdDataAlgoPerf_t>(
      *this,
      plan_key(kBwdData, index_, grad_x.shape(), w.shape(), p, w.dtype(), nhwc,
               {&grad_out, &w, &grad_x}),
      grad_x.shape(), w.shape(), grad_out.shape(), p, w.dtype(), nhwc,
      [&](int* n) { return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnn_, n); },
      [&](const ConvDescs& d, auto* perf, int req, int* ret, void* ws, size_t wsb) {
        NN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            cudnn_, d.w, w.data_ptr(), d.y, grad_out.data_ptr(), d.conv, d.x, grad_x.data_ptr(),
            req, ret, perf, ws, wsb));
      },
      [&](const ConvDescs& d, auto* perf, int req, int* ret) {
        NN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn_, d.w, d.y, d.conv, d.x,
                                                                   req, ret, perf));
      });
  const ConvDescs& d = *plan.d;
  const Scale k(w.dtype());
  run_plan(*this, plan, [&](int algo, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardData(cudnn_, k.one(), d.w, w.data_ptr(), d.y,
                                        grad_out.data_ptr(), d.conv,
                                        cudnnConvolutionBwdDataAlgo_t(algo), ws, bytes, k.zero(),
                                        d.x, grad_x.data_ptr());
  });
}

void CudaBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                         const Conv2dParams& p) {
  activate();
  const bool nhwc = is_channels_last(x);
  Plan& plan = plan_for<cudnnConvolutionBwdFilterAlgoPerf_t>(
      *this,
      plan_key(kBwdFilter, index_, x.shape(), grad_w.shape(), p, x.dtype(), nhwc,
               {&x, &grad_out, &grad_w}),
      x.shape(), grad_w.shape(), grad_out.shape(), p, x.dtype(), nhwc,
      [&](int* n) { return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnn_, n); },
      [&](const ConvDescs& d, auto* perf, int req, int* ret, void* ws, size_t wsb) {
        NN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            cudnn_, d.x, x.data_ptr(), d.y, grad_out.data_ptr(), d.conv, d.w, grad_w.data_ptr(),
            req, ret, perf, ws, wsb));
      },
      [&](const ConvDescs& d, auto* perf, int req, int* ret) {
        NN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnn_, d.x, d.y, d.conv, d.w,
                                                                     req, ret, perf));
      });
  const ConvDescs& d = *plan.d;
  const Scale k(x.dtype());
  run_plan(*this, plan, [&](int algo, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardFilter(cudnn_, k.one(), d.x, x.data_ptr(), d.y,
                                          grad_out.data_ptr(), d.conv,
                                          cudnnConvolutionBwdFilterAlgo_t(algo), ws, bytes,
                                          k.zero(), d.w, grad_w.data_ptr());
  });
}

}  // namespace nn::backend
