#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "server/prometheus.h"
#include "server/server_metrics.h"

namespace cellm::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l == line) return true;
  return false;
}

TEST(Prometheus, ValuesAndLabels) {
  EXPECT_EQ(format_sample_value(3), "3");
  EXPECT_EQ(format_sample_value(0.1), "0.1");
  EXPECT_EQ(format_sample_value(-2.5), "-2.5");
  EXPECT_EQ(format_sample_value(1e20), "1e+20");
  EXPECT_EQ(format_sample_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_sample_value(std::nan("")), "NaN");
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(Prometheus, FamiliesHaveHelpAndType) {
  PrometheusText p;
  p.counter("x_total", "Things\ncounted \\ here", 4);
  p.family("r_total", "counter", "Requests");
  p.sample("r_total", {{"endpoint", "/v1/models"}, {"status", "200"}}, 2);
  EXPECT_EQ(p.text(),
            "# HELP x_total Things\\ncounted \\\\ here\n# TYPE x_total counter\nx_total 4\n"
            "# HELP r_total Requests\n# TYPE r_total counter\nr_total{endpoint=\"/v1/models\",status=\"200\"} 2\n");
}

TEST(Prometheus, HistogramBucketsAreCumulative) {
  Histogram h({0.125, 1});
  for (double v : {0.0625, 0.125, 0.5, 3.0}) h.observe(v);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{2, 3}));  // le is inclusive
  PrometheusText p;
  p.histogram("lat_seconds", "Latency", h);
  const std::string& t = p.text();
  EXPECT_TRUE(has_line(t, "# TYPE lat_seconds histogram"));
  EXPECT_TRUE(has_line(t, "lat_seconds_bucket{le=\"0.125\"} 2"));
  EXPECT_TRUE(has_line(t, "lat_seconds_bucket{le=\"1\"} 3"));
  EXPECT_TRUE(has_line(t, "lat_seconds_bucket{le=\"+Inf\"} 4"));
  EXPECT_TRUE(has_line(t, "lat_seconds_sum 3.6875"));
  EXPECT_TRUE(has_line(t, "lat_seconds_count 4"));
}

TEST(Prometheus, HistogramBoundsMustAscend) {
  EXPECT_THROW(Histogram({1, 0.5}), Error);
  EXPECT_THROW(Histogram({0.5, std::numeric_limits<double>::infinity()}), Error);
}

TEST(ServerMetrics, RendersRequestsLatenciesAndEngineFigures) {
  ServerMetrics m;
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/v1/chat/completions", 400);
  m.observe_time_to_first_token(0.2);
  m.observe_inter_token_latency(0.004);
  m.count_client_disconnect();
  batching::EngineMetrics e;
  e.steps = 10;
  e.sequences_in_steps = 37;
  e.max_sequences_in_step = 16;
  e.kv.live_cells = 123;
  e.kv.bytes_per_cell = 18432;
  e.running = 3;
  e.waiting = 1;
  e.graphs.captures = 2;
  const std::string t = m.render(e);
  EXPECT_TRUE(has_line(t, "cellm_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2"));
  EXPECT_TRUE(has_line(t, "cellm_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1"));
  EXPECT_TRUE(has_line(t, "cellm_time_to_first_token_seconds_bucket{le=\"0.25\"} 1"));
  EXPECT_TRUE(has_line(t, "cellm_time_to_first_token_seconds_bucket{le=\"0.1\"} 0"));
  EXPECT_TRUE(has_line(t, "cellm_inter_token_latency_seconds_count 1"));
  EXPECT_TRUE(has_line(t, "cellm_client_disconnects_total 1"));
  EXPECT_TRUE(has_line(t, "cellm_steps_total 10"));
  EXPECT_TRUE(has_line(t, "cellm_forward_sequences_total 37"));
  EXPECT_TRUE(has_line(t, "cellm_max_sequences_per_forward 16"));
  EXPECT_TRUE(has_line(t, "cellm_kv_live_cells 123"));
  EXPECT_TRUE(has_line(t, "cellm_kv_bytes_per_cell 18432"));
  EXPECT_TRUE(has_line(t, "cellm_sessions_running 3"));
  EXPECT_TRUE(has_line(t, "cellm_sessions_waiting 1"));
  EXPECT_TRUE(has_line(t, "cellm_graph_captures_total 2"));
  // Every sample line belongs to a family declared before it.
  std::istringstream in(t);
  std::string family;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
    } else if (line[0] != '#') {
      EXPECT_EQ(line.rfind(family, 0), 0u) << line;
    }
  }
}

}  // namespace
}  // namespace cellm::server
