#include "test_util.h"

using namespace nn;

TEST_CASE("ResNet-50 has torchvision's parameter count, names and output shape", "[models]") {
  auto net = models::resnet50();
  REQUIRE(net->num_parameters() == 25557032);
  auto names = net->named_parameters();
  REQUIRE(names.front().first == "conv1.weight");
  REQUIRE(names.back().first == "fc.bias");
  bool has_downsample = false;
  for (auto& [n, t] : names) has_downsample |= n == "layer2.0.downsample.0.weight";
  REQUIRE(has_downsample);
  net->eval();
  NoGradGuard ng;
  Tensor y = net->forward(randn({2, 3, 64, 64}));
  REQUIRE(y.shape() == Shape{2, 1000});
  REQUIRE(std::isfinite(sum(y).item()));
  auto small = models::resnet50(models::ResNetOptions().num_classes(10).zero_init_residual(true));
  REQUIRE(small->num_parameters() == 25557032 - 2048 * 990 - 990);
  REQUIRE(sum(abs(small->layer1->named_children()[0].second->named_parameters()[7].second)).item() == 0);
  for (models::BlockCounts l : {models::BlockCounts{0, 0, 0, 0}, models::BlockCounts{3, -1, 6, 3}})
    REQUIRE(test::error_of([&] { models::resnet50(models::ResNetOptions().layers(l)); })
                .find("at least one block") != std::string::npos);
  REQUIRE(test::error_of([&] { net->forward(randn({1, 1, 32, 32})); }).find("(N, 3, H, W)") !=
          std::string::npos);
}

TEST_CASE("ResNet's bottleneck equals torchvision's: a training step's output, running "
          "statistics and gradients", "[models][cuda]") {
  // tests/fixtures/make_torchvision_bottleneck.py: torchvision's Bottleneck (stride 2, a 1x1
  // downsample) in f64, parameters and running statistics perturbed, one training-mode step
  const std::string dir = test::fixtures_dir() + "/torchvision";
  const test::Fixture ref("torchvision/bottleneck_reference.safetensors");
  auto get = [&](const std::string& n) { return ref.get(n); };
  for (Device d : test::devices())
    for (bool cl : {false, true}) {
      INFO(d.str() << (cl ? " channels-last" : ""));
      models::Bottleneck block(16, 8, 2);
      block.to(kF64);
      block.load_state_dict(io::load_safetensors(dir + "/bottleneck.safetensors").tensors);
      block.to(d);
      block.train();
      Tensor x = get("x").to(d);
      if (cl) x = test::channels_last(x);
      x = x.detach().requires_grad_();
      Tensor y = block.forward(x);
      test::require_close(y.cpu(), get("y"), 1e-9, 1e-10);
      sum(mul(y, get("w").to(d))).backward();
      test::require_close(x.grad().cpu(), get("grad.x"), 1e-8, 1e-10);
      int checked = 0;
      for (auto& [name, p] : block.named_parameters()) {
        INFO(name);
        test::require_close(p.grad().cpu(), get("grad." + name), 1e-8, 1e-10);
        ++checked;
      }
      for (auto& [name, b] : block.named_buffers()) {
        INFO(name);
        test::require_close(b.cpu().to(kF64), get("after." + name).to(kF64), 1e-9, 1e-10);
        ++checked;
      }
      REQUIRE(checked == 12 + 12);  // 4 convolutions and 4 x 2 BN parameters; 4 x 3 buffers
    }
}

TEST_CASE("the CIFAR ResNets have the paper's parameter counts and shapes", "[models][cifar]") {
  // 0.27M, 0.85M and 1.7M in He et al. (2016), table 6; counted here layer by layer
  REQUIRE(models::cifar_resnet()->num_parameters() == 269722);
  REQUIRE(models::cifar_resnet(models::CifarResNetOptions().depth(56))->num_parameters() == 853018);
  REQUIRE(models::cifar_resnet(models::CifarResNetOptions().depth(110))->num_parameters() == 1727962);
  auto net = models::cifar_resnet(models::CifarResNetOptions().depth(8).num_classes(100));
  REQUIRE(net->num_parameters() == 75290 - 650 + 6500);
  auto names = net->named_parameters();
  REQUIRE(names.front().first == "conv1.weight");
  REQUIRE(names[2].first == "bn1.bias");
  REQUIRE(names.back().first == "fc.bias");
  net->eval();
  NoGradGuard ng;
  Tensor y = net->forward(randn({3, 3, 32, 32}));
  REQUIRE(y.shape() == Shape{3, 100});
  REQUIRE(std::isfinite(sum(y).item()));
  REQUIRE(net->forward(randn({1, 3, 9, 7})).shape() == Shape{1, 100});  // any size: odd ones too
  for (int64_t d : {0, 7, 19, 21})
    REQUIRE(test::error_of([&] { models::cifar_resnet(models::CifarResNetOptions().depth(d)); })
                .find("6n + 2") != std::string::npos);
  REQUIRE(test::error_of([&] { models::BasicBlock(32, 16, 1); }).find("only keep or add channels") !=
          std::string::npos);
  auto z = models::cifar_resnet(models::CifarResNetOptions().depth(8).zero_init_residual(true));
  REQUIRE(sum(abs(z->layer2->named_children()[0].second->named_parameters()[4].second)).item() == 0);
}

TEST_CASE("gradcheck: the CIFAR ResNet block with its parameter-free shortcut", "[models][cifar][gradcheck]") {
  // Stride 2 and 2 -> 4 channels: the shortcut takes every second pixel and adds a zero channel
  // on each side. Odd sizes (5 x 7) check which pixels it takes.
  Generator g(3);
  for (auto [in, planes, stride] : {std::tuple{2, 4, 2}, std::tuple{2, 5, 2}, std::tuple{3, 3, 1}}) {
    auto block = std::make_shared<models::BasicBlock>(in, planes, stride);
    block->to(kF64);
    for (auto& p : block->parameters()) {
      NoGradGuard ng;
      p.copy_(randn(p.shape(), kF64, &g) * 0.5 + (p.dim() == 1 ? 1.0 : 0.0));
    }
    INFO(in << " -> " << planes << " channels, stride " << stride);
    GradcheckOptions opts;  // both convolutions' and batch norms' parameters too
    opts.params = block->parameters();
    REQUIRE(opts.params.size() == 6);
    test::require_gradcheck([&](const std::vector<Tensor>& x) { return block->forward(x[0]); },
                            {test::rnd({2, in, 5, 7}, 10 + uint64_t(planes))}, opts);
  }
  // The shortcut by hand: with zero weights in both BNs the block is relu(shortcut).
  auto block = std::make_shared<models::BasicBlock>(1, 3, 2);
  {
    NoGradGuard ng;
    block->bn2->weight.copy_(zeros({3}));
  }
  Tensor x = from_vector<float>({1, -2, 3, 4, 5, 6, -7, 8, 9, 10, 11, 12}, {1, 1, 3, 4});
  Tensor y = block->forward(x);
  REQUIRE(y.shape() == Shape{1, 3, 2, 2});
  REQUIRE(y.to_vector<float>() == std::vector<float>{0, 0, 0, 0, 1, 3, 9, 11, 0, 0, 0, 0});
}

TEST_CASE("the BERT encoder: Hugging Face names, shapes, masking, loading", "[models][bert]") {
  auto c = models::BertConfig::preset("tiny").vocab_size(100).max_len(16).num_classes(3);
  models::BertClassifier net(c);
  std::vector<std::string> names;
  for (auto& [n, t] : net.named_parameters()) names.push_back(n);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  REQUIRE(has("bert.embeddings.word_embeddings.weight"));
  REQUIRE(has("bert.embeddings.LayerNorm.weight"));
  REQUIRE(has("bert.encoder.layer.1.attention.self.query.weight"));
  REQUIRE(has("bert.encoder.layer.0.attention.output.LayerNorm.bias"));
  REQUIRE(has("bert.encoder.layer.0.intermediate.dense.weight"));
  REQUIRE(has("bert.encoder.layer.0.output.dense.bias"));
  REQUIRE(has("bert.pooler.dense.weight"));
  REQUIRE(has("classifier.weight"));
  // BERT-base's parameter count (with a 2-class head), as Hugging Face reports it
  REQUIRE(models::BertClassifier(models::BertConfig::preset("base")).num_parameters() == 109483778);
  net.eval();
  Tensor ids = from_vector<int64_t>({2, 5, 6, 7, 3, 0, 2, 9, 3, 0, 0, 0}, {2, 6});
  Tensor keep = ne(ids, zeros({}, kI64)).to(kU8);
  Tensor y = net.forward(ids, keep);
  REQUIRE(y.shape() == Shape{2, 3});
  // padding positions do not change the result
  Tensor ids2 = ids.clone();
  {
    NoGradGuard ng;
    ids2.select(1, 5).fill_(42);
  }
  test::require_close(net.forward(ids2, keep), y, 1e-5, 1e-6);
  test::require_error("sequences of 0 tokens have no [CLS] position", [&] { net.forward(zeros({1, 0}, kI64), {}); });
  REQUIRE(test::error_of([&] { net.forward(zeros({1, 17}, kI64), {}); }).find("max_len") !=
          std::string::npos);
  // a checkpoint in Hugging Face's naming (old gamma/beta names, a bare BertModel, an MLM head)
  models::BertClassifier other(c);
  NamedTensors hf;
  for (auto& [n, t] : net.named_parameters()) {
    if (n.rfind("classifier", 0) == 0) continue;
    std::string m = n.substr(5);  // drop "bert."
    if (m.find("LayerNorm.weight") != std::string::npos) m = m.substr(0, m.size() - 6) + "gamma";
    hf.emplace_back(m, t);
  }
  hf.emplace_back("cls.predictions.bias", zeros({100}));
  auto r = other.load_pretrained(hf);
  REQUIRE(r.unexpected == std::vector<std::string>{"cls.predictions.bias"});
  REQUIRE(r.missing == std::vector<std::string>{"classifier.weight", "classifier.bias"});
  test::require_close(other.bert->word->weight, net.bert->word->weight, 0, 0);
  // refused, with nothing loaded: a file lacking an encoder tensor (names under another
  // prefix load nothing at all), and a pre-LN model (BERT's weights are post-LN)
  models::BertClassifier fresh(c);
  const Tensor before = fresh.bert->word->weight.clone();
  NamedTensors lacking(hf.begin() + 1, hf.end());
  REQUIRE(test::error_of([&] { fresh.load_pretrained(lacking); }).find("the file lacks '") !=
          std::string::npos);
  NamedTensors prefixed;
  for (auto& [n, t] : hf) prefixed.emplace_back("encoder_model.bert." + n, t);
  REQUIRE(test::error_of([&] { fresh.load_pretrained(prefixed); }).find("the file lacks '") !=
          std::string::npos);
  models::BertClassifier pre(models::BertConfig(c).pre_ln(true));
  REQUIRE(test::error_of([&] { pre.load_pretrained(hf); }).find("post-LN") != std::string::npos);
  test::require_close(fresh.bert->word->weight, before, 0, 0);
  // [PAD] where the vocabulary puts it: that row is zero and gets no gradient, row 0 learns
  models::BertClassifier padded(models::BertConfig(c).pad_id(5));
  test::require_values(padded.bert->word->weight.select(0, 5), std::vector<double>(128, 0.0));
  sum(padded.forward(from_vector<int64_t>({0, 5, 7}, {1, 3}), {})).backward();
  Tensor gw = padded.bert->word->weight.grad();
  REQUIRE(sum(abs(gw.select(0, 5))).item() == 0);
  REQUIRE(sum(abs(gw.select(0, 0))).item() > 0);
  // training mode learns a toy task: class = whether token 9 occurs (pre-LN: post-LN BERT
  // from scratch needs warm-up to be stable, which this short test does not give it)
  manual_seed(1);
  models::BertClassifier learner(
      models::BertConfig::preset("tiny").vocab_size(20).max_len(8).num_classes(2).dropout(0).pre_ln(true));
  optim::AdamW opt(learner.parameters(), optim::AdamWOptions(1e-3).weight_decay(0));
  Generator g(3);
  Tensor x = randint(1, 9, {32, 8}, kI64, &g);
  Tensor lab = randint(0, 2, {32}, kI64, &g);
  {
    NoGradGuard ng;
    auto lv = lab.to_vector<int64_t>();
    for (int i = 0; i < 32; ++i) if (lv[i]) x.select(0, i).select(0, 3).fill_(9);
  }
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    Tensor loss = cross_entropy(learner.forward(x, {}), lab);
    if (step == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  INFO("loss " << first << " -> " << last);
  REQUIRE(last < 0.2 * first);
}

TEST_CASE("BERT equals Hugging Face's: logits, hidden states, loss and every gradient", "[models][bert][cuda]") {
  // tests/fixtures/make_hf_bert.py: a small BertForSequenceClassification from transformers,
  // in f64 with every parameter perturbed, and what it computes on a padded batch
  const std::string dir = test::fixtures_dir() + "/hf_bert";
  const test::Fixture ref("hf_bert/reference.safetensors");
  auto get = [&](const std::string& n) { return ref.get(n); };
  const auto c = models::BertConfig().vocab_size(50).hidden(16).layers(2).heads(4).ffn(32)
                     .max_len(12).num_classes(3).dropout(0).layer_norm_eps(1e-12);
  for (Device d : test::devices()) {
    INFO(d.str());
    models::BertClassifier net(c);
    net.to(kF64);
    const auto r = net.load_pretrained(io::load_safetensors(dir + "/model.safetensors").tensors);
    REQUIRE(r.missing.empty());
    REQUIRE(r.unexpected.empty());
    net.to(d);
    const Tensor ids = get("input_ids").to(d), keep = get("attention_mask").to(d);
    test::require_close(net.bert->encode(ids, keep).cpu(), get("last_hidden"), 1e-9, 1e-10);
    Tensor logits = net.forward(ids, keep);
    test::require_close(logits.cpu(), get("logits"), 1e-9, 1e-10);
    Tensor loss = cross_entropy(logits, get("labels").to(d));
    test::require_close(loss.cpu(), get("loss"), 1e-9, 1e-10);
    loss.backward();
    int grads = 0;
    for (auto& [name, p] : net.named_parameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      test::require_close(p.grad().cpu(), get("grad." + name), 1e-8, 1e-10);
      ++grads;
    }
    REQUIRE(grads == 41);  // every parameter, the pooler and the classifier included
  }
}

TEST_CASE("BERT drops attention probabilities in training only, as configured", "[models][bert]") {
  // Every other dropout off: what differs between two training passes is the attention's.
  auto c = models::BertConfig::preset("tiny").vocab_size(30).max_len(8).num_classes(2).dropout(0);
  Tensor ids = from_vector<int64_t>({2, 5, 6, 7, 3, 0, 2, 9, 3, 4, 1, 0}, {2, 6});
  Tensor keep = ne(ids, zeros({}, kI64)).to(kU8);
  auto two_passes_differ = [&](models::BertClassifier& net) {
    Tensor a = net.forward(ids, keep).detach(), b = net.forward(ids, keep).detach();
    return amax(abs(sub(a, b))).item() > 0;
  };
  manual_seed(4);
  models::BertClassifier off(c);  // attention dropout follows dropout (0)
  REQUIRE(off.bert->layers->size() == 2);
  REQUIRE_FALSE(two_passes_differ(off));
  models::BertClassifier on(models::BertConfig(c).attention_dropout(0.5));
  REQUIRE(two_passes_differ(on));
  on.eval();
  REQUIRE_FALSE(two_passes_differ(on));
  // unset, it follows dropout (HF's two probabilities are both 0.1 by default)
  models::BertClassifier both(models::BertConfig(c).dropout(0.1));
  auto* self = both.bert->layers->at<models::BertLayer>(0)->self.get();
  REQUIRE(self->dropout_p == 0.1);
  REQUIRE(test::error_of([&] { models::BertClassifier(models::BertConfig(c).attention_dropout(1.5)); })
              .find("attention dropout must be in [0, 1]") != std::string::npos);
}

// Without a mask, the MLP's bag leaves [PAD] out of the mean and gives its row no gradient
// (EmbeddingBag's padding_idx): equal to the call with the padding mask.
TEST_CASE("TextMLP without a mask leaves padding tokens out", "[models][text]") {
  manual_seed(3);
  models::TextMLP m(models::TextMLPOptions(10, 2).embed_dim(4).hidden(8).pad_id(0));
  m.eval();
  Tensor ids = from_vector<int64_t>({3, 4, 0, 0, 5, 6, 7, 0}, {2, 4});
  Tensor y = from_vector<int64_t>({0, 1}, {2});
  cross_entropy(m.forward(ids, {}), y).backward();
  Tensor g = m.embed->weight.grad().clone();
  REQUIRE(sum(abs(g.select(0, 0))).item() == 0);
  m.zero_grad();
  Tensor keep = ne(ids, zeros({}, kI64)).to(kU8);
  cross_entropy(m.forward(ids, keep), y).backward();
  test::require_close(g, m.embed->weight.grad(), 0, 0);
}
