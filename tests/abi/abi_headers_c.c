/* The ABI headers compile as C (C11) and report their struct sizes as C sees them. */
#include <stddef.h>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/ddo_model_plugin.h"
#include "ddo/ddo_plugin_abi.h"

_Static_assert(sizeof(ddo_plugin_info) == 48, "ddo_plugin_info is ABI");
_Static_assert(offsetof(ddo_allocator_vtable, get_stats) == 72, "ddo_allocator_vtable is ABI");

size_t ddo_abi_c_size(int which) {
    switch (which) {
        case 0: return sizeof(ddo_plugin_info);
        case 1: return sizeof(ddo_host_api);
        case 2: return sizeof(ddo_model_vtable);
        case 3: return sizeof(ddo_kv);
        case 4: return sizeof(ddo_alloc_config);
        case 5: return sizeof(ddo_alloc_buffer);
        case 6: return sizeof(ddo_alloc_stats);
        case 7: return sizeof(ddo_allocator_vtable);
        default: return 0;
    }
}
