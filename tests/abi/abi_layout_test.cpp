// Pins every ABI struct of core/include/ddo/*.h (LP64 Linux): sizes, member offsets and enum
// values. A failure here means a released layout changed; append members or add a new struct.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/ddo_model_plugin.h"
#include "ddo/ddo_plugin_abi.h"

#define DDO_PIN_SIZE(T, N) static_assert(sizeof(T) == (N), #T " is ABI: append to it or add a new struct")
#define DDO_PIN_OFFSET(T, M, N) static_assert(offsetof(T, M) == (N), #T "." #M " moved: ABI break")

static_assert(sizeof(void *) == 8, "the pinned layouts are for LP64 targets");
static_assert(DDO_ABI_VERSION_MAJOR == 1 && DDO_ABI_VERSION_MINOR == 1, "bump the pins with the ABI version");

DDO_PIN_SIZE(ddo_status, 4);
DDO_PIN_SIZE(ddo_plugin_kind, 4);
static_assert(DDO_STATUS_OK == 0 && DDO_STATUS_INVALID_ARGUMENT == 1 && DDO_STATUS_OUT_OF_MEMORY == 2 &&
              DDO_STATUS_UNSUPPORTED == 3 && DDO_STATUS_BUSY == 4 && DDO_STATUS_UNAVAILABLE == 5 &&
              DDO_STATUS_INTERNAL == 6 && DDO_STATUS_INTERRUPTED == 7);
static_assert(DDO_PLUGIN_KIND_MODEL == 1 && DDO_PLUGIN_KIND_ALLOCATOR == 2);
static_assert(DDO_LOG_LEVEL_TRACE == 0 && DDO_LOG_LEVEL_DEBUG == 1 && DDO_LOG_LEVEL_INFO == 2 &&
              DDO_LOG_LEVEL_WARN == 3 && DDO_LOG_LEVEL_ERROR == 4);
static_assert(DDO_ALLOC_BACKEND_AUTO == 0 && DDO_ALLOC_BACKEND_HOST == 1 && DDO_ALLOC_BACKEND_CUDA == 2);
static_assert(DDO_ALLOC_FLAG_LEASED == 1 && DDO_ALLOC_FLAG_PENDING == 2);

DDO_PIN_SIZE(ddo_plugin_info, 48);
DDO_PIN_OFFSET(ddo_plugin_info, struct_size, 0);
DDO_PIN_OFFSET(ddo_plugin_info, abi_major, 4);
DDO_PIN_OFFSET(ddo_plugin_info, abi_minor, 8);
DDO_PIN_OFFSET(ddo_plugin_info, kind, 12);
DDO_PIN_OFFSET(ddo_plugin_info, name, 16);
DDO_PIN_OFFSET(ddo_plugin_info, version, 24);
DDO_PIN_OFFSET(ddo_plugin_info, aliases, 32);
DDO_PIN_OFFSET(ddo_plugin_info, build_fingerprint, 40);

DDO_PIN_SIZE(ddo_host_api, 32);
DDO_PIN_OFFSET(ddo_host_api, struct_size, 0);
DDO_PIN_OFFSET(ddo_host_api, abi_minor, 4);
DDO_PIN_OFFSET(ddo_host_api, host_ctx, 8);
DDO_PIN_OFFSET(ddo_host_api, log, 16);
DDO_PIN_OFFSET(ddo_host_api, set_error, 24);

DDO_PIN_SIZE(ddo_model_vtable, 48);  // 1.1 appended pipeline_classes
DDO_PIN_OFFSET(ddo_model_vtable, struct_size, 0);
DDO_PIN_OFFSET(ddo_model_vtable, abi_minor, 4);
DDO_PIN_OFFSET(ddo_model_vtable, description, 8);
DDO_PIN_OFFSET(ddo_model_vtable, components, 16);
DDO_PIN_OFFSET(ddo_model_vtable, supported_options, 24);
DDO_PIN_OFFSET(ddo_model_vtable, run, 32);
DDO_PIN_OFFSET(ddo_model_vtable, pipeline_classes, 40);  // since 1.1

DDO_PIN_SIZE(ddo_kv, 16);
DDO_PIN_OFFSET(ddo_kv, key, 0);
DDO_PIN_OFFSET(ddo_kv, value, 8);

DDO_PIN_SIZE(ddo_alloc_config, 48);
DDO_PIN_OFFSET(ddo_alloc_config, struct_size, 0);
DDO_PIN_OFFSET(ddo_alloc_config, backend, 4);
DDO_PIN_OFFSET(ddo_alloc_config, device, 8);
DDO_PIN_OFFSET(ddo_alloc_config, reserved0, 12);
DDO_PIN_OFFSET(ddo_alloc_config, physical_limit, 16);
DDO_PIN_OFFSET(ddo_alloc_config, virtual_limit, 24);
DDO_PIN_OFFSET(ddo_alloc_config, options, 32);
DDO_PIN_OFFSET(ddo_alloc_config, n_options, 40);

DDO_PIN_SIZE(ddo_alloc_buffer, 24);
DDO_PIN_OFFSET(ddo_alloc_buffer, id, 0);
DDO_PIN_OFFSET(ddo_alloc_buffer, ptr, 8);
DDO_PIN_OFFSET(ddo_alloc_buffer, bytes, 16);

DDO_PIN_SIZE(ddo_alloc_stats, 144);
DDO_PIN_OFFSET(ddo_alloc_stats, struct_size, 0);
DDO_PIN_OFFSET(ddo_alloc_stats, backend, 4);
DDO_PIN_OFFSET(ddo_alloc_stats, physical_bytes, 8);
DDO_PIN_OFFSET(ddo_alloc_stats, virtual_bytes, 16);
DDO_PIN_OFFSET(ddo_alloc_stats, bytes_in_use, 24);
DDO_PIN_OFFSET(ddo_alloc_stats, peak_bytes_in_use, 32);
DDO_PIN_OFFSET(ddo_alloc_stats, live_buffers, 40);
DDO_PIN_OFFSET(ddo_alloc_stats, leased_buffers, 48);
DDO_PIN_OFFSET(ddo_alloc_stats, pending_buffers, 56);
DDO_PIN_OFFSET(ddo_alloc_stats, reserves, 64);
DDO_PIN_OFFSET(ddo_alloc_stats, releases, 72);
DDO_PIN_OFFSET(ddo_alloc_stats, reclaims, 80);
DDO_PIN_OFFSET(ddo_alloc_stats, recreates, 88);
DDO_PIN_OFFSET(ddo_alloc_stats, trims, 96);
DDO_PIN_OFFSET(ddo_alloc_stats, trimmed_bytes, 104);
DDO_PIN_OFFSET(ddo_alloc_stats, failures, 112);
DDO_PIN_OFFSET(ddo_alloc_stats, refusals, 120);
DDO_PIN_OFFSET(ddo_alloc_stats, ooms, 128);
DDO_PIN_OFFSET(ddo_alloc_stats, quarantines, 136);

DDO_PIN_SIZE(ddo_allocator_vtable, 80);
DDO_PIN_OFFSET(ddo_allocator_vtable, struct_size, 0);
DDO_PIN_OFFSET(ddo_allocator_vtable, abi_minor, 4);
DDO_PIN_OFFSET(ddo_allocator_vtable, pool_create, 8);
DDO_PIN_OFFSET(ddo_allocator_vtable, pool_close, 16);
DDO_PIN_OFFSET(ddo_allocator_vtable, reserve, 24);
DDO_PIN_OFFSET(ddo_allocator_vtable, release, 32);
DDO_PIN_OFFSET(ddo_allocator_vtable, set_flags, 40);
DDO_PIN_OFFSET(ddo_allocator_vtable, reclaim, 48);
DDO_PIN_OFFSET(ddo_allocator_vtable, recreate, 56);
DDO_PIN_OFFSET(ddo_allocator_vtable, trim_idle, 64);
DDO_PIN_OFFSET(ddo_allocator_vtable, get_stats, 72);

// Sizes as seen by a C compiler (abi_headers_c.c): C and C++ must agree.
extern "C" std::size_t ddo_abi_c_size(int which);

namespace {

TEST(AbiLayout, CAndCxxAgreeOnEveryStruct) {
    const std::size_t cxx[] = {sizeof(ddo_plugin_info), sizeof(ddo_host_api),     sizeof(ddo_model_vtable),
                               sizeof(ddo_kv),          sizeof(ddo_alloc_config), sizeof(ddo_alloc_buffer),
                               sizeof(ddo_alloc_stats), sizeof(ddo_allocator_vtable)};
    for (int i = 0; i < static_cast<int>(std::size(cxx)); ++i) EXPECT_EQ(ddo_abi_c_size(i), cxx[i]) << "struct #" << i;
}

TEST(AbiLayout, EntryPointNamesAreFixed) {
    EXPECT_STREQ(DDO_PLUGIN_NEGOTIATE_SYMBOL, "ddo_plugin_negotiate");
    EXPECT_STREQ(DDO_PLUGIN_GET_VTABLE_SYMBOL, "ddo_plugin_get_vtable");
}

// A plugin built with ddo_add_plugin() exports exactly the two entry points (version script).
TEST(AbiSymbols, BuiltPluginsExportExactlyTheTwoEntryPoints) {
    for (const char * file : {"libddo_model_fixture_good.so", "libddo_allocator_fixture_alloc.so"}) {
        const std::string path = std::string(DDO_BINARY_DIR) + "/tests/fixtures/plugins/" + file;
        const std::string cmd = "nm -D --defined-only '" + path + "' 2>&1";
        FILE * pipe = ::popen(cmd.c_str(), "r");
        ASSERT_NE(pipe, nullptr);
        std::string out;
        char buf[4096];
        while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
        ASSERT_EQ(::pclose(pipe), 0) << out;
        std::set<std::string> functions_and_data;
        std::istringstream lines(out);
        for (std::string line; std::getline(lines, line);) {
            std::istringstream fields(line);
            std::string address, type, name;
            fields >> address >> type >> name;
            if (type == "T" || type == "D" || type == "B" || type == "R" || type == "W")
                functions_and_data.insert(name.substr(0, name.find('@')));
        }
        EXPECT_EQ(functions_and_data, (std::set<std::string>{"ddo_plugin_negotiate", "ddo_plugin_get_vtable"}))
            << file << ":\n" << out;
    }
}

}  // namespace
