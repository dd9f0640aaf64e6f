// Moved to loaders/convert.hpp (issue 25: file formats at the bottom, loaders above
// the model); this forwarding header keeps old includes building.
#pragma once

#include "streamllm/loaders/convert.hpp"
