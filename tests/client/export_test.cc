// Study exports (client/export.h): what a spreadsheet would make of them.
#include "common/export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace dial::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Security round two, finding 11: categorical values that start like a
// formula were exported as they are; a spreadsheet that opens the CSV
// runs them. They now start with an apostrophe (OWASP's advice), and the
// JSON lines export keeps them exact.
TEST(ExportTest, CsvCellsNeverStartAFormula) {
  v1::StudySpec spec;
  auto* c = spec.add_search_space();
  c->set_name("c");
  for (const char* v : {"=HYPERLINK(\"http://x\",\"y\")", "+1", "-cmd",
                        "@SUM(A1)", "\tx", "\rx", "plain", "a=b"}) {
    c->mutable_categorical()->add_values(v);
  }
  std::vector<v1::Trial> trials;
  for (int i = 0; i < c->categorical().values_size(); ++i) {
    v1::Trial t;
    t.set_number(i);
    (*t.mutable_params())["c"].set_string_value(c->categorical().values(i));
    (*t.mutable_final_metrics())["loss"] = -1.5;
    trials.push_back(t);
  }
  const std::set<std::string> metrics = {"loss"};
  const std::string csv = ExportRows(spec, metrics, trials, ExportFormat::kCsv,
                                     /*history=*/false);
  for (const char* bad :
       {",=HYPERLINK", ",+1", ",-cmd", ",@SUM", ",\tx", ",\"\rx"}) {
    EXPECT_THAT(csv, Not(HasSubstr(bad))) << csv;
  }
  EXPECT_THAT(csv, HasSubstr(",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\","));
  EXPECT_THAT(csv, HasSubstr(",'+1,"));
  EXPECT_THAT(csv, HasSubstr(",'-cmd,"));
  EXPECT_THAT(csv, HasSubstr(",'@SUM(A1),"));
  EXPECT_THAT(csv, HasSubstr(",plain,"));
  EXPECT_THAT(csv, HasSubstr(",a=b,"));
  EXPECT_THAT(csv, HasSubstr(",-1.5\n")) << "numbers stay numbers";
  const std::string jsonl =
      ExportRows(spec, metrics, trials, ExportFormat::kJsonl, false);
  EXPECT_THAT(jsonl, HasSubstr("\"c\": \"+1\""));
}

}  // namespace
}  // namespace dial::client
