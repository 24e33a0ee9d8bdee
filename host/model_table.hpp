// Reading a model plugin's table (ddo_model_vtable) on the host side: its NULL-terminated string lists, and the
// members later ABI minors appended, read only when the table's struct_size covers them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ddo/ddo_model_plugin.h"

namespace ddo::host {

// A NULL-terminated list of static strings (NULL itself: empty).
inline std::vector<std::string> c_list(const char * const * list) {
    std::vector<std::string> out;
    for (; list && *list; ++list) out.emplace_back(*list);
    return out;
}

// ddo_model_vtable.pipeline_classes (ABI 1.1); empty for a 1.0 table or none declared.
inline std::vector<std::string> pipeline_classes(const ddo_model_vtable * vt) {
    if (!vt || vt->struct_size < offsetof(ddo_model_vtable, pipeline_classes) + sizeof(vt->pipeline_classes)) return {};
    return c_list(vt->pipeline_classes);
}

}  // namespace ddo::host
