// What every training app shares for long runs on machines that can disappear: checkpoints
// (--checkpoint-dir, --checkpoint-every, --keep-last), --resume from the newest valid one,
// a graceful stop on SIGTERM/SIGINT/SIGHUP (checkpoint at the end of the step, then exit), progress
// and NaN checks every --log-every steps, and per epoch a summary line, --metrics JSON
// lines, --tensorboard scalars and a --notify-cmd message.
#pragma once
#include <nn/nn.h>

#include <cxxopts.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/parallel.h"

namespace apps {

// A Bool flag's value: on for --NAME and --NAME=true, off for --NAME=false (which count()
// would take for on).
inline bool flag(const cxxopts::ParseResult& a, const std::string& name) {
  return a[name].as<bool>();
}

void add_run_options(cxxopts::Options& opts);
// Checks those options (a UsageError or nn::Error naming the flag) without changing anything:
// apps call it before reading their data, so a bad flag costs no wait. Run's constructor
// checks them too.
void check_run_options(const cxxopts::ParseResult& a, const Parallel& par);

// Where a run stands: epochs count from 1; `batch` is the next batch within the epoch.
struct Position {
  int64_t epoch = 1;
  int64_t batch = 0;
  int64_t step = 0;          // optimizer steps since the run began
  int64_t seen = 0;          // training samples so far in this epoch
  double loss_sum = 0;       // sum of this epoch's batch losses before `batch` (on resume)
  double epoch_seconds = 0;  // training time already spent in this epoch (on resume)
};

struct EpochSummary {
  int64_t epoch = 0, epochs = 0, batches = 0;
  double train_loss = 0, val_loss = 0, val_accuracy = 0, seconds = 0, samples_per_second = 0;
  double val_top5 = std::nan("");  // top-5 accuracy, where the app measures it
  double lr = 0, loss_scale = 0;   // loss_scale 0: no loss scaling
};

// A SIGTERM/SIGINT/SIGHUP stop after the checkpoint was written; guarded_main turns it into exit
// status 128 + signal.
struct Stopped {
  int signal = 0;
};

// In a data-parallel run (see parallel.h) every rank has a Run: all of them load a checkpoint
// on --resume (the folder must be on a file system they all see), rank 0 alone writes
// checkpoints, metrics, TensorBoard, notifications and --save-model.
class Run {
 public:
  Run(std::string app, const cxxopts::ParseResult& args, int argc, char** argv, Parallel& par);
  // Gives running --notify-cmd commands up to 30 s to finish (the last epoch's message).
  ~Run();

  // What is saved and restored. Pointers may be null except model and optimizer.
  struct State {
    nn::Module* model = nullptr;
    nn::optim::Optimizer* optimizer = nullptr;
    nn::optim::LRScheduler* scheduler = nullptr;
    nn::amp::GradScaler* scaler = nullptr;
    int64_t batches_per_epoch = 0;  // this run's (0: unknown); bounds a resumed position
    int64_t batch_size = 0;  // per process; converts a resumed position saved at another one
    // What the weights mean beyond their shapes (a text model's class names, vocabulary and
    // length): saved as "model.KEY" metadata with checkpoints and --save-model; a resume
    // refuses a checkpoint that has another value for a key.
    std::map<std::string, std::string> identity = {};
  };
  // Restores the newest valid checkpoint when --resume was given (warning about corrupt ones
  // it skips) and returns where to continue; a fresh start otherwise. Data parallel: every
  // rank then holds rank 0's weights, and the ranks have checked they resume at one step.
  Position start(State s);

  // Between backward and the optimizer step: averages the gradients over the ranks (a no-op
  // alone) and agrees on a stop request, so that every rank stops after the same step.
  void sync_gradients();
  // At the end of an epoch's training, before evaluation: averages batch norm's running
  // statistics over the ranks (each saw only its shard). Called by EpochMeter::finish.
  void sync_buffers();

  // After every optimizer step (pos already counts it). `loss_sum` reads the epoch's running
  // loss sum: called only every --log-every steps and when a checkpoint is written, since on
  // a GPU it waits for the device.
  void after_step(const Position& pos, int64_t batches_in_epoch,
                  const std::function<double()>& loss_sum);
  // After an epoch's validation: summary line, metrics, a checkpoint (the next epoch, batch 0)
  // when checkpointing is on, TensorBoard, notification.
  void end_epoch(const EpochSummary& s, Position next);

  // After the last epoch: writes the model's tensors to --save-model FILE, if given.
  void finish();

  double elapsed() const;  // seconds across resumes
  int64_t log_every() const { return log_every_; }
  const Parallel& parallel() const { return par_; }

 private:
  Position load();  // the newest valid checkpoint's position (--resume)
  // What an interrupted run recorded past `pos`, which this run records again: the --metrics
  // lines of pos.epoch and later, and (hidden from TensorBoard) its scalars after pos.step.
  void drop_records_after(const Position& pos) const;
  void drop_metrics_from(int64_t epoch) const;
  void save(const Position& pos);
  // state_.identity as "model.KEY" metadata (checkpoints, --save-model)
  void add_identity(std::map<std::string, std::string>& meta) const;
  // Says that the run stops after `step` (`where`: its epoch and batch) and how to continue,
  // then throws Stopped with the signal's number (SIGTERM on a rank that got none itself).
  [[noreturn]] void stop_now(int64_t step, const std::string& where);
  void end_progress_line() const;  // on a terminal, ends the live progress line
  std::string app_, command_;
  Parallel& par_;
  bool stop_agreed_ = false;
  State state_;
  std::unique_ptr<nn::io::Checkpointer> ckpt_;
  int64_t every_ = 0, log_every_ = 50;
  int64_t epochs_ = 0;  // --epochs (every app that trains through a Run has it)
  bool resume_ = false;
  std::string metrics_, notify_, save_model_;
  std::unique_ptr<nn::train::TensorBoardWriter> tb_;
  nn::train::Stopwatch clock_;
  double elapsed_before_ = 0;
  bool tty_;
};

// One training epoch's running numbers, shared by the apps' loops: the loss sum kept on the
// device (read back only when shown or checkpointed), the training time across a resume, and
// the live progress line.
class EpochMeter {
 public:
  EpochMeter(Run& run, Position& pos, int64_t epochs, int64_t batches, nn::Device device,
             std::string unit = "samples/s");
  // After each optimizer step: adds the loss, advances `pos`, lets the run log and
  // checkpoint, refreshes the progress line.
  void step(const nn::Tensor& loss, int64_t samples);
  // Ends the progress line and fills the summary's epoch, batch, loss and speed fields.
  EpochSummary finish();
  double session_seconds() const { return clock_.seconds(); }  // excluding earlier runs

 private:
  Run& run_;
  Position& pos_;
  int64_t epochs_, batches_;
  std::string unit_;
  nn::train::Stopwatch clock_;
  double before_;
  nn::Tensor loss_sum_;
  nn::train::Progress progress_;
};

// Autocast as --precision names it: off for "fp32", else to f16 ("fp16") or bf16 ("bf16").
class PrecisionAutocast : public nn::amp::AutocastGuard {
 public:
  explicit PrecisionAutocast(const std::string& precision)
      : nn::amp::AutocastGuard(precision == "bf16" ? nn::kBF16 : nn::kF16, precision != "fp32") {}
};

// --layout: "nhwc", "nchw", or "auto", the format the device computes --precision in
// natively (nn::preferred_memory_format). True for channels-last.
bool channels_last(const std::string& layout, const nn::Device& device, const std::string& precision);

// The usual parameter groups: weights of two or more dims take the optimizer's weight decay,
// biases and norm parameters none.
std::vector<nn::optim::ParamGroup> decay_groups(nn::Module& model);

// --profile: times every backend primitive while epochs train (not while they validate) and
// prints at the end where that time went.
class EpochProfile {
 public:
  explicit EpochProfile(const cxxopts::ParseResult& args) : on_(flag(args, "profile")) {}
  void begin() const;                  // before an epoch's training
  void end(const EpochMeter& meter);  // after it
  void report() const;                 // after the last epoch
 private:
  bool on_;
  double seconds_ = 0;
};

// One training step of an image classifier under --precision ("fp32", "fp16" or "bf16"):
// forward and cross-entropy under autocast (fp16/bf16), backward of the scaled loss, the
// gradients averaged over the ranks, the scaler's step and update, then the schedule's step
// (none when `schedule` is null: a constant rate). Returns the loss.
nn::Tensor classifier_step(Run& run, nn::Module& model, nn::optim::Optimizer& opt,
                           nn::optim::LRScheduler* schedule, nn::amp::GradScaler& scaler,
                           const std::string& precision, const nn::Tensor& x, const nn::Tensor& y,
                           const nn::CrossEntropyOptions& ce);

}  // namespace apps
