// The parts of http::Server that do not touch sockets: targets and query
// strings, gzip, files from a mounted directory. Plain functions.
#pragma once

#include <map>
#include <string>

#include "absl/strings/string_view.h"
#include "http/server.h"

namespace dial::http {

// Splits a request target into its percent-decoded path and query
// parameters ('+' is a space in the query). False for a target that is
// not origin-form ("/..."), or a bad %-escape.
bool ParseTarget(absl::string_view target, std::string& path,
                 std::multimap<std::string, std::string>& params);

// Whether an Accept-Encoding header accepts gzip (with a q above 0).
bool AcceptsGzip(absl::string_view accept_encoding);
// Whether answers of this Content-Type are worth compressing.
bool Compressible(absl::string_view content_type);
// `data` in the gzip format.
std::string Gzip(absl::string_view data);

// Answers a GET of `path` from the files below `dir`: 404 for a missing
// file or one reached through a symbolic link or a dot segment; the
// Content-Type comes from the file's own name.
void ServeFile(const std::string& dir, const std::string& path,
               Response& response);

}  // namespace dial::http
