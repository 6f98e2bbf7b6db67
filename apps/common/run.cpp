#include "common/run.h"

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>

#include "common/cli.h"

namespace apps {

namespace {
// Every digit a double has, so a resumed run reads back the value it saved.
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}
double to_double(const std::map<std::string, std::string>& m, const std::string& k) {
  auto it = m.find(k);
  NN_CHECK(it != m.end(), "checkpoint metadata lacks '", k, "'");
  double v = NAN;
  try {
    v = std::stod(it->second);
  } catch (const std::exception&) {
  }
  NN_CHECK(std::isfinite(v), "checkpoint metadata '", k, "' is not a finite number: '",
           it->second, "'");
  return v;
}
// A count (epoch, batch, samples, processes): a whole number >= 0.
int64_t to_count(const std::map<std::string, std::string>& m, const std::string& k) {
  const double v = to_double(m, k);
  NN_CHECK(v >= 0 && v == std::trunc(v) && v < 9.0e15, "checkpoint metadata '", k,
           "' is not a count: ", m.at(k));
  return int64_t(v);
}
}  // namespace

void add_run_options(cxxopts::Options& opts) {
  opts.add_options("long runs")
      ("checkpoint-dir", "write checkpoints (safetensors) into DIR", cxxopts::value<std::string>())
      ("checkpoint-every", "also checkpoint every N steps (0: at the end of each epoch only)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("keep-last", "checkpoints to keep", cxxopts::value<int>()->default_value("3"))
      ("resume", "continue from the newest valid checkpoint in --checkpoint-dir")
      ("log-every", "check the loss (NaN) and log it every N steps",
       cxxopts::value<int64_t>()->default_value("50"))
      ("tensorboard", "write TensorBoard scalars into DIR", cxxopts::value<std::string>())
      ("notify-cmd", "run CMD (through sh) after each epoch with the summary on its stdin",
       cxxopts::value<std::string>())
      ("save-model", "write the trained model's tensors to FILE (safetensors)",
       cxxopts::value<std::string>());
  add_parallel_options(opts);
}

void check_run_options(const cxxopts::ParseResult& a, const Parallel& par) {
  const bool has_dir = a.count("checkpoint-dir") > 0, resume = flag(a, "resume");
  if (a["keep-last"].as<int>() < 1)
    throw UsageError("--keep-last must be at least 1, got " + std::to_string(a["keep-last"].as<int>()));
  if (a["checkpoint-every"].as<int64_t>() < 0)
    throw UsageError("--checkpoint-every must be 0 or more, got " +
                     std::to_string(a["checkpoint-every"].as<int64_t>()));
  check_positive("log-every", a["log-every"].as<int64_t>());
  if (resume && !has_dir) throw UsageError("--resume needs --checkpoint-dir");
  // A fresh run among another run's checkpoints would have its own pruned as they are
  // written, and a later --resume would continue the other run.
  const std::string dir = has_dir ? a["checkpoint-dir"].as<std::string>() : "";
  // (rank 0 writes the checkpoints; its first comes an epoch in)
  if (has_dir && par.leader()) check_output_dir(a, "checkpoint-dir");
  if (has_dir && !resume && !nn::io::Checkpointer(dir).list().empty())
    throw UsageError("--checkpoint-dir '" + dir + "' holds checkpoints of an earlier run: pass "
                     "--resume to continue it, or name an empty directory");
  if (!par.leader()) return;  // rank 0 writes the run's files
  for (const char* f : {"metrics", "save-model"})
    if (a.count(f)) check_output_file(a, f);
  if (a.count("tensorboard")) check_output_dir(a, "tensorboard");
}

Run::Run(std::string app, const cxxopts::ParseResult& a, int argc, char** argv, Parallel& par)
    : app_(std::move(app)), par_(par), tty_(nn::train::stdout_is_terminal()) {
  check_run_options(a, par);  // (the output files too)
  // (saved as checkpoint metadata, which must be UTF-8: a Latin-1 path would fail the save)
  for (int i = 0; i < argc; ++i) command_ += (i ? " " : "") + nn::io::to_valid_utf8(argv[i]);
  if (a.count("checkpoint-dir"))
    ckpt_ = std::make_unique<nn::io::Checkpointer>(a["checkpoint-dir"].as<std::string>(),
                                                   a["keep-last"].as<int>());
  every_ = a["checkpoint-every"].as<int64_t>();
  log_every_ = a["log-every"].as<int64_t>();
  epochs_ = a["epochs"].as<int64_t>();
  resume_ = flag(a, "resume");
  nn::train::StopSignal::install();
  if (!par_.leader()) return;  // rank 0 writes the run's files
  if (a.count("metrics")) metrics_ = a["metrics"].as<std::string>();
  if (a.count("notify-cmd")) notify_ = a["notify-cmd"].as<std::string>();
  if (a.count("save-model")) save_model_ = a["save-model"].as<std::string>();
  if (a.count("tensorboard"))
    tb_ = std::make_unique<nn::train::TensorBoardWriter>(a["tensorboard"].as<std::string>());
}

double Run::elapsed() const { return elapsed_before_ + clock_.seconds(); }

Position Run::start(State s) {
  state_ = s;
  Position pos = resume_ ? load() : Position{};
  if (!par_.group()) return pos;
  // Every rank must continue from the same step (a rank that cannot see the checkpoint
  // folder would start over), with rank 0's weights, and its own dropout stream.
  std::vector<double> step{double(pos.step), -double(pos.step)};
  par_.max(step);
  NN_CHECK(step[0] == -step[1], "the ranks would continue from different steps (", -step[1], " to ",
           step[0], "; this rank: ", pos.step, "): with --resume every rank must see the same "
           "--checkpoint-dir (a shared file system)");
  nn::dist::broadcast_module(*par_.group(), *state_.model);
  nn::Generator& g = nn::default_generator();
  if (par_.rank() > 0) g.set_state(g.seed() ^ (0x9E3779B97F4A7C15ull * uint64_t(par_.rank())), g.offset());
  return pos;
}

Position Run::load() {
  const State& s = state_;
  Position pos;
  std::vector<std::string> warnings;
  auto c = ckpt_->load_latest(&warnings);
  for (auto& w : warnings) std::fprintf(stderr, "%s: warning: %s\n", app_.c_str(), w.c_str());
  // Checkpoints that are there but cannot be read (permissions, a failing disk) are not
  // "none yet": starting over would overwrite them
  NN_CHECK(c || warnings.empty(), "none of the ", warnings.size(), " checkpoint(s) in '",
           ckpt_->dir(), "' could be read (see the warnings above); make them readable, or move "
           "them away to start over");
  if (!c) {
    std::printf("%s: no checkpoint in '%s' yet: starting from the beginning\n", app_.c_str(),
                ckpt_->dir().c_str());
    drop_records_after(pos);  // (of a run that stopped before its first checkpoint)
    return pos;
  }
  auto app = c->meta.find("app");
  NN_CHECK(app != c->meta.end() && app->second == app_, "the checkpoint in '", ckpt_->dir(),
           "' was written by ", app == c->meta.end() ? "another program" : app->second,
           ", not ", app_);
  // A model trained on other classes, another vocabulary or at another length has weights
  // of the same shapes that mean something else (checkpoints from before this was saved
  // carry no such keys and are taken as they are)
  for (auto& [k, v] : s.identity) {
    auto it = c->meta.find("model." + k);
    if (it == c->meta.end() || it->second == v) continue;
    const bool short_values = it->second.size() < 80 && v.size() < 80 &&
                              it->second.find('\n') == std::string::npos && v.find('\n') == std::string::npos;
    NN_ERROR("the checkpoint in '", ckpt_->dir(), "' was trained with other ", k,
             short_values ? nn::detail::cat(" (", it->second, ", this run has ", v, ")") : std::string(),
             ": resume with the data and flags it was trained with");
  }
  // this run's learning rate (--lr), before the checkpoint's optimizer state replaces it
  const double lr = s.scheduler ? s.scheduler->base_lr() : s.optimizer->lr();
  try {
    s.model->load_state_dict(c->model);
    s.optimizer->load_state(c->optimizer);
  } catch (const nn::Error& e) {
    NN_ERROR("checkpoint in '", ckpt_->dir(), "' does not fit this model: ", e.what());
  }
  // Resumed with another --lr: this run's wins, with or without a schedule (the schedule
  // was built from it), and the next checkpoints record it. The checkpoint's run had its
  // schedule's base (initial_lr), or without a schedule its constant lr.
  const bool had_schedule = std::any_of(c->optimizer.begin(), c->optimizer.end(),
                                        [](const auto& nt) { return nt.first == "initial_lr"; });
  const double was_lr = had_schedule ? s.optimizer->initial_lr().value_or(lr) : s.optimizer->lr();
  if (was_lr != lr) {
    std::printf("%s: the checkpoint's run had learning rate %g, this run has %g: continuing with %g\n",
                app_.c_str(), was_lr, lr, lr);
    s.optimizer->set_initial_lr(lr);
    s.optimizer->set_lr(lr);  // (a schedule sets its own below)
  }
  // Every app writes the loss scaler's state (fp32 runs too); a checkpoint of mnist_train from
  // before it took --precision has none, and leaves the scaler fresh.
  if (s.scaler && !c->extra.empty()) s.scaler->load_state(c->extra);
  if (s.scaler && c->extra.empty() && s.scaler->options().enabled)
    std::printf("%s: the checkpoint holds no loss-scaler state: loss scaling starts afresh\n",
                app_.c_str());
  nn::io::load_generator(c->meta, "rng", nn::default_generator());
  pos.epoch = to_count(c->meta, "epoch");
  pos.batch = to_count(c->meta, "batch");
  pos.step = c->step;
  pos.seen = to_count(c->meta, "seen");
  pos.loss_sum = to_double(c->meta, "loss_sum");
  pos.epoch_seconds = to_double(c->meta, "epoch_seconds");
  elapsed_before_ = to_double(c->meta, "elapsed");
  // Stopped mid-epoch with another number of processes or another batch size: the batch
  // index counts steps of world_size x batch_size samples, so keep the samples done (to
  // within one step) instead. A checkpoint without batch_size (older) is taken as this run's.
  const int64_t was = c->meta.count("world_size") ? to_count(c->meta, "world_size") : 1;
  const int64_t was_bs = c->meta.count("batch_size") ? to_count(c->meta, "batch_size")
                                                     : s.batch_size;
  const int64_t per_step_was = was * was_bs, per_step = par_.size() * s.batch_size;
  if (per_step_was != per_step && pos.batch > 0) {
    NN_CHECK(per_step_was > 0 && per_step > 0, "checkpoint metadata: batch size ", was_bs);
    int64_t b = pos.batch * per_step_was / per_step;
    if (s.batches_per_epoch > 0) b = std::min(b, s.batches_per_epoch);
    std::printf("%s: the checkpoint was written by %lld process(es) at batch size %lld, this run "
                "has %d at %lld: epoch %lld continues at batch %lld instead of %lld\n",
                app_.c_str(), (long long)was, (long long)was_bs, par_.size(),
                (long long)s.batch_size, (long long)pos.epoch, (long long)b, (long long)pos.batch);
    pos.loss_sum = pos.loss_sum * double(b) / double(pos.batch);
    pos.batch = b;
    pos.seen = b * s.batch_size;  // this process's samples in those batches
  } else if (was != par_.size()) {
    // this process's share of the samples done (rank 0's count was saved)
    pos.seen = pos.seen * was / par_.size();
  }
  // An epoch shorter than the checkpoint's (fewer --train-samples): its end
  if (s.batches_per_epoch > 0 && pos.batch > s.batches_per_epoch) {
    std::printf("%s: the checkpoint stopped at batch %lld of epoch %lld; this run's epochs have "
                "%lld batches: it goes on from the epoch's end\n", app_.c_str(), (long long)pos.batch,
                (long long)pos.epoch, (long long)s.batches_per_epoch);
    pos.loss_sum = pos.loss_sum * double(s.batches_per_epoch) / double(pos.batch);
    pos.seen = pos.seen * s.batches_per_epoch / pos.batch;
    pos.batch = s.batches_per_epoch;
  }
  // The schedule was built from this run's batches per epoch: its position is where this
  // run's steps would stand, not the steps the checkpoint counted, which differ when this
  // run or an earlier one in the chain had another step size.
  const int64_t schedule_step = s.batches_per_epoch <= 0
                                    ? pos.step
                                    : (pos.epoch - 1) * s.batches_per_epoch + pos.batch;
  if (s.scheduler) s.scheduler->set_step(schedule_step);
  std::printf("%s: resumed from step %lld (epoch %lld, batch %lld)\n", app_.c_str(),
              (long long)pos.step, (long long)pos.epoch, (long long)pos.batch);
  // (the apps' epoch loops then run no epoch: said, not silent)
  if (pos.epoch > epochs_)
    std::printf("%s: the checkpoint is past --epochs %lld: nothing is left to train (a larger "
                "--epochs goes on from it)\n", app_.c_str(), (long long)epochs_);
  drop_records_after(pos);
  return pos;
}

void Run::drop_records_after(const Position& pos) const {
  drop_metrics_from(pos.epoch);
  // (steps count from 1: a run from the start drops all)
  if (tb_) tb_->purge_from(pos.step + 1);
}

void Run::drop_metrics_from(int64_t epoch) const {
  // An epoch's line is written before its checkpoint: a run stopped between the two (a
  // second signal, a full disk) trains that epoch again, and its line goes first, so that
  // the file keeps one line per epoch.
  if (metrics_.empty()) return;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(metrics_, ec)) {
    // (/dev/stdout, a pipe: not read back, which would wait on the run's own output)
    if (std::filesystem::exists(metrics_, ec))
      std::printf("%s: '%s' is not a regular file: lines of epoch %lld on are not dropped\n",
                  app_.c_str(), metrics_.c_str(), (long long)epoch);
    return;
  }
  std::ifstream f(metrics_);
  if (!f) return;
  std::string line, kept;
  int64_t dropped = 0;
  while (std::getline(f, line)) {
    const size_t k = line.find("\"epoch\": ");
    // (a last line with no line break is one a killed run left unfinished)
    if (f.eof() || (k != std::string::npos && std::atoll(line.c_str() + k + 9) >= epoch)) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  f.close();
  if (dropped == 0) return;
  nn::train::write_file(metrics_, kept);
  std::printf("%s: %lld line(s) of epoch %lld on dropped from '%s' (that epoch is trained again)\n",
              app_.c_str(), (long long)dropped, (long long)epoch, metrics_.c_str());
}

void Run::add_identity(std::map<std::string, std::string>& meta) const {
  for (auto& [k, v] : state_.identity) meta["model." + k] = v;
}

void Run::save(const Position& pos) {
  if (!par_.leader()) return;
  nn::io::Checkpoint c;
  c.model = state_.model->state_dict();
  c.optimizer = state_.optimizer->state();
  if (state_.scaler) c.extra = state_.scaler->state();
  c.step = pos.step;
  c.meta = {{"app", app_},
            {"command", command_},
            {"epoch", std::to_string(pos.epoch)},
            {"batch", std::to_string(pos.batch)},
            {"seen", std::to_string(pos.seen)},
            {"loss_sum", num(pos.loss_sum)},
            {"epoch_seconds", num(pos.epoch_seconds)},
            {"elapsed", num(elapsed())},
            {"world_size", std::to_string(par_.size())},
            {"batch_size", std::to_string(state_.batch_size)}};
  add_identity(c.meta);
  nn::io::save_generator(c.meta, "rng", nn::default_generator());
  ckpt_->save(c);
}

void Run::after_step(const Position& pos, int64_t batches, const std::function<double()>& loss_sum) {
  const bool log = pos.batch % log_every_ == 0 || pos.batch == batches;
  const bool stop = par_.group() ? stop_agreed_ : nn::train::StopSignal::requested();
  const bool checkpoint = ckpt_ && ((every_ > 0 && pos.step % every_ == 0) || stop);
  if (!log && !checkpoint && !stop) return;  // (a stop without --checkpoint-dir waited for a log step)
  const double sum = loss_sum();
  const double mean = sum / double(std::max<int64_t>(pos.batch, 1));
  if (!std::isfinite(mean) || stop) end_progress_line();  // the message goes on a line of its own
  NN_CHECK(std::isfinite(mean), "the training loss became ", std::isnan(mean) ? "NaN" : "infinite",
           " at epoch ", pos.epoch,
           ", step ", pos.step, " (a learning rate too high, or bad input data; try a lower "
           "--lr)");
  // An error writing the logs (a full disk) is raised once this step's checkpoint is saved
  std::exception_ptr log_error;
  if (log) {
    try {
      if (tb_) tb_->add_scalar("train/loss", mean, pos.step);
    } catch (...) {
      log_error = std::current_exception();
    }
    if (!tty_) {
      std::printf("epoch %lld batch %lld/%lld loss %.4f elapsed %.1fs\n", (long long)pos.epoch,
                  (long long)pos.batch, (long long)batches, mean, elapsed());
      std::fflush(stdout);  // a log file or pipe shows it now, and keeps it if the run is killed
    }
  }
  if (checkpoint) {
    // Every rank takes part (they agree when a checkpoint is due): the loss saved is the
    // mean of the ranks' sums, which every rank resumes from and finish() adds up over the
    // ranks, and batch norm's running statistics are averaged as at an epoch's end (rank 0's
    // alone would be resumed by every rank)
    std::vector<double> v{sum};
    par_.sum(v);
    sync_buffers();
    Position p = pos;
    p.loss_sum = v[0] / par_.size();
    save(p);
  }
  if (log_error) std::rethrow_exception(log_error);
  if (stop) stop_now(pos.step, nn::detail::cat("epoch ", pos.epoch, ", batch ", pos.batch));
}

void Run::stop_now(int64_t step, const std::string& where) {
  // A rank that got no signal itself stops because another one did (SIGTERM's status).
  const int sig = nn::train::StopSignal::requested() ? nn::train::StopSignal::signal_number() : SIGTERM;
  std::fflush(stdout);
  if (!par_.leader())
    std::fprintf(stderr, "%s: rank %d stops with the others after step %lld\n", app_.c_str(),
                 par_.rank(), (long long)step);
  else if (ckpt_)
    std::fprintf(stderr, "%s: stopped by signal %d after step %lld (%s); checkpoint saved in "
                         "'%s': run again with --resume to continue\n",
                 app_.c_str(), sig, (long long)step, where.c_str(), ckpt_->dir().c_str());
  else
    std::fprintf(stderr, "%s: stopped by signal %d after step %lld (%s); no --checkpoint-dir, so "
                         "nothing was saved\n",
                 app_.c_str(), sig, (long long)step, where.c_str());
  throw Stopped{sig};
}

void Run::sync_gradients() {
  if (par_.group())
    stop_agreed_ = nn::dist::average_gradients(*par_.group(), state_.model->parameters(),
                                               nn::train::StopSignal::requested());
}

void Run::sync_buffers() {
  if (par_.group()) nn::dist::average_buffers(*par_.group(), *state_.model);
}

void Run::end_epoch(const EpochSummary& s, Position next) {
  par_.check_replicas(*state_.model, nn::detail::cat("after epoch ", s.epoch));
  // Without a validation set (synthetic data) the val fields are NaN: left out of the line,
  // null in the metrics, not written to TensorBoard.
  const bool has_val = !std::isnan(s.val_loss);
  const std::string val =
      has_val ? nn::detail::cat("  val_loss ", std::round(s.val_loss * 1e4) / 1e4, "  val_accuracy ",
                                std::round(s.val_accuracy * 1e4) / 100, "%")
              : std::string();
  const bool has_top5 = has_val && !std::isnan(s.val_top5);
  const std::string top5 =
      has_top5 ? nn::detail::cat("  val_top5 ", std::round(s.val_top5 * 1e4) / 100, "%") : std::string();
  const std::string line = nn::detail::cat(
      "epoch ", s.epoch, "/", s.epochs, "  batch ", s.batches, "/", s.batches, "  train_loss ",
      nn::detail::cat(std::round(s.train_loss * 1e4) / 1e4), val, top5, "  ",
      std::round(s.seconds * 10) / 10, "s  ", int64_t(s.samples_per_second),
      " samples/s  elapsed ", std::round(elapsed() * 10) / 10, "s");
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  // A line that cannot be written (a full disk) is raised once the epoch's checkpoint is
  // saved: the epoch's training is kept, its metrics line is what is lost
  std::exception_ptr metrics_error;
  try {
    if (!metrics_.empty()) {
      nn::train::JsonLine j;
      j.add("epoch", s.epoch)
          .add("train_loss", s.train_loss)
          .add("val_loss", s.val_loss)
          .add("val_accuracy", s.val_accuracy);
      if (has_top5) j.add("val_top5_accuracy", s.val_top5);
      j.add("seconds", s.seconds)
          .add("samples_per_second", s.samples_per_second)
          .add("lr", s.lr)
          .add("elapsed", elapsed());
      nn::train::append_line(metrics_, j.str());
    }
  } catch (...) {
    metrics_error = std::current_exception();
  }
  if (ckpt_) save(next);  // first: a failure below (a full disk) must not cost the epoch
  if (metrics_error) std::rethrow_exception(metrics_error);
  if (tb_) {
    if (has_val) {
      tb_->add_scalar("val/loss", s.val_loss, next.step);
      tb_->add_scalar("val/accuracy", s.val_accuracy, next.step);
      if (has_top5) tb_->add_scalar("val/top5_accuracy", s.val_top5, next.step);
    }
    tb_->add_scalar("train/epoch_loss", s.train_loss, next.step);
    tb_->add_scalar("train/lr", s.lr, next.step);
    tb_->add_scalar("train/samples_per_second", s.samples_per_second, next.step);
    if (s.loss_scale > 0) tb_->add_scalar("train/loss_scale", s.loss_scale, next.step);
  }
  if (!notify_.empty()) nn::train::notify_async(notify_, app_ + ": " + line + "\n");
  // A stop asked for during the evaluation or the save (an ImageNet validation takes a
  // minute) ends the run here, its epoch saved, not after one more step, which a machine
  // being taken back may not leave time for. The ranks agree, as after a step. The last
  // epoch goes on to finish() (the run is done; --save-model still writes).
  if (s.epoch >= s.epochs) return;
  std::vector<double> stop{nn::train::StopSignal::requested() ? 1.0 : 0.0};
  par_.max(stop);
  if (stop[0] != 0) stop_now(next.step, nn::detail::cat("the end of epoch ", s.epoch));
}

void Run::end_progress_line() const {
  if (!tty_) return;
  std::fputs("\n", stdout);
  std::fflush(stdout);
}

Run::~Run() {
  if (!notify_.empty() && !nn::train::wait_for_notifications(30.0))
    std::fprintf(stderr, "%s: warning: a --notify-cmd command still runs after 30 s; not waiting\n",
                 app_.c_str());
}

void Run::finish() {
  par_.check_replicas(*state_.model, "at the end of training");
  if (save_model_.empty()) return;
  std::map<std::string, std::string> meta{{"app", app_}, {"command", command_}};
  add_identity(meta);
  nn::io::save_safetensors(save_model_, state_.model->state_dict(), meta);
  std::printf("%s: model saved to '%s'\n", app_.c_str(), save_model_.c_str());
}

EpochMeter::EpochMeter(Run& run, Position& pos, int64_t epochs, int64_t batches, nn::Device device,
                       std::string unit)
    : run_(run),
      pos_(pos),
      epochs_(epochs),
      batches_(batches),
      unit_(std::move(unit)),
      before_(pos.epoch_seconds),
      loss_sum_(nn::full({}, pos.loss_sum, device)),
      progress_(nn::detail::cat("epoch ", pos.epoch, "/", epochs), batches) {}

void EpochMeter::step(const nn::Tensor& loss, int64_t samples) {
  {
    nn::NoGradGuard ng;
    loss_sum_ = nn::add(loss_sum_, loss.detach());
  }
  pos_.batch++;
  pos_.step++;
  pos_.seen += samples;
  pos_.epoch_seconds = before_ + clock_.seconds();
  run_.after_step(pos_, batches_, [&] { return loss_sum_.item(); });
  // Reading the loss is the only host sync of a step, and only when it is shown.
  progress_.update(pos_.batch, [&] {
    return nn::detail::cat("loss ", loss_sum_.item() / double(pos_.batch), "  ",
                           int64_t(double(pos_.seen) * run_.parallel().size() / pos_.epoch_seconds), " ",
                           unit_);
  });
}

EpochSummary EpochMeter::finish() {
  progress_.finish();
  EpochSummary s;
  s.epoch = pos_.epoch;
  s.epochs = epochs_;
  s.batches = batches_;
  run_.sync_buffers();
  // Data parallel: the mean over every rank's batches, and all ranks' samples.
  std::vector<double> v{loss_sum_.item(), double(pos_.batch), double(pos_.seen)};
  run_.parallel().sum(v);
  s.train_loss = v[0] / std::max(v[1], 1.0);
  s.seconds = before_ + clock_.seconds();
  s.samples_per_second = v[2] / s.seconds;
  return s;
}

bool channels_last(const std::string& layout, const nn::Device& device, const std::string& precision) {
  if (layout != "auto") return layout == "nhwc";
  const nn::DType compute = precision == "bf16" ? nn::kBF16 : precision == "fp16" ? nn::kF16 : nn::kF32;
  return nn::preferred_memory_format(device, compute) == nn::MemoryFormat::channels_last;
}

std::vector<nn::optim::ParamGroup> decay_groups(nn::Module& model) {
  std::vector<nn::Tensor> decay, no_decay;
  for (auto& [name, p] : model.named_parameters()) (p.dim() <= 1 ? no_decay : decay).push_back(p);
  return {{decay, std::nullopt, std::nullopt}, {no_decay, 0.0, std::nullopt}};
}

void EpochProfile::begin() const {
  if (on_) nn::profiler::enable(true);
}

void EpochProfile::end(const EpochMeter& meter) {
  nn::profiler::enable(false);
  seconds_ += meter.session_seconds();
}

void EpochProfile::report() const {
  if (on_)
    std::printf("\nwhere the training time went (%.1f s):\n%s", seconds_,
                nn::profiler::report(seconds_).c_str());
}

nn::Tensor classifier_step(Run& run, nn::Module& model, nn::optim::Optimizer& opt,
                           nn::optim::LRScheduler* schedule, nn::amp::GradScaler& scaler,
                           const std::string& precision, const nn::Tensor& x, const nn::Tensor& y,
                           const nn::CrossEntropyOptions& ce) {
  nn::Tensor loss;
  {
    PrecisionAutocast ac(precision);
    loss = nn::cross_entropy(model.forward(x), y, ce);
  }
  opt.zero_grad();
  scaler.scale(loss).backward();
  run.sync_gradients();
  scaler.step(opt);
  scaler.update();
  if (schedule) schedule->step();
  return loss;
}

}  // namespace apps
