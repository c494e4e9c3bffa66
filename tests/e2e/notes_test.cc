// Notes on studies and trials (issue 37) through the real binaries: set
// and read with dialctl (words, stdin, clearing), shown by `study get` and
// `trials get`, kept across a scheduler restart, and a too-long note
// refused naming the field. And text from others (a trial's stderr) that
// would drive a terminal, shown escaped by dialctl.
#include "common/spec.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

using ::testing::HasSubstr;

TEST_F(WorkerE2eTest, NotesAreSetAndReadWithDialctlAndOutliveARestart) {
  v1::StudySpec spec;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"name": "noted",
                      "objective": {"metric": "loss", "goal": "MINIMIZE"},
                      "searchSpace": [{"name": "x",
                                       "float": {"min": 0, "max": 1}}],
                      "budget": {"maxTrials": 4}})",
                  &spec)
                  .ok());
  ASSERT_TRUE(client_->CreateStudy(spec).ok());
  auto asked = client_->SuggestTrials("noted", 1, "notes-test");
  ASSERT_TRUE(asked.ok()) << asked.status();
  ASSERT_EQ(asked->trials_size(), 1);

  EXPECT_THAT(Dialctl("study note noted round two: wider lr range"),
              HasSubstr("set the note of noted"));
  EXPECT_EQ(Dialctl("study note noted"), "round two: wider lr range\n");
  EXPECT_THAT(Dialctl("study get noted"),
              HasSubstr("note:        round two: wider lr range\n"));
  // From stdin, several lines; markup is just text.
  const std::string trial_note = "diverged at step 40\n<b>check the data</b>";
  std::ofstream(dir_ / "note.txt") << trial_note << "\n";
  EXPECT_THAT(
      Dialctl("trials note noted 0 - < " + (dir_ / "note.txt").string()),
      HasSubstr("set the note of noted trial 0"));
  EXPECT_EQ(Dialctl("trials note noted 0"), trial_note + "\n");
  EXPECT_THAT(Dialctl("trials get noted 0"),
              HasSubstr("note:     diverged at step 40\n"
                        "          <b>check the data</b>\n"));

  RestartScheduler();
  auto study = client_->GetStudy("noted");
  ASSERT_TRUE(study.ok()) << study.status();
  EXPECT_EQ(study->note(), "round two: wider lr range");
  auto trial = client_->GetTrial("noted", 0);
  ASSERT_TRUE(trial.ok()) << trial.status();
  EXPECT_EQ(trial->note(), trial_note);

  auto too_long =
      client_->SetNote("noted", std::nullopt, std::string(2001, 'a'));
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(),
              HasSubstr("note: must be at most 2000 characters, got 2001"));
  EXPECT_EQ(client_->GetStudy("noted")->note(), "round two: wider lr range");
  EXPECT_THAT(Dialctl("study note noted ''"), HasSubstr("cleared the note"));
  EXPECT_EQ(client_->GetStudy("noted")->note(), "");
  EXPECT_EQ(client_->GetTrial("noted", 0)->note(), trial_note);
}

// Finding 12 of the third security review: a trial's stderr tail went to
// `dialctl trials get` as it was, and set the admin's window title and
// cleared the screen.
TEST_F(WorkerE2eTest, DialctlShowsATrialsTerminalEscapesEscaped) {
  StartWorker("wa");
  auto spec = ParseStudySpec(R"yaml(
name: escapes
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
budget: {max_trials: 1, max_failures_per_trial: 0}
trial: {command: {argv: [/usr/bin/python3, -c, 'import sys; sys.stderr.write("title\x1b]0;pwned\x07 clear\x1b[2J csi\u009b6n rtl\u202eexe.txt\n"); sys.exit(3)']}})yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  WaitForEnd("escapes");
  auto t = client_->GetTrial("escapes", 0);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->state(), v1::FAILED);
  ASSERT_THAT(t->error(), HasSubstr("\x1b]0;pwned"));  // stored as it came
  for (const std::string args :
       {"trials get escapes 0", "--json trials get escapes 0",
        "trials list escapes"}) {
    const std::string shown = Dialctl(args);
    EXPECT_EQ(shown.find('\x1b'), std::string::npos) << args << ": " << shown;
    EXPECT_EQ(shown.find("\xc2\x9b"), std::string::npos) << args;
    EXPECT_EQ(shown.find("\xe2\x80\xae"), std::string::npos) << args;
    if (args == "trials get escapes 0") {
      EXPECT_THAT(shown, HasSubstr("title\\u001b]0;pwned\\u0007 clear"));
      EXPECT_THAT(shown, HasSubstr("csi\\u009b6n rtl\\u202eexe.txt"));
    }
  }
}

}  // namespace
}  // namespace dial
