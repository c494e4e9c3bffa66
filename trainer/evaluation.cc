#include "trainer/evaluation.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dial::trainer {

EvalResult Evaluate(torch::nn::Sequential& net, const Split& s, int64_t batch,
                    torch::Device device, Precision precision,
                    bool predictions) {
  torch::NoGradGuard no_grad;
  net->eval();
  const int64_t n = s.x.size(0);
  auto options = torch::TensorOptions().device(device);
  auto loss_sum = torch::zeros({}, options.dtype(torch::kFloat64));
  auto correct = torch::zeros({}, options.dtype(torch::kInt64));
  std::vector<torch::Tensor> predicted, confidence;
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t end = std::min(n, start + batch);
    auto x = s.x.slice(0, start, end).to(device, /*non_blocking=*/true);
    auto y = s.y.slice(0, start, end).to(device, /*non_blocking=*/true);
    torch::Tensor out;
    {
      AutocastScope autocast(device, precision);
      out = net->forward(x);
    }
    out = out.to(torch::kFloat32);
    loss_sum += torch::nn::functional::cross_entropy(
                    out, y,
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(
                        torch::kSum))
                    .to(torch::kFloat64);
    auto pred = out.argmax(1);
    correct += pred.eq(y).sum();
    if (predictions) {
      predicted.push_back(pred.cpu());
      confidence.push_back(out.softmax(1).amax(1).cpu());
    }
  }
  net->train();
  EvalResult result;
  result.examples = n;
  result.loss = loss_sum.item<double>() / double(n);
  result.accuracy = double(correct.item<int64_t>()) / double(n);
  if (predictions) {
    auto p = torch::cat(predicted),
         q = torch::cat(confidence).to(torch::kFloat32);
    auto y = s.y.cpu();
    auto ya = y.accessor<int64_t, 1>();
    auto pa = p.accessor<int64_t, 1>();
    auto qa = q.accessor<float, 1>();
    std::string& csv = result.predictions_csv;
    csv = "index,label,prediction,confidence\n";
    for (int64_t i = 0; i < n; ++i) {
      absl::StrAppend(&csv, i, ",", ya[i], ",", pa[i], ",", qa[i], "\n");
    }
  }
  return result;
}

torch::Tensor Probabilities(torch::nn::Sequential& net, const Split& s,
                            int64_t batch, torch::Device device,
                            Precision precision) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::vector<torch::Tensor> parts;
  const int64_t n = s.x.size(0);
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t end = std::min(n, start + batch);
    auto x = s.x.slice(0, start, end).to(device, /*non_blocking=*/true);
    torch::Tensor out;
    {
      AutocastScope autocast(device, precision);
      out = net->forward(x);
    }
    parts.push_back(out.to(torch::kFloat32).softmax(1).cpu());
  }
  net->train();
  return torch::cat(parts);
}

}  // namespace dial::trainer
