#pragma once
// The Prometheus text exposition format (version 0.0.4): families with # HELP and # TYPE
// lines, samples with escaped label values, histograms as cumulative _bucket{le=...} series
// ending in le="+Inf", plus _sum and _count.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cellm::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Observations counted into fixed buckets. Not synchronized: its owner locks.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending, finite
  void observe(double value);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Observations <= upper_bounds()[i], cumulative, one per bound.
  std::vector<uint64_t> cumulative_counts() const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> in_bucket_;  // per bound, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

class PrometheusText {
 public:
  // A family with a single unlabelled sample.
  void counter(std::string_view name, std::string_view help, double value);
  void gauge(std::string_view name, std::string_view help, double value);
  // A family whose samples follow through sample().
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, const Labels& labels, double value);
  void histogram(std::string_view name, std::string_view help, const Histogram& histogram);

  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// Label values escape backslash, double quote and newline.
std::string escape_label_value(std::string_view value);
// Integers without a fraction, other values with enough digits to round-trip; +Inf, -Inf, NaN.
std::string format_sample_value(double value);

}  // namespace cellm::server
