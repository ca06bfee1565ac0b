#include "core/prometheus.h"

#include <gtest/gtest.h>

#include <limits>

namespace pgq::core {
namespace {

TEST(EscapeLabelValue, EscapesBackslashQuoteAndNewline) {
  EXPECT_EQ(EscapeLabelValue("emails"), "emails");
  EXPECT_EQ(EscapeLabelValue(R"(a\b)"), R"(a\\b)");
  EXPECT_EQ(EscapeLabelValue(R"(say "hi")"), R"(say \"hi\")");
  EXPECT_EQ(EscapeLabelValue("two\nlines"), R"(two\nlines)");
  EXPECT_EQ(EscapeLabelValue(""), "");
  // Anything else, UTF-8 included, is kept as it is.
  EXPECT_EQ(EscapeLabelValue("fila-ñ {x=1}"), "fila-ñ {x=1}");
}

TEST(FormatSampleValue, WritesTheShortestTextThatReadsBack) {
  EXPECT_EQ(FormatSampleValue(0), "0");
  EXPECT_EQ(FormatSampleValue(3), "3");
  EXPECT_EQ(FormatSampleValue(0.25), "0.25");
  EXPECT_EQ(FormatSampleValue(-1.5), "-1.5");
  EXPECT_EQ(FormatSampleValue(1764720000.125), "1764720000.125");
  EXPECT_EQ(FormatSampleValue(9007199254740992.0), "9007199254740992");
}

TEST(FormatSampleValue, SpellsNanAndInfinitiesAsPrometheusDoes) {
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatSampleValue(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(MetricsText, WritesAFamilyWithItsHelpTypeAndSamples) {
  MetricsText text;
  text.Family("pgq_jobs", "gauge", "Jobs by state.");
  text.Sample("pgq_jobs", {{"queue", "emails"}, {"state", "ready"}}, 3);
  text.Sample("pgq_jobs", {{"queue", "q\"1"}, {"state", "dead"}}, 0);
  text.Family("pgq_up", "gauge", "Always 1.");
  text.Sample("pgq_up", {}, 1);
  EXPECT_EQ(text.text(),
            "# HELP pgq_jobs Jobs by state.\n"
            "# TYPE pgq_jobs gauge\n"
            "pgq_jobs{queue=\"emails\",state=\"ready\"} 3\n"
            "pgq_jobs{queue=\"q\\\"1\",state=\"dead\"} 0\n"
            "# HELP pgq_up Always 1.\n"
            "# TYPE pgq_up gauge\n"
            "pgq_up 1\n");
}

TEST(MetricsText, EscapesBackslashAndNewlineInHelpButNotQuotes) {
  MetricsText text;
  text.Family("m", "counter", "a \"b\" c\\d\ne");
  EXPECT_EQ(text.text(), "# HELP m a \"b\" c\\\\d\\ne\n# TYPE m counter\n");
}

}  // namespace
}  // namespace pgq::core
