#include "client/dialctl_notes.h"

#include <istream>
#include <iterator>
#include <ostream>

#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/format.h"

namespace dial::cli {

absl::Status RunNote(client::DialClient& client, const std::string& study,
                     std::optional<int64_t> trial,
                     const std::vector<std::string>& text, bool json,
                     std::istream& in, std::ostream& out) {
  if (text.empty()) {
    std::string note;
    if (trial) {
      auto t = client.GetTrial(study, *trial);
      if (!t.ok()) return t.status();
      if (json) {
        out << client::ToJson(*t) << "\n";
        return absl::OkStatus();
      }
      note = t->note();
    } else {
      auto s = client.GetStudy(study);
      if (!s.ok()) return s.status();
      if (json) {
        out << client::ToJson(*s) << "\n";
        return absl::OkStatus();
      }
      note = s->note();
    }
    if (!note.empty()) out << note << "\n";
    return absl::OkStatus();
  }
  std::string note = absl::StrJoin(text, " ");
  if (text.size() == 1 && text[0] == "-") {
    note.assign(std::istreambuf_iterator<char>(in),
                std::istreambuf_iterator<char>());
    // A file or a heredoc ends in a newline that is not part of the note.
    note = std::string(absl::StripSuffix(note, "\n"));
  }
  auto r = client.SetNote(study, trial, note);
  if (!r.ok()) return r.status();
  if (json) {
    out << (trial ? client::ToJson(r->trial()) : client::ToJson(r->study()))
        << "\n";
  } else if (note.empty()) {
    out << "cleared the note of " << study
        << (trial ? " trial " + std::to_string(*trial) : "") << "\n";
  } else {
    out << "set the note of " << study
        << (trial ? " trial " + std::to_string(*trial) : "") << " ("
        << note.size() << " bytes)\n";
  }
  return absl::OkStatus();
}

}  // namespace dial::cli
