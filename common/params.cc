#include "common/params.h"

#include <cstdlib>
#include <limits>
#include <sstream>

namespace dial {

std::string ParamValueToString(const v1::ParamValue& value) {
  switch (value.value_case()) {
    case v1::ParamValue::kDoubleValue: {
      std::ostringstream s;
      s.precision(std::numeric_limits<double>::max_digits10);
      s << value.double_value();
      // Prefer the short form when it round-trips. strtod, not std::stod:
      // stod throws out_of_range on a subnormal value.
      std::ostringstream shorter;
      shorter << value.double_value();
      if (std::strtod(shorter.str().c_str(), nullptr) == value.double_value()) {
        return shorter.str();
      }
      return s.str();
    }
    case v1::ParamValue::kIntValue:
      return std::to_string(value.int_value());
    case v1::ParamValue::kStringValue:
      return value.string_value();
    default:
      return "";
  }
}

}  // namespace dial
