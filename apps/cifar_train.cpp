// Trains a CIFAR ResNet (He et al.: ResNet-20, -32, -44, -56, -110) on CIFAR-10 or CIFAR-100
// (binary versions) or on a synthetic stand-in, with the usual recipe: random crops of the
// image padded by 4 and horizontal flips, SGD momentum, a cosine schedule; FP32 or mixed
// precision; data parallel across processes and machines like every app.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/cli.h"
#include "common/run.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options opts("cifar_train", "Train a CIFAR ResNet on CIFAR-10/100 or on synthetic images.");
  opts.add_options()
      ("data", "cifar (the binary CIFAR-10 or CIFAR-100 in --data-dir) or synthetic",
       cxxopts::value<std::string>()->default_value("cifar"))
      ("data-dir", "the unpacked cifar-10-batches-bin/ or cifar-100-binary/, or the folder "
                   "holding one of them (data/fetch_cifar.sh unpacks into data/cifar)",
       cxxopts::value<std::string>()->default_value("data/cifar"))
      ("synthetic-samples", "synthetic data: training images (a fifth as many for validation)",
       cxxopts::value<int64_t>()->default_value("10000"))
      ("num-classes", "synthetic data: classes", cxxopts::value<int64_t>()->default_value("10"))
      ("depth", "ResNet depth, 6n + 2: 20, 32, 44, 56, 110, ...", cxxopts::value<int64_t>()->default_value("20"))
      ("width", "channels of the first stage (16 in the paper)", cxxopts::value<int64_t>()->default_value("16"))
      ("epochs", "training epochs", cxxopts::value<int64_t>()->default_value("30"))
      ("batch-size", "images per step (per process when data parallel)",
       cxxopts::value<int64_t>()->default_value("128"))
      ("lr", "peak learning rate (default: 0.1 x images per step / 128)", cxxopts::value<double>())
      ("momentum", "SGD momentum", cxxopts::value<double>()->default_value("0.9"))
      ("weight-decay", "weight decay (not on batch norm parameters and biases)",
       cxxopts::value<double>()->default_value("5e-4"))
      ("label-smoothing", "label smoothing", cxxopts::value<double>()->default_value("0"))
      ("warmup-epochs", "linear warm-up before the cosine decay", cxxopts::value<double>()->default_value("0"))
      ("augment", "random crops (padding 4) and horizontal flips", cxxopts::value<bool>()->default_value("true"))
      ("train-samples", "use only the first N training images (0: all)", cxxopts::value<int64_t>()->default_value("0"))
      ("test-samples", "validate on only the first N test images (0: all)", cxxopts::value<int64_t>()->default_value("0"))
      ("precision", "fp32, fp16 (autocast + loss scaling) or bf16", cxxopts::value<std::string>()->default_value("fp32"))
      ("device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))
      ("layout", "memory format: nhwc (channels-last), nchw, or auto (the one the device computes --precision in natively: nhwc, on CUDA and on the CPU)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("seed", "random seed (weights, shuffling, augmentation)", cxxopts::value<uint64_t>()->default_value("0"))
      ("threads", "CPU threads (default: OMP_NUM_THREADS or all cores)", cxxopts::value<int>())
      ("metrics", "append one JSON object per epoch to FILE", cxxopts::value<std::string>())
      ("profile", "time every backend primitive and print where the training time went")
      ("h,help", "show this help");
  apps::add_run_options(opts);
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;

  const std::string data = a["data"].as<std::string>();
  apps::check_choice("data", data, {"cifar", "synthetic"});
  // Flags that would be silently ignored with the other kind of data.
  for (const char* f : {"synthetic-samples", "num-classes"})
    if (data != "synthetic" && a.count(f))
      throw apps::UsageError(std::string("--") + f + " applies to --data synthetic only");
  if (data == "synthetic" && a.count("data-dir"))
    throw apps::UsageError("--data-dir applies to --data cifar only");
  const std::string precision = a["precision"].as<std::string>();
  apps::check_choice("precision", precision, {"fp32", "fp16", "bf16"});
  const std::string layout = a["layout"].as<std::string>();
  apps::check_choice("layout", layout, {"auto", "nhwc", "nchw"});
  const int64_t epochs = apps::check_count("epochs", a["epochs"].as<int64_t>(), apps::kMaxEpochs);
  const int64_t batch = apps::check_count("batch-size", a["batch-size"].as<int64_t>(), apps::kMaxBatch);
  const int64_t depth = apps::check_at_most("depth", a["depth"].as<int64_t>(), apps::kMaxLayers);
  if (depth < 8 || (depth - 2) % 6 != 0)
    throw apps::UsageError("--depth must be 6n + 2 with n >= 1 (20, 32, 44, 56, 110, ...), got " +
                           std::to_string(depth));
  const int64_t width = apps::check_positive("width", a["width"].as<int64_t>());
  const int64_t train_samples = apps::check_non_negative("train-samples", a["train-samples"].as<int64_t>());
  const int64_t test_samples = apps::check_non_negative("test-samples", a["test-samples"].as<int64_t>());
  apps::set_threads(a);
  const nn::Device device = apps::parse_device(a["device"].as<std::string>());
  nn::check_device(device);
  const bool nhwc = apps::channels_last(layout, device, precision);
  apps::check_resnet_recipe(a, epochs);
  const uint64_t seed = a["seed"].as<uint64_t>();
  nn::manual_seed(seed);
  apps::Parallel par("cifar_train", a);
  apps::check_run_options(a, par);  // before the data is read

  std::shared_ptr<nn::data::ImageDataset> train_set, test_set;
  std::string what;
  if (data == "synthetic") {
    const int64_t n = apps::check_count("synthetic-samples", a["synthetic-samples"].as<int64_t>(), apps::kMaxSamples);
    const int64_t classes = apps::check_classes("num-classes", a["num-classes"].as<int64_t>());
    // The classes' patterns are fixed; training and test images differ (seed 1 and 2).
    train_set = nn::data::synthetic_images(n, classes, 32, 1);
    test_set = nn::data::synthetic_images(std::max<int64_t>(1, n / 5), classes, 32, 2);
    what = "synthetic images";
  } else {
    const std::string dir = a["data-dir"].as<std::string>();
    if (!std::filesystem::exists(dir))
      NN_ERROR("data folder '", dir, "' not found: run data/fetch_cifar.sh (needs the network), pass "
               "--data-dir, or use --data synthetic");
    train_set = nn::data::load_cifar(dir, true);
    test_set = nn::data::load_cifar(dir, false);
    what = train_set->classes().size() == 100 ? "CIFAR-100" : "CIFAR-10";
  }
  if (train_samples > 0) train_set = train_set->head(train_samples);
  if (test_samples > 0) test_set = test_set->head(test_samples);
  // Standardise with the training images' per-channel statistics.
  auto [mean, stdv] = train_set->channel_stats();
  for (auto& s : stdv) s = std::max(s, 1e-3);
  train_set->set_normalization(mean, stdv);
  test_set->set_normalization(mean, stdv);
  if (a["augment"].as<bool>()) train_set->set_augment({.pad = 4, .flip = true, .seed = seed});
  const int64_t classes = int64_t(train_set->classes().size());

  nn::data::DataLoaderOptions lo;
  lo.batch_size = batch;
  lo.seed = seed;
  lo.drop_last = true;  // batch norm on a last batch of one or two images is noise
  par.shard(lo, true);
  NN_CHECK(train_set->size() / par.size() >= batch, "the training set's ", train_set->size(),
           " images hold no full batch of ", batch, par.size() > 1 ? " per process" : "");
  nn::data::DataLoader loader(train_set, lo);
  nn::data::DataLoaderOptions vo;
  vo.batch_size = 500;
  vo.shuffle = false;
  par.shard(vo, false);
  nn::data::DataLoader val(test_set, vo);
  const int64_t per_epoch = loader.num_batches();

  auto model = nn::models::cifar_resnet(nn::models::CifarResNetOptions()
                                            .depth(depth)
                                            .width(width)
                                            .num_classes(classes)
                                            .channels_last(nhwc));
  model->to(device);
  const double lr = a.count("lr") ? a["lr"].as<double>() : 0.1 * double(batch * par.size()) / 128.0;
  nn::optim::SGD opt(apps::decay_groups(*model),
                     nn::optim::SGDOptions(lr).momentum(a["momentum"].as<double>())
                         .weight_decay(a["weight-decay"].as<double>()));
  nn::optim::CosineLR schedule(opt, int64_t(a["warmup-epochs"].as<double>() * double(per_epoch)),
                               epochs * per_epoch);
  nn::amp::GradScaler scaler(nn::amp::GradScalerOptions{.enabled = precision == "fp16"});
  nn::CrossEntropyOptions ce;
  ce.label_smoothing = a["label-smoothing"].as<double>();

  apps::Run run("cifar_train", a, argc, argv, par);
  apps::Position pos = run.start({model.get(), &opt, &schedule, &scaler, per_epoch, batch});
  std::printf("cifar_train: ResNet-%lld (%lld parameters) on %s, %lld classes, %lld train / %lld test "
              "images, batch %s, %s %s on %s, %d threads\n",
              (long long)depth, (long long)model->num_parameters(), what.c_str(), (long long)classes,
              (long long)train_set->size(), (long long)test_set->size(), par.batch_note(batch).c_str(),
              precision.c_str(), nhwc ? "nhwc" : "nchw", apps::describe_device(device).c_str(),
              nn::num_threads());
  apps::EpochProfile profile(a);
  for (int64_t epoch = pos.epoch; epoch <= epochs; ++epoch) {
    profile.begin();
    model->train();
    loader.set_epoch(epoch - 1, pos.batch);
    apps::EpochMeter meter(run, pos, epochs, per_epoch, device, "images/s");
    for (auto& b : loader) {
      nn::Tensor x = b.data.to(device), y = b.target.to(device);
      meter.step(apps::classifier_step(run, *model, opt, &schedule, scaler, precision, x, y, ce), x.shape()[0]);
    }
    apps::EpochSummary s = meter.finish();
    profile.end(meter);
    {
      apps::PrecisionAutocast ac(precision);
      const apps::Evaluation e = apps::evaluate(*model, val, device, &par, /*top5=*/true);
      s.val_loss = e.loss;
      s.val_accuracy = e.accuracy;
      s.val_top5 = e.top5;
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

int main(int argc, char** argv) { return apps::guarded_main("cifar_train", argc, argv, run); }
