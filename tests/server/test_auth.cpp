#include <gtest/gtest.h>

#include "server/auth.h"

namespace cellm::server {
namespace {

TEST(Auth, NoKeyConfiguredLetsEveryoneIn) {
  EXPECT_FALSE(check_bearer_token(std::nullopt, "").has_value());
  EXPECT_FALSE(check_bearer_token("Bearer anything", "").has_value());
}

TEST(Auth, TheRightBearerTokenPasses) {
  EXPECT_FALSE(check_bearer_token("Bearer s3cret", "s3cret").has_value());
  EXPECT_FALSE(check_bearer_token("bearer s3cret", "s3cret").has_value());  // the scheme is case-insensitive
  EXPECT_FALSE(check_bearer_token("Bearer  s3cret ", "s3cret").has_value());
}

TEST(Auth, MissingOrWrongTokensGet401) {
  for (const std::optional<std::string>& header :
       {std::optional<std::string>(), std::optional<std::string>("Bearer wrong"), std::optional<std::string>("s3cret"),
        std::optional<std::string>("Basic s3cret"), std::optional<std::string>("Bearer "),
        std::optional<std::string>("Bearer s3cret2"), std::optional<std::string>("Bearer s3cre")}) {
    const auto e = check_bearer_token(header, "s3cret");
    ASSERT_TRUE(e.has_value()) << header.value_or("<absent>");
    EXPECT_EQ(e->status(), 401);
    EXPECT_EQ(e->code(), "invalid_api_key");
  }
  EXPECT_NE(std::string(check_bearer_token(std::nullopt, "k")->what()).find("Authorization: Bearer"),
            std::string::npos);
}

}  // namespace
}  // namespace cellm::server
