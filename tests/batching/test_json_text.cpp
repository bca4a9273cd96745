// Text that is not UTF-8 survives serialization: nlohmann::json throws on it by default, which
// lost a whole `cellm batch` report after its generations had run (seen on a random-weight
// llama3-8b, whose byte tokens decode to broken sequences). Server responses, SSE events and
// the commands' reports all serialize through batching::json_text.
#include "batching/json_text.h"

#include <gtest/gtest.h>

#include <string>

namespace cellm::batching {
namespace {

const char kCutCharacter[] = "caf\xC3";  // "cafe" with its last character cut after the first byte
const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

TEST(JsonText, InvalidUtf8BecomesTheReplacementCharacter) {
  const nlohmann::json value = {{"text", kCutCharacter}, {"tokens", {1, 2}}};
  EXPECT_THROW((void)value.dump(), nlohmann::json::type_error);  // what the commands did before
  const std::string text = json_text(value);
  EXPECT_EQ(text, std::string("{\"text\":\"caf") + kReplacement + "\",\"tokens\":[1,2]}");
  EXPECT_EQ(nlohmann::json::parse(text)["text"], std::string("caf") + kReplacement);
}

TEST(JsonText, IndentsOnRequest) {
  EXPECT_EQ(json_text({{"a", 1}}, 2), "{\n  \"a\": 1\n}");
}

}  // namespace
}  // namespace cellm::batching
