#include <gtest/gtest.h>

#include "engine/stop_checker.h"

namespace infera::stop_checker_test {
namespace {

TEST(StopChecker, PassesThroughWithoutStops) {
  StopChecker s({});
  bool stopped;
  EXPECT_EQ(s.Push("hello", &stopped), "hello");
  EXPECT_FALSE(stopped);
}

TEST(StopChecker, HoldsBackPartialMatchThenReleases) {
  StopChecker s({"###"});
  bool stopped;
  EXPECT_EQ(s.Push("abc#", &stopped), "abc");
  EXPECT_EQ(s.Push("#", &stopped), "");
  EXPECT_EQ(s.Push("x", &stopped), "##x");
  EXPECT_FALSE(stopped);
}

TEST(StopChecker, StopsAcrossChunksAndDropsTheStop) {
  StopChecker s({"\nUser:", "END"});
  bool stopped;
  std::string out = s.Push("Hi there\nUs", &stopped);
  EXPECT_EQ(out, "Hi there");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(s.matched(), "");
  EXPECT_EQ(s.Push("er: more", &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(s.matched(), "\nUser:");
}

TEST(StopChecker, EarliestStopWins) {
  StopChecker s({"b", "abc"});
  bool stopped;
  EXPECT_EQ(s.Push("xxabc", &stopped), "xx");  // "abc" starts before "b"
  EXPECT_TRUE(stopped);
  EXPECT_EQ(s.matched(), "abc");
}

TEST(StopChecker, FlushReturnsHeldText) {
  StopChecker s({"STOP"});
  bool stopped;
  EXPECT_EQ(s.Push("go ST", &stopped), "go ");
  EXPECT_EQ(s.Flush(), "ST");
}

}  // namespace
}  // namespace infera::stop_checker_test
