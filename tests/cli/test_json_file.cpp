// The commands' JSON output (batch and bench reports, inspect --json) survives text that is not
// UTF-8: nlohmann::json throws on it by default, which lost a whole `cellm batch` report after
// the generations had run (seen on a random-weight llama3-8b, whose byte tokens decode to
// broken sequences).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/json_file.h"
#include "core/error.h"

namespace cellm::cli {
namespace {

const char kCutCharacter[] = "caf\xC3";  // "cafe" with its last character cut after the first byte
const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

TEST(JsonFile, InvalidUtf8BecomesTheReplacementCharacter) {
  const nlohmann::json value = {{"text", kCutCharacter}, {"tokens", {1, 2}}};
  EXPECT_THROW((void)value.dump(), nlohmann::json::type_error);  // what the commands did before
  const std::string text = json_text(value, -1);
  EXPECT_EQ(text, std::string("{\"text\":\"caf") + kReplacement + "\",\"tokens\":[1,2]}");
  EXPECT_EQ(nlohmann::json::parse(text)["text"], std::string("caf") + kReplacement);
}

TEST(JsonFile, WritesTheReportAndANewline) {
  const auto path = std::filesystem::temp_directory_path() / "cellm_test_json_file.json";
  write_json_file(path.string(), {{"generations", {{{"text", kCutCharacter}}}}});
  std::ifstream in(path);
  std::stringstream got;
  got << in.rdbuf();
  std::filesystem::remove(path);
  EXPECT_EQ(got.str().back(), '\n');
  EXPECT_EQ(nlohmann::json::parse(got.str())["generations"][0]["text"], std::string("caf") + kReplacement);
}

TEST(JsonFile, AnUnwritablePathIsAnIoErrorThatNamesIt) {
  try {
    write_json_file("/nonexistent-dir/report.json", nlohmann::json::object());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/report.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cellm::cli
