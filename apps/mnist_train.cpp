// Trains the classic Keras MNIST CNN (or an MLP) on MNIST or Fashion-MNIST and reports, per
// epoch, train loss, validation loss and accuracy, time and throughput.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "common/cli.h"
#include "common/run.h"

namespace {

std::string default_data_dir(const std::string& dataset) {
  if (dataset == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  return "data/mnist";
}

int run(int argc, char** argv) {
  cxxopts::Options opts("mnist_train",
                        "Train the Keras MNIST CNN (or MLP) on MNIST or Fashion-MNIST.");
  opts.add_options()
      ("data-dir", "folder with the IDX files (default: data/mnist, or "
                   "/usr/share/datasets/fashion-mnist for fashion-mnist)",
       cxxopts::value<std::string>())
      ("dataset", "mnist or fashion-mnist", cxxopts::value<std::string>()->default_value("mnist"))
      ("model", "cnn (Keras mnist_cnn) or mlp (Keras mnist_mlp)",
       cxxopts::value<std::string>()->default_value("cnn"))
      ("epochs", "training epochs", cxxopts::value<int64_t>()->default_value("3"))
      ("batch-size", "samples per step", cxxopts::value<int64_t>()->default_value("128"))
      ("optimizer", "adam, adamw or sgd", cxxopts::value<std::string>()->default_value("adam"))
      ("lr", "learning rate (default: 1e-3 for adam/adamw, 0.05 for sgd)",
       cxxopts::value<double>())
      ("momentum", "SGD momentum", cxxopts::value<double>()->default_value("0.9"))
      ("weight-decay", "weight decay (default: 0; 0.01 for adamw)", cxxopts::value<double>())
      ("lr-schedule", "cosine (decay to 0 over the run, per step) or constant",
       cxxopts::value<std::string>()->default_value("cosine"))
      ("normalize", "standardise pixels with the training set's mean and std (else [0, 1])",
       cxxopts::value<bool>()->default_value("true"))
      ("train-samples", "use only the first N training samples (0: all)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("test-samples", "validate on only the first N test samples (0: all)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))
      ("precision", "fp32, fp16 (autocast + loss scaling) or bf16 (autocast)",
       cxxopts::value<std::string>()->default_value("fp32"))
      ("seed", "random seed (weights, dropout, shuffling)",
       cxxopts::value<uint64_t>()->default_value("0"))
      ("threads", "CPU threads (default: OMP_NUM_THREADS or all cores)", cxxopts::value<int>())
      ("metrics", "append one JSON object per epoch to FILE", cxxopts::value<std::string>())
      ("profile", "time every backend primitive and print where the training time went")
      ("h,help", "show this help");
  apps::add_run_options(opts);
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;

  const std::string dataset = a["dataset"].as<std::string>();
  apps::check_choice("dataset", dataset, {"mnist", "fashion-mnist"});
  const std::string model_name = a["model"].as<std::string>();
  apps::check_choice("model", model_name, {"cnn", "mlp"});
  const std::string optim_name = a["optimizer"].as<std::string>();
  apps::check_choice("optimizer", optim_name, {"adam", "adamw", "sgd"});
  const std::string schedule = a["lr-schedule"].as<std::string>();
  apps::check_choice("lr-schedule", schedule, {"cosine", "constant"});
  const std::string precision = a["precision"].as<std::string>();
  apps::check_choice("precision", precision, {"fp32", "fp16", "bf16"});
  const int64_t epochs = a["epochs"].as<int64_t>(), batch = a["batch-size"].as<int64_t>();
  apps::check_count("epochs", epochs, apps::kMaxEpochs);
  apps::check_count("batch-size", batch, apps::kMaxBatch);
  apps::set_threads(a);
  const nn::Device device = apps::parse_device(a["device"].as<std::string>());
  nn::check_device(device);
  const int64_t train_samples = apps::check_non_negative("train-samples", a["train-samples"].as<int64_t>());
  const int64_t test_samples = apps::check_non_negative("test-samples", a["test-samples"].as<int64_t>());
  apps::check_rates(a, {"lr", "momentum", "weight-decay"});
  if (optim_name != "sgd" && a.count("momentum"))
    throw apps::UsageError("--momentum applies to --optimizer sgd only");
  const uint64_t seed = a["seed"].as<uint64_t>();
  nn::manual_seed(seed);
  apps::Parallel par("mnist_train", a);
  apps::check_run_options(a, par);  // before the data is read

  const std::string dir =
      a.count("data-dir") ? a["data-dir"].as<std::string>() : default_data_dir(dataset);
  if (!std::filesystem::exists(dir)) {
    std::string hint = dataset == "mnist"
        ? "run data/fetch_mnist.sh (needs the network), or use --dataset fashion-mnist "
          "(Debian package dataset-fashion-mnist)"
        : "install the Debian package dataset-fashion-mnist, or pass --data-dir";
    NN_ERROR("data folder '", dir, "' not found: ", hint);
  }
  auto train_set = nn::data::load_mnist(dir, true);
  auto test_set = nn::data::load_mnist(dir, false);
  auto first = [](std::shared_ptr<nn::data::TensorDataset>& set, int64_t n) {
    if (n > 0 && n < set->size())
      set = std::make_shared<nn::data::TensorDataset>(set->data().slice(0, 0, n),
                                                      set->target().slice(0, 0, n));
  };
  first(train_set, train_samples);
  first(test_set, test_samples);
  nn::Tensor train_x = train_set->data(), test_x = test_set->data();
  if (a["normalize"].as<bool>()) {
    nn::NoGradGuard ng;
    double mean = nn::mean(train_x).item();
    // (a floor, as cifar_train's: constant images would divide by zero)
    double std = std::max(std::sqrt(nn::var(train_x).item()), 1e-3);
    train_x = nn::mul(nn::add(train_x, -mean), 1.0 / std);
    test_x = nn::mul(nn::add(test_x, -mean), 1.0 / std);
  }
  // The whole data set lives on the training device (47 MB for MNIST).
  train_set = std::make_shared<nn::data::TensorDataset>(train_x.to(device),
                                                        train_set->target().to(device));
  test_set = std::make_shared<nn::data::TensorDataset>(test_x.to(device),
                                                       test_set->target().to(device));

  std::shared_ptr<nn::Module> model = model_name == "cnn" ? nn::models::keras_mnist_cnn()
                                                              : nn::models::keras_mnist_mlp();
  model->to(device);
  std::unique_ptr<nn::optim::Optimizer> optimizer;
  if (optim_name == "sgd") {
    optimizer = std::make_unique<nn::optim::SGD>(
        model->parameters(), nn::optim::SGDOptions(a.count("lr") ? a["lr"].as<double>() : 0.05)
                                 .momentum(a["momentum"].as<double>())
                                 .weight_decay(a.count("weight-decay") ? a["weight-decay"].as<double>() : 0.0));
  } else {
    double wd = a.count("weight-decay") ? a["weight-decay"].as<double>()
                                        : (optim_name == "adamw" ? 0.01 : 0.0);
    optimizer = std::make_unique<nn::optim::AdamW>(
        model->parameters(),
        nn::optim::AdamWOptions(a.count("lr") ? a["lr"].as<double>() : 1e-3).weight_decay(wd));
  }

  nn::data::DataLoaderOptions lo;
  lo.batch_size = batch;
  lo.seed = seed;
  par.shard(lo, true);
  nn::data::DataLoader train_loader(train_set, lo);
  nn::data::DataLoaderOptions vo = lo;
  vo.shuffle = false;
  vo.batch_size = 1000;
  par.shard(vo, false);
  nn::data::DataLoader val_loader(test_set, vo);
  std::unique_ptr<nn::optim::LRScheduler> scheduler;
  if (schedule == "cosine")
    scheduler = std::make_unique<nn::optim::CosineLR>(*optimizer, 0,
                                                      epochs * train_loader.num_batches());

  nn::amp::GradScaler scaler(nn::amp::GradScalerOptions{.enabled = precision == "fp16"});
  apps::Run run("mnist_train", a, argc, argv, par);
  apps::Position pos = run.start(
      {model.get(), optimizer.get(), scheduler.get(), &scaler, train_loader.num_batches(), batch});
  std::printf("mnist_train: %s %s on %s, %s, %lld train / %lld test samples, %lld parameters, "
              "batch %s, %s, %d threads\n",
              dataset.c_str(), model_name.c_str(), apps::describe_device(device).c_str(),
              precision.c_str(), (long long)train_set->size(), (long long)test_set->size(),
              (long long)model->num_parameters(), par.batch_note(batch).c_str(), optim_name.c_str(),
              nn::num_threads());
  apps::EpochProfile profile(a);
  const int64_t nb = train_loader.num_batches();
  for (int64_t epoch = pos.epoch; epoch <= epochs; ++epoch) {
    profile.begin();
    model->train();
    train_loader.set_epoch(epoch - 1, pos.batch);
    apps::EpochMeter meter(run, pos, epochs, nb, device);
    for (auto& b : train_loader)
      meter.step(apps::classifier_step(run, *model, *optimizer, scheduler.get(), scaler, precision,
                                       b.data, b.target, nn::CrossEntropyOptions{}),
                 b.data.shape()[0]);
    apps::EpochSummary s = meter.finish();
    profile.end(meter);
    {
      apps::PrecisionAutocast ac(precision);
      const apps::Evaluation e = apps::evaluate(*model, val_loader, std::nullopt, &par);
      s.val_loss = e.loss;
      s.val_accuracy = e.accuracy;
    }
    s.lr = optimizer->lr();
    s.loss_scale = scaler.options().enabled ? scaler.get_scale() : 0;
    pos = apps::Position{epoch + 1, 0, pos.step, 0, 0, 0};
    run.end_epoch(s, pos);
  }
  run.finish();
  profile.report();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("mnist_train", argc, argv, run); }
