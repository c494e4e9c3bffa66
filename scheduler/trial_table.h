// TrialTable (GET /api/v1/TrialTable, docs/http-api.md): a study's trials
// as JSON columns, one entry per trial in every array, for the dashboard's
// charts and table:
//   {"params": [{"name", "type", "log"}], "number": [...], "state": [...],
//    "value": [...], "lastStep": [...], "param": {"NAME": [...]}}
// with, for a study with several objectives, "objectives": [{"metric",
// "goal"}] and "values": {"METRIC": [...]} (every objective's final value),
// and, for a study with constraints, "feasible": [true | false | null]
// (null until a trial has final metrics). null also where a parameter is
// inactive or a trial has no value.
#pragma once

#include <string>
#include <vector>

#include "dial/v1/spec.pb.h"
#include "dial/v1/study.pb.h"

namespace dial::scheduler {

class TrialTableBuilder {
 public:
  explicit TrialTableBuilder(const v1::StudySpec& spec);
  void Add(const v1::Trial& trial);
  // The JSON text, ending in a newline.
  std::string Finish() const;

 private:
  v1::StudySpec spec_;
  std::vector<std::string> names_, columns_;
  std::vector<std::string> objective_columns_;  // several objectives only
  std::string number_, state_, value_, last_step_, feasible_;
};

// A finite number as JSON (shortest exact form), anything else as null.
void AppendJsonNumber(double v, std::string& out);

}  // namespace dial::scheduler
