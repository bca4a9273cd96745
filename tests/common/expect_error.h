#pragma once
// For tests of any layer: the check that a call fails with a cellm::Error of a given code whose
// message names what went wrong.
#include <gtest/gtest.h>

#include <string_view>

#include "core/error.h"

namespace cellm {

// Runs `call`, expecting a cellm::Error of `code` whose message names `fragment`.
template <typename Call>
void expect_error(ErrorCode code, std::string_view fragment, Call call) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string_view(e.what()).find(fragment), std::string_view::npos) << e.what();
  }
}

}  // namespace cellm
