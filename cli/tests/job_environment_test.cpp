#include "job_environment.h"

#include <gtest/gtest.h>

namespace pgq::cli {
namespace {

using Names = std::vector<std::string>;

TEST(JobEnvironment, SetReplacesRemovedGoesTheRestStays) {
  const Names inherited = {"PATH=/bin", "PGQ_JOB_ID=old", "TRACEPARENT=00-theirs", "HOME=/root"};
  EXPECT_EQ(MergeEnvironment(inherited, {{"PGQ_JOB_ID", "42"}}, {"TRACEPARENT", "TRACESTATE"}),
            (Names{"PATH=/bin", "HOME=/root", "PGQ_JOB_ID=42"}));
}

TEST(JobEnvironment, OnlyTheWholeNameMatches) {
  // A name that merely starts like one (or an entry without '=') is another variable.
  const Names inherited = {"TRACEPARENTS=1", "TRACE=2", "TRACEPARENT",
                           "TRACEPARENT=", "X=TRACESTATE=3"};
  EXPECT_EQ(MergeEnvironment(inherited, {}, {"TRACEPARENT", "TRACESTATE"}),
            (Names{"TRACEPARENTS=1", "TRACE=2", "TRACEPARENT", "X=TRACESTATE=3"}));
}

TEST(JobEnvironment, ATracedJobSetsBoth) {
  Variables set;
  Names removed;
  AddTraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "congo=t61rcWkgMzE",
                  &set, &removed);
  EXPECT_EQ(set,
            (Variables{{"TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
                       {"TRACESTATE", "congo=t61rcWkgMzE"}}));
  EXPECT_TRUE(removed.empty());
}

TEST(JobEnvironment, WhatAJobHasNotIsRemoved) {
  Variables set;
  Names removed;
  AddTraceContext(std::nullopt, std::nullopt, &set, &removed);
  EXPECT_TRUE(set.empty());
  EXPECT_EQ(removed, (Names{"TRACEPARENT", "TRACESTATE"}));
  // A traceparent without a tracestate: the worker's TRACESTATE is another trace's.
  set.clear();
  removed.clear();
  AddTraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", std::nullopt, &set,
                  &removed);
  EXPECT_EQ(set.size(), 1u);
  EXPECT_EQ(removed, (Names{"TRACESTATE"}));
  const Names inherited = {"TRACEPARENT=00-theirs", "TRACESTATE=theirs=1", "PATH=/bin"};
  EXPECT_EQ(
      MergeEnvironment(inherited, set, removed),
      (Names{"PATH=/bin", "TRACEPARENT=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}));
}

}  // namespace
}  // namespace pgq::cli
