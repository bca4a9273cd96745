// The commands' report files (batch --report, bench --json): batching::json_text's text, so a
// generation that is not UTF-8 no longer loses the report, and a clear error for a bad path.
#include "cli/json_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/expect_error.h"
#include "core/error.h"

namespace cellm::cli {
namespace {

TEST(JsonFile, WritesTheReportAndANewlineEvenWithTextThatIsNotUtf8) {
  const auto path = std::filesystem::temp_directory_path() / "cellm_test_json_file.json";
  write_json_file(path.string(), {{"generations", {{{"text", "caf\xC3"}}}}});
  std::ifstream in(path);
  std::stringstream got;
  got << in.rdbuf();
  std::filesystem::remove(path);
  EXPECT_EQ(got.str().back(), '\n');
  EXPECT_EQ(nlohmann::json::parse(got.str())["generations"][0]["text"], "caf\xEF\xBF\xBD");
}

TEST(JsonFile, AnUnwritablePathIsAnIoErrorThatNamesIt) {
  expect_error(ErrorCode::Io, "/nonexistent-dir/report.json",
               [] { write_json_file("/nonexistent-dir/report.json", nlohmann::json::object()); });
}

}  // namespace
}  // namespace cellm::cli
