#include <gtest/gtest.h>

#include <thread>

#include "server/generation_stream.h"

namespace cellm::server {
namespace {

using namespace std::chrono_literals;

TEST(GenerationStream, TimesOutWithNothing) {
  GenerationStream s;
  const auto start = std::chrono::steady_clock::now();
  const GenerationStream::Update u = s.next(30ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 25ms);
  EXPECT_TRUE(u.text.empty());
  EXPECT_FALSE(u.result.has_value());
  EXPECT_FALSE(s.finished());
}

TEST(GenerationStream, TextArrivesInOrderAndTheResultOnce) {
  GenerationStream s;
  s.push_text("Pa");
  s.push_text("");
  s.push_text("ris");
  EXPECT_EQ(s.next(0ms).text, "Paris");
  batching::GenerationResult r;
  r.text = "Paris.";
  s.push_text(".");
  s.finish(r);
  EXPECT_TRUE(s.finished());
  GenerationStream::Update last = s.next(0ms);
  EXPECT_EQ(last.text, ".");
  ASSERT_TRUE(last.result.has_value());
  EXPECT_EQ(last.result->text, "Paris.");
  EXPECT_FALSE(s.next(0ms).result.has_value());
}

TEST(GenerationStream, WakesTheWaiterFromAnotherThread) {
  GenerationStream s;
  std::thread engine([&] {
    std::this_thread::sleep_for(20ms);
    s.push_text("hi");
    s.finish({});
  });
  std::string text;
  bool done = false;
  const auto start = std::chrono::steady_clock::now();
  while (!done) {
    GenerationStream::Update u = s.next(5s);
    text += u.text;
    done = u.result.has_value();
  }
  engine.join();
  EXPECT_EQ(text, "hi");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);  // woken, not timed out
}

}  // namespace
}  // namespace cellm::server
