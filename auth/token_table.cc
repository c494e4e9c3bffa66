#include "auth/token_table.h"

#include <openssl/evp.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"

namespace dial::auth {

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kUser:
      return "user";
    case Role::kWorker:
      return "worker";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

std::string Sha256Hex(absl::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * size);
  for (unsigned int i = 0; i < size; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

namespace {

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '_' &&
        c != '@') {
      return false;
    }
  }
  return true;
}

std::optional<Role> ParseRole(absl::string_view text) {
  for (Role role : {Role::kViewer, Role::kUser, Role::kWorker, Role::kAdmin}) {
    if (RoleName(role) == text) return role;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<absl::flat_hash_map<std::string, Principal>> TokenTable::Parse(
    absl::string_view text) {
  absl::flat_hash_map<std::string, Principal> by_hash;
  absl::flat_hash_map<std::string, int> names;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth-tokens line ", line_number, ": ", why));
    };
    if (fields.size() != 3) {
      return bad("expected '<role> <name> <sha256-hex of the token>'");
    }
    std::optional<Role> role = ParseRole(fields[0]);
    if (!role) {
      return bad(absl::StrCat("unknown role '", fields[0],
                              "' (admin, user, worker or viewer)"));
    }
    if (!ValidName(fields[1])) {
      return bad("name: 1-64 letters, digits, '.', '-', '_' or '@'");
    }
    std::string hash = absl::AsciiStrToLower(fields[2]);
    if (hash.size() != 64 ||
        hash.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return bad(
          "the token's hash must be 64 hex digits (sha256sum of the token)");
    }
    if (auto [it, added] = names.emplace(fields[1], line_number); !added) {
      return bad(absl::StrCat("name '", fields[1], "' is already on line ",
                              it->second));
    }
    if (!by_hash.emplace(hash, Principal{std::string(fields[1]), *role})
             .second) {
      return bad("this token hash is already given to another principal");
    }
  }
  return by_hash;
}

absl::StatusOr<std::unique_ptr<TokenTable>> TokenTable::Load(
    const std::string& path) {
  std::unique_ptr<TokenTable> table(new TokenTable(path));
  DIAL_RETURN_IF_ERROR(table->Reload());
  return table;
}

absl::Status TokenTable::Reload() {
  std::ifstream in(path_);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--auth-tokens: cannot read ", path_));
  }
  std::ostringstream text;
  text << in.rdbuf();
  DIAL_ASSIGN_OR_RETURN(auto by_hash, Parse(text.str()));
  absl::MutexLock lock(&mu_);
  by_hash_ = std::move(by_hash);
  return absl::OkStatus();
}

std::optional<Principal> TokenTable::Find(absl::string_view token) const {
  if (token.empty()) return std::nullopt;
  const std::string hash = Sha256Hex(token);
  absl::MutexLock lock(&mu_);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

int TokenTable::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(by_hash_.size());
}

absl::StatusOr<Principal> AuthenticateBearer(
    const TokenTable* tokens, std::optional<absl::string_view> header) {
  if (tokens == nullptr) return Anonymous();
  if (!header) {
    return absl::UnauthenticatedError(
        "no token: send 'authorization: Bearer <token>' (dialctl --token or "
        "$DIAL_TOKEN)");
  }
  absl::string_view value = *header;
  if (!absl::ConsumePrefix(&value, "Bearer ")) {
    return absl::UnauthenticatedError(
        "authorization: expected 'Bearer <token>'");
  }
  std::optional<Principal> who = tokens->Find(value);
  if (!who) return absl::UnauthenticatedError("unknown token");
  return *who;
}

}  // namespace dial::auth
