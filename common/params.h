// Text forms of hyperparameter values, shared by the searchers (which compare
// them against `when` conditions) and the clients (which show them to
// people). Thread-safe: free functions.
#pragma once

#include <string>

#include "dial/v1/study.pb.h"

namespace dial {

// Text form of a value ("0.01", "32", "adam"), as shown to users and as
// compared against `when` conditions. A double prints in its shortest form
// that still round-trips (up to max_digits10 digits); an unset value is "".
std::string ParamValueToString(const v1::ParamValue& value);

}  // namespace dial
