// Whether this test executable is built with AddressSanitizer (DDO_SANITIZE, CMake preset asan; docs/validation.md,
// "Sanitizers"). A test whose observation the sanitizer changes asserts what is true under it instead of skipping.
#pragma once

namespace ddo::testing {

#if defined(__SANITIZE_ADDRESS__)  // GCC
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)  // clang
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace ddo::testing
