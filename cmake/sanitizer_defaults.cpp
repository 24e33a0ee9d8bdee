// The sanitizers' defaults, compiled into ddo's executables when DDO_SANITIZE is on (cmake/ddo_warnings.cmake): the
// sanitizer runtime asks the executable for these functions, also during gtest discovery at build time, where no
// environment (LSAN_OPTIONS, ...) can be passed. ASAN_OPTIONS / LSAN_OPTIONS / UBSAN_OPTIONS still override them.
// docs/validation.md, "Sanitizers".

// LeakSanitizer suppressions: third-party code only; every entry names a library that is not ours and says why.
extern "C" const char * __lsan_default_suppressions() {
    return
        // LibTorch's CUDA library allocates process-lifetime registries in static initialisers
        // (_GLOBAL__sub_I_CachingHostAllocator.cpp) and never frees them: reported in every binary that links
        // libtorch_cuda.so (or loads a plugin that does), before main() runs any ddo code.
        "leak:libtorch_cuda.so\n";
}

// print_suppressions=0: the "Suppressions used" table goes to stderr at every exit; tests that read a child's
// combined output (ddo-host plugins --json) would see it as part of the JSON. Suppressed leaks stay suppressed.
extern "C" const char * __lsan_default_options() { return "print_suppressions=0"; }

// A UBSan report with the stack that led to it (the build aborts on the first one: -fno-sanitize-recover=all).
extern "C" const char * __ubsan_default_options() { return "print_stacktrace=1"; }
