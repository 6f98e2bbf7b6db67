// Trains ResNet-50: on synthetic images (the default, as tf_cnn_benchmarks does, for
// throughput) or on an ImageNet-style folder (DIR/train/<class>/*.jpg, DIR/val/...), in FP32
// or mixed precision, with SGD momentum, label smoothing and a cosine schedule with warm-up.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/cli.h"
#include "common/run.h"

namespace {

// A fixed pool of random batches resident on the device: measures the training step alone.
class SyntheticImages : public nn::data::Dataset {
 public:
  SyntheticImages(int64_t n, int64_t size, int64_t classes, nn::Device d, uint64_t seed) {
    nn::Generator g(seed);
    x_ = nn::randn({n, 3, size, size}, nn::kF32, &g).to(d);
    y_ = nn::randint(0, classes, {n}, nn::kI64, &g).to(d);
  }
  int64_t size() const override { return x_.shape()[0]; }
  nn::data::Batch get_batch(const std::vector<int64_t>& idx) const override {
    nn::Tensor i = nn::from_vector(idx, {int64_t(idx.size())}).to(x_.device());
    return {nn::index_select(x_, i), nn::index_select(y_, i)};
  }

 private:
  nn::Tensor x_, y_;
};

int run(int argc, char** argv) {
  cxxopts::Options opts("resnet50_train", "Train ResNet-50 on synthetic images or an ImageNet-style folder.");
  opts.add_options()
      ("data", "'synthetic', or a folder with train/ (and val/) holding one folder per class",
       cxxopts::value<std::string>()->default_value("synthetic"))
      ("batch-size", "images per step", cxxopts::value<int64_t>()->default_value("128"))
      ("precision", "fp32, fp16 (autocast + loss scaling) or bf16",
       cxxopts::value<std::string>()->default_value("fp32"))
      ("epochs", "epochs", cxxopts::value<int64_t>()->default_value("1"))
      ("num-batches", "steps per epoch (synthetic: default 100; folder: 0 = the whole set)",
       cxxopts::value<int64_t>())
      ("image-size", "training crop size", cxxopts::value<int64_t>()->default_value("224"))
      ("max-image-pixels", "a folder's JPEG larger than this (width x height) stops the run with its name; 0 = no limit",
       cxxopts::value<int64_t>()->default_value("178956970"))
      ("num-classes", "classes of synthetic data", cxxopts::value<int64_t>()->default_value("1000"))
      ("lr", "peak learning rate (default: 0.1 x batch x processes / 256)", cxxopts::value<double>())
      ("momentum", "SGD momentum", cxxopts::value<double>()->default_value("0.9"))
      ("weight-decay", "weight decay", cxxopts::value<double>()->default_value("1e-4"))
      ("label-smoothing", "label smoothing", cxxopts::value<double>()->default_value("0.1"))
      ("warmup-epochs", "linear warm-up before the cosine decay", cxxopts::value<double>()->default_value("0"))
      ("device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cuda"))
      ("layout", "memory format: nhwc (channels-last), nchw, or auto (the one the device computes --precision in natively: nhwc, on CUDA and on the CPU)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("seed", "random seed", cxxopts::value<uint64_t>()->default_value("0"))
      ("threads", "CPU threads", cxxopts::value<int>())
      ("metrics", "append one JSON object per epoch to FILE", cxxopts::value<std::string>())
      ("profile", "time every backend primitive and print where the training time went")
      ("h,help", "show this help");
  apps::add_run_options(opts);
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;
  const std::string data = a["data"].as<std::string>();
  if (data != "synthetic" && a.count("num-classes"))  // it would be silently ignored
    throw apps::UsageError("--num-classes applies to --data synthetic only (a folder's classes are its subfolders)");
  const std::string precision = a["precision"].as<std::string>();
  apps::check_choice("precision", precision, {"fp32", "fp16", "bf16"});
  const int64_t batch = apps::check_count("batch-size", a["batch-size"].as<int64_t>(), apps::kMaxBatch);
  const int64_t epochs = apps::check_count("epochs", a["epochs"].as<int64_t>(), apps::kMaxEpochs);
  const int64_t size = apps::check_count("image-size", a["image-size"].as<int64_t>(), 4096);
  const int64_t max_pixels = a["max-image-pixels"].as<int64_t>();
  if (max_pixels < 0) throw apps::UsageError("--max-image-pixels must be 0 (no limit) or more, got " + std::to_string(max_pixels));
  apps::set_threads(a);
  const nn::Device device = apps::parse_device(a["device"].as<std::string>());
  nn::check_device(device);
  apps::check_resnet_recipe(a, epochs);
  const uint64_t seed = a["seed"].as<uint64_t>();
  nn::manual_seed(seed);
  const std::string layout = a["layout"].as<std::string>();
  apps::check_choice("layout", layout, {"auto", "nhwc", "nchw"});
  const bool nhwc = apps::channels_last(layout, device, precision);
  apps::Parallel par("resnet50_train", a);
  apps::check_run_options(a, par);  // before the data is read

  std::shared_ptr<nn::data::Dataset> train_set, val_set;
  int64_t classes = a["num-classes"].as<int64_t>();
  int64_t steps = a.count("num-batches") ? a["num-batches"].as<int64_t>() : 0;
  if (steps < 0) throw apps::UsageError("--num-batches must be 0 or more, got " + std::to_string(steps));
  apps::check_at_most("num-batches", steps, apps::kMaxBatches);
  if (data == "synthetic") {
    apps::check_classes("num-classes", classes);
    if (steps == 0) steps = 100;
    // Four distinct batches cycled through: enough to see the loss move. Data parallel: each
    // rank makes its own four (not a shard of one pool, which would shrink with more ranks).
    train_set = std::make_shared<SyntheticImages>(batch * 4, size, classes, device, seed + 1 + uint64_t(par.rank()));
  } else {
    namespace fs = std::filesystem;
    const std::string train_dir = fs::is_directory(fs::path(data) / "train") ? (fs::path(data) / "train").string() : data;
    nn::data::ImageFolderOptions io;
    io.size = size;
    io.seed = seed;
    io.max_pixels = max_pixels;
    auto folder = std::make_shared<nn::data::ImageFolder>(train_dir, io);
    classes = int64_t(folder->classes().size());
    NN_CHECK(classes >= 2, "'", train_dir, "' has ", classes, " class folder: a classifier needs two classes");
    train_set = folder;
    if (fs::is_directory(fs::path(data) / "val")) {
      io.train = false;
      auto val = std::make_shared<nn::data::ImageFolder>((fs::path(data) / "val").string(), io);
      // Labels are class indices in sorted order: other class folders would score images
      // against the wrong classes.
      NN_CHECK(val->classes() == folder->classes(), "'", (fs::path(data) / "val").string(),
               "' has other class folders than '", train_dir, "' (", val->classes().size(),
               " vs ", folder->classes().size(), " classes): they must be the same");
      val_set = val;
    }
  }
  nn::data::DataLoaderOptions lo;
  lo.batch_size = batch;
  lo.seed = seed;
  lo.drop_last = true;
  if (data != "synthetic") par.shard(lo, true);
  nn::data::DataLoader loader(train_set, lo);
  const int64_t per_epoch = steps > 0 ? std::min<int64_t>(steps, data == "synthetic" ? steps : loader.num_batches())
                                      : loader.num_batches();
  NN_CHECK(data == "synthetic" || per_epoch > 0, "the training set has fewer images than one batch of ", batch);

  auto model = nn::models::resnet50(
      nn::models::ResNetOptions().num_classes(classes).zero_init_residual(true).channels_last(nhwc));
  model->to(device);
  // the linear scaling rule, on the batch of a whole step (every process's)
  const double lr = a.count("lr") ? a["lr"].as<double>() : 0.1 * double(batch * par.size()) / 256.0;
  // No weight decay on BN parameters and biases (the usual ResNet recipe).
  nn::optim::SGD opt(apps::decay_groups(*model),
                     nn::optim::SGDOptions(lr).momentum(a["momentum"].as<double>())
                         .weight_decay(a["weight-decay"].as<double>()));
  const int64_t total = epochs * per_epoch;
  nn::optim::CosineLR schedule(opt, int64_t(a["warmup-epochs"].as<double>() * double(per_epoch)), total);
  nn::amp::GradScaler scaler(nn::amp::GradScalerOptions{.enabled = precision == "fp16"});
  nn::CrossEntropyOptions ce;
  ce.label_smoothing = a["label-smoothing"].as<double>();

  apps::Run run("resnet50_train", a, argc, argv, par);
  apps::Position pos = run.start({model.get(), &opt, &schedule, &scaler, per_epoch, batch});
  std::printf("resnet50_train: %s data, %lld classes, batch %s, %s %s on %s, %lld steps per "
              "epoch\n", data == "synthetic" ? "synthetic" : data.c_str(), (long long)classes,
              par.batch_note(batch).c_str(), precision.c_str(), nhwc ? "nhwc" : "nchw",
              apps::describe_device(device).c_str(), (long long)per_epoch);
  apps::EpochProfile profile(a);
  for (int64_t epoch = pos.epoch; epoch <= epochs; ++epoch) {
    profile.begin();
    model->train();
    apps::EpochMeter meter(run, pos, epochs, per_epoch, device, "images/s");
    // A synthetic epoch may be longer than the pool: each pass over it takes the loader's
    // next epoch (its next order), so a resumed one starts in the pass it stopped in.
    const int64_t pool = loader.num_batches();
    loader.set_epoch(epoch - 1 + pos.batch / pool, pos.batch % pool);
    while (pos.batch < per_epoch) {
      for (auto& batch_data : loader) {
        if (pos.batch >= per_epoch) break;
        nn::Tensor x = batch_data.data.to(device), y = batch_data.target.to(device);
        meter.step(apps::classifier_step(run, *model, opt, &schedule, scaler, precision, x, y, ce), x.shape()[0]);
        // (before the loop's ++ waits for a batch past the epoch: --num-batches shorter than
        // the set never uses it, and a file there that fails to decode cost the epoch)
        if (pos.batch >= per_epoch) break;
      }
    }
    apps::EpochSummary s = meter.finish();
    profile.end(meter);
    if (val_set) {
      nn::data::DataLoaderOptions vo;
      vo.batch_size = batch;
      vo.shuffle = false;
      par.shard(vo, false);
      nn::data::DataLoader val(val_set, vo);
      apps::PrecisionAutocast ac(precision);
      const apps::Evaluation e = apps::evaluate(*model, val, device, &par, /*top5=*/true);
      s.val_loss = e.loss;
      s.val_accuracy = e.accuracy;
      s.val_top5 = e.top5;
    } else {
      s.val_loss = std::nan("");
      s.val_accuracy = std::nan("");
    }
    s.lr = opt.lr();
    s.loss_scale = scaler.options().enabled ? scaler.get_scale() : 0;
    pos = apps::Position{epoch + 1, 0, pos.step, 0, 0, 0};
    run.end_epoch(s, pos);
  }
  run.finish();
  profile.report();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("resnet50_train", argc, argv, run); }
