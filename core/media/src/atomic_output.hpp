// Internal to libddo_media: the temp file a writer lets libavformat fill, beside the target, then fsynced, hashed and
// renamed over (or, under Overwrite::refuse, onto a name nobody has taken meanwhile). The discipline of
// write_text_atomically (Note [Atomic report write], core/src/report/atomic_write.cpp): a reader or a crash sees no
// file or the whole one, never a torn one.
#pragma once

#include <filesystem>
#include <string>

#include "ddo/media/written_file.hpp"

namespace ddo::media::detail {

class AtomicOutput {
public:
    // what: "video", "audio" (messages). Refuses an existing target under Overwrite::refuse (UsageError) before any
    // work; creates the target's directory if missing; creates the temp file (RuntimeError naming the directory).
    AtomicOutput(const std::filesystem::path & target, Overwrite overwrite, std::string what);
    ~AtomicOutput();  // removes the temp file unless committed
    AtomicOutput(const AtomicOutput &) = delete;
    AtomicOutput & operator=(const AtomicOutput &) = delete;

    const std::filesystem::path & temp_path() const { return temp_; }
    // "<what> <target>": the prefix of every message about this output.
    std::string describe() const { return what_ + " " + target_.string(); }

    // The temp file, complete and closed by its writer: fsync, SHA-256 of its bytes, mode 0644, rename onto the
    // target, fsync of the directory.
    WrittenFile commit();

private:
    std::filesystem::path target_;
    std::filesystem::path temp_;
    Overwrite overwrite_;
    std::string what_;
    bool committed_ = false;
};

}  // namespace ddo::media::detail
