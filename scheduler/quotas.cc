#include "scheduler/quotas.h"

#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"

namespace dial::scheduler {
namespace {

// The keys a line gives; unset ones come from the default line.
struct Line {
  std::optional<double> weight;
  std::optional<int32_t> max_slots, max_gpus, max_priority;
};

absl::Status Bad(int line, const std::string& reason) {
  return absl::InvalidArgumentError(
      absl::StrCat("quotas line ", line, ": ", reason));
}

bool ValidOwner(absl::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
          c == '_' || c == '.' || c == '@')) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<int32_t> Count(int line, absl::string_view key,
                              absl::string_view value, int32_t min,
                              int32_t max) {
  int32_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < min || n > max) {
    return Bad(line,
               absl::StrCat(key, ": '", value, "' is not a whole number from ",
                            min, " to ", max));
  }
  return n;
}

absl::StatusOr<Line> ParseKeys(int line,
                               const std::vector<absl::string_view>& words) {
  Line out;
  for (size_t i = 1; i < words.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(words[i], absl::MaxSplits('=', 1));
    const absl::string_view key = kv.first, value = kv.second;
    if (words[i].find('=') == absl::string_view::npos) {
      return Bad(line, absl::StrCat("'", words[i], "' is not KEY=VALUE"));
    }
    auto twice = [&](bool set) {
      return set ? Bad(line, absl::StrCat(key, ": given twice"))
                 : absl::OkStatus();
    };
    if (key == "weight") {
      DIAL_RETURN_IF_ERROR(twice(out.weight.has_value()));
      double w = 0;
      if (!absl::SimpleAtod(value, &w) || !(w > 0) || w > 1e6) {
        return Bad(line, absl::StrCat("weight: '", value,
                                      "' is not a number above 0 (at most "
                                      "1000000)"));
      }
      out.weight = w;
    } else if (key == "max_slots") {
      DIAL_RETURN_IF_ERROR(twice(out.max_slots.has_value()));
      DIAL_ASSIGN_OR_RETURN(out.max_slots, Count(line, key, value, 0, 1000000));
    } else if (key == "max_gpus") {
      DIAL_RETURN_IF_ERROR(twice(out.max_gpus.has_value()));
      DIAL_ASSIGN_OR_RETURN(out.max_gpus, Count(line, key, value, 0, 1000000));
    } else if (key == "max_priority") {
      DIAL_RETURN_IF_ERROR(twice(out.max_priority.has_value()));
      DIAL_ASSIGN_OR_RETURN(out.max_priority,
                            Count(line, key, value, -100, 100));
    } else {
      return Bad(line, absl::StrCat("unknown key '", key,
                                    "'; expected weight, max_slots, "
                                    "max_gpus or max_priority"));
    }
  }
  return out;
}

Quota Fill(const Line& line, const Quota& base) {
  Quota q = base;
  if (line.weight) q.weight = *line.weight;
  if (line.max_slots) q.max_slots = *line.max_slots;
  if (line.max_gpus) q.max_gpus = *line.max_gpus;
  if (line.max_priority) q.max_priority = *line.max_priority;
  return q;
}

}  // namespace

absl::StatusOr<QuotaTable> Quotas::Parse(absl::string_view text) {
  std::optional<Line> fallback;
  std::map<std::string, Line> owners;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string owner(words[0]);
    if (owner != "default" && !ValidOwner(owner)) {
      return Bad(number, absl::StrCat("'", owner,
                                      "' is not an owner name (letters, "
                                      "digits, - _ . @)"));
    }
    DIAL_ASSIGN_OR_RETURN(Line keys, ParseKeys(number, words));
    if (owner == "default" ? fallback.has_value() : owners.count(owner) > 0) {
      return Bad(number, absl::StrCat("'", owner, "' given twice"));
    }
    if (owner == "default") {
      fallback = keys;
    } else {
      owners[owner] = keys;
    }
  }
  QuotaTable table;
  table.fallback = Fill(fallback.value_or(Line{}), Quota{});
  for (const auto& [owner, keys] : owners) {
    table.owners[owner] = Fill(keys, table.fallback);
  }
  return table;
}

absl::StatusOr<std::unique_ptr<Quotas>> Quotas::Load(const std::string& path) {
  std::unique_ptr<Quotas> quotas(new Quotas(path));
  DIAL_RETURN_IF_ERROR(quotas->Reload());
  return quotas;
}

std::shared_ptr<const QuotaTable> TableOf(const Quotas* quotas) {
  static const auto* const kDefault =
      new std::shared_ptr<const QuotaTable>(std::make_shared<QuotaTable>());
  return quotas ? quotas->table() : *kDefault;
}

std::shared_ptr<const QuotaTable> Quotas::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

absl::Status Quotas::Reload() {
  if (path_.empty()) return absl::OkStatus();
  std::ifstream in(path_);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--quotas: cannot read ", path_));
  }
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = Parse(text.str());
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quotas ", path_, ": ", parsed.status().message()));
  }
  auto table = std::make_shared<const QuotaTable>(*std::move(parsed));
  absl::MutexLock lock(&mu_);
  table_ = std::move(table);
  return absl::OkStatus();
}

}  // namespace dial::scheduler
