#include <gtest/gtest.h>

#include "batching/stop_matcher.h"

namespace cellm::batching {
namespace {

TEST(StopMatcher, HoldsBackAPossibleStopAndCutsAtTheMatch) {
  StopMatcher m({"\nUser:"});
  EXPECT_EQ(m.push("Hello"), "Hello");
  EXPECT_EQ(m.push(" world\nUs"), " world");  // "\nUs" may start the stop string
  EXPECT_EQ(m.push("er: more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("ignored"), "");
}

TEST(StopMatcher, ReleasesHeldTextWhenItIsNotAStop) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("the EN"), "the ");
  EXPECT_EQ(m.push("emy"), "ENemy");
  EXPECT_EQ(m.push("E"), "");
  EXPECT_EQ(m.flush(), "E");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"bc", "abcd", "x"});
  EXPECT_EQ(m.push("zzabcd"), "zz");  // "abcd" starts first
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, NoStopsPassEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
}

}  // namespace
}  // namespace cellm::batching
