#include "server/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace cellm::server {
namespace {

// HELP text escapes backslash and newline (not quotes).
std::string escape_help(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), in_bucket_(bounds_.size()) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1]))
      fail(ErrorCode::InvalidArgument, "histogram bounds must be finite and ascending");
  }
}

void Histogram::observe(double value) {
  ++count_;
  sum_ += value;
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);  // first bound >= value
  if (it != bounds_.end()) ++in_bucket_[static_cast<size_t>(it - bounds_.begin())];
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(in_bucket_.size());
  uint64_t total = 0;
  for (size_t i = 0; i < in_bucket_.size(); ++i) out[i] = total += in_bucket_[i];
  return out;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_sample_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[32];
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {  // 2^53: exact integers
    std::snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  for (int digits = 15; digits <= 17; ++digits) {  // the shortest form that reads back exactly
    std::snprintf(buf, sizeof buf, "%.*g", digits, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

void PrometheusText::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += str_cat("# HELP ", name, " ", escape_help(help), "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusText::sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += str_cat(labels[i].first, "=\"", escape_label_value(labels[i].second), "\"");
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += format_sample_value(value);
  out_ += '\n';
}

void PrometheusText::counter(std::string_view name, std::string_view help, double value) {
  family(name, "counter", help);
  sample(name, {}, value);
}

void PrometheusText::gauge(std::string_view name, std::string_view help, double value) {
  family(name, "gauge", help);
  sample(name, {}, value);
}

void PrometheusText::histogram(std::string_view name, std::string_view help, const Histogram& h) {
  family(name, "histogram", help);
  const std::string bucket = str_cat(name, "_bucket");
  const std::vector<uint64_t> counts = h.cumulative_counts();
  for (size_t i = 0; i < counts.size(); ++i)
    sample(bucket, {{"le", format_sample_value(h.upper_bounds()[i])}}, static_cast<double>(counts[i]));
  sample(bucket, {{"le", "+Inf"}}, static_cast<double>(h.count()));
  sample(str_cat(name, "_sum"), {}, h.sum());
  sample(str_cat(name, "_count"), {}, static_cast<double>(h.count()));
}

}  // namespace cellm::server
