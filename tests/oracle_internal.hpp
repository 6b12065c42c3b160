// The oracle's internals that both its files need: what oracle.cpp (the formats) gives
// oracle_reference.cpp (the op) beyond oracle.hpp.
#pragma once

#include <cstdint>

#include "oracle.hpp"

namespace ropekv_oracle {

// Bytes per element of a dtype (oracle.cpp).
std::int64_t bytes_of(DType dtype);

}  // namespace ropekv_oracle
