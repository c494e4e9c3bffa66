#include "replay/curve_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dial::replay {
namespace {

using ::testing::HasSubstr;

constexpr char kTable[] =
    "config_id,lr,units,optimizer,step,val_loss,val_accuracy,elapsed_s\n"
    "0,0.001,32,sgd,10,0.9,0.5,1.5\n"
    "0,0.001,32,sgd,20,0.8,0.6,3.0\n"
    "1,0.1,256,adam,20,0.3,0.9,4.0\n"
    "1,0.1,256,adam,10,0.5,0.8,2.0\n"
    "2,0.01,64,adam,10,0.7,0.7,1.0\n";

TEST(CurveTableTest, ReadsConfigsWithTheirCurvesInStepOrder) {
  auto t = CurveTable::Parse(kTable);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->param_names(),
              ::testing::ElementsAre("lr", "units", "optimizer"));
  EXPECT_THAT(t->metric_names(),
              ::testing::ElementsAre("val_loss", "val_accuracy"));
  ASSERT_EQ(t->configs().size(), 3u);
  const Config* one = t->Find(1);
  ASSERT_NE(one, nullptr);
  ASSERT_EQ(one->points.size(), 2u);
  EXPECT_EQ(one->points[0].step, 10);
  EXPECT_EQ(one->points[0].elapsed_s, 2.0);
  EXPECT_EQ(one->points[1].metrics.at("val_accuracy"), 0.9);
  EXPECT_EQ(std::get<std::string>(one->params.at("optimizer")), "adam");
  EXPECT_EQ(std::get<double>(one->params.at("units")), 256);
  EXPECT_EQ(t->Find(7), nullptr);
}

TEST(CurveTableTest, MapsParamsToTheNearestConfigOnALogScale) {
  auto t = CurveTable::Parse(kTable);
  ASSERT_TRUE(t.ok()) << t.status();
  // lr spans 100x, so it is compared on a log scale: 0.004 is nearer 0.01
  // than 0.001 (linearly it would be nearer 0.001).
  auto near = t->Nearest({{"lr", 0.004}});
  ASSERT_TRUE(near.ok()) << near.status();
  EXPECT_EQ((*near)->id, 2);
  near = t->Nearest(
      {{"lr", 0.0011}, {"units", 30.0}, {"optimizer", std::string("sgd")}});
  ASSERT_TRUE(near.ok());
  EXPECT_EQ((*near)->id, 0);
  // A category counts as much as a whole range: config 1 differs by its
  // optimizer, config 0 by all of lr's range; the tie goes to the lower id.
  near = t->Nearest({{"lr", 0.1}, {"optimizer", std::string("sgd")}});
  ASSERT_TRUE(near.ok());
  EXPECT_EQ((*near)->id, 0);
  // lr 0.002 is nearest config 0's, but the optimizer is config 2's.
  near = t->Nearest({{"lr", 0.002}, {"optimizer", std::string("adam")}});
  ASSERT_TRUE(near.ok());
  EXPECT_EQ((*near)->id, 2);
  // Parameters the table lacks are refused, by name.
  near = t->Nearest({{"momentum", 0.9}});
  EXPECT_TRUE(absl::IsInvalidArgument(near.status()));
  EXPECT_THAT(near.status().message(), HasSubstr("'momentum'"));
  near = t->Nearest({{"lr", std::string("fast")}});
  EXPECT_THAT(near.status().message(), HasSubstr("'lr' is a number"));
}

TEST(CurveTableTest, MalformedTablesNameTheLineAndTheColumn) {
  auto bad = [](const std::string& text) {
    auto t = CurveTable::Parse(text);
    EXPECT_FALSE(t.ok());
    return std::string(t.status().message());
  };
  EXPECT_THAT(bad(""), HasSubstr("no header"));
  EXPECT_THAT(bad("lr,step,val_loss,elapsed_s\n"),
              HasSubstr("first column must be config_id"));
  EXPECT_THAT(bad("config_id,lr,step,elapsed_s\n0,1,1,1\n"),
              HasSubstr("no metric column"));
  EXPECT_THAT(bad("config_id,lr,step,loss,elapsed_s\n0,1,1,0.5\n"),
              HasSubstr("line 2: 4 fields, the header has 5"));
  EXPECT_THAT(bad("config_id,lr,step,loss,elapsed_s\n0,1,x,0.5,1\n"),
              HasSubstr("line 2: step 'x'"));
  EXPECT_THAT(bad("config_id,lr,step,loss,elapsed_s\n0,1,1,bad,1\n"),
              HasSubstr("line 2: loss 'bad' is not a number"));
  EXPECT_THAT(bad("config_id,lr,step,loss,elapsed_s\n0,1,1,0.5,1\n"
                  "0,2,2,0.4,2\n"),
              HasSubstr("line 3: config_id 0 has other parameters"));
  EXPECT_THAT(bad("config_id,lr,step,loss,elapsed_s\n0,1,1,0.5,1\n"
                  "0,1,1,0.4,2\n"),
              HasSubstr("step 1 appears twice"));
  EXPECT_TRUE(absl::IsNotFound(CurveTable::Load("/nonexistent.csv").status()));
}

}  // namespace
}  // namespace dial::replay
