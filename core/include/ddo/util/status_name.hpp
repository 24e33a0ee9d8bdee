// The name of a ddo_status as the ABI header spells it, without the prefix ("BUSY"), for messages.
#pragma once

#include "ddo/ddo_plugin_abi.h"

namespace ddo {

const char * status_name(ddo_status status) noexcept;  // static storage; "UNKNOWN" outside the enum

}  // namespace ddo
