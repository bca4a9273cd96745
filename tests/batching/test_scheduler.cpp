#include <gtest/gtest.h>

#include "batching/scheduler.h"

#include <map>
#include "common/tiny_models.h"
#include "gguf/file.h"
#include "tokenizer/tokenizer.h"

namespace cellm::batching {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = gguf::File::open(test::tiny_model("tiny-llama"));
    tokenizer_ = tokenizer::Tokenizer::from_gguf(*file_);
  }
  Session& session(int prompt_len, int cached = 0) {
    GenerationRequest r;
    r.prompt.assign(prompt_len, 65);
    sessions_.push_back(std::make_unique<Session>(sessions_.size() + 1, r, GenerationCallbacks{}, *tokenizer_));
    sessions_.back()->cached = cached;
    return *sessions_.back();
  }
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<Session>> sessions_;
};

TEST_F(SchedulerTest, DecodeRowsFirstThenPrefillWithinTheBudget) {
  Scheduler s(16);
  Session& d1 = session(5, 4);    // one pending token: a decode row
  Session& p1 = session(40);      // long prompt
  Session& d2 = session(9, 8);
  std::vector<Session*> running = {&d1, &p1, &d2};
  const StepPlan plan = s.plan(running);
  ASSERT_EQ(plan.decode_rows, 2);
  EXPECT_EQ(plan.slices[0].session, &d1);
  EXPECT_EQ(plan.slices[1].session, &d2);
  ASSERT_EQ(plan.slices.size(), 3u);
  EXPECT_EQ(plan.slices[2].session, &p1);
  EXPECT_EQ(plan.slices[2].count, 14);  // the budget left after two decode rows
  EXPECT_EQ(plan.tokens, 16);
}

TEST_F(SchedulerTest, PrefillIsSharedRoundRobin) {
  Scheduler s(12);
  Session& a = session(30);
  Session& b = session(30);
  Session& c = session(30);
  std::vector<Session*> running = {&a, &b, &c};
  StepPlan first = s.plan(running);
  ASSERT_EQ(first.slices.size(), 3u);
  for (const auto& slice : first.slices) EXPECT_EQ(slice.count, 4);
  EXPECT_EQ(first.slices[0].session, &a);
  StepPlan second = s.plan(running);
  EXPECT_EQ(second.slices[0].session, &b);  // the next one leads
}

TEST_F(SchedulerTest, LeftoverBudgetGoesToWhoStillHasTokens) {
  Scheduler s(12);
  Session& a = session(2);
  Session& b = session(30);
  std::vector<Session*> running = {&a, &b};
  StepPlan plan = s.plan(running);
  int total = 0;
  for (const auto& slice : plan.slices) total += slice.count;
  EXPECT_EQ(total, 12);
  EXPECT_EQ(plan.slices.size(), 2u);
}

TEST_F(SchedulerTest, DecodeRowsBeyondTheBudgetTakeTurns) {
  Scheduler s(2);
  std::vector<Session*> running;
  for (int i = 0; i < 5; ++i) running.push_back(&session(3, 2));
  std::map<Session*, int> served;
  for (int step = 0; step < 10; ++step)
    for (const auto& slice : s.plan(running).slices) ++served[slice.session];
  ASSERT_EQ(served.size(), 5u);  // nobody starves
  for (const auto& [session, n] : served) EXPECT_EQ(n, 4);
}

TEST_F(SchedulerTest, TrimDropsPrefillBeforeDecode) {
  Scheduler s(16);
  Session& d = session(5, 4);
  Session& p = session(40);
  std::vector<Session*> running = {&d, &p};
  StepPlan plan = s.plan(running);
  EXPECT_TRUE(s.trim_to_fit(plan, [](const StepPlan& pl) { return pl.tokens <= 1; }));
  EXPECT_EQ(plan.slices.size(), 1u);
  EXPECT_EQ(plan.slices[0].session, &d);
  EXPECT_FALSE(s.trim_to_fit(plan, [](const StepPlan&) { return false; }));
}

}  // namespace
}  // namespace cellm::batching
