// FFmpeg log capture and error text for libddo_media (libav_support.hpp).
#include "libav_support.hpp"

#include <cstdarg>
#include <cstdio>
#include <mutex>

#include "ddo/error.hpp"

namespace ddo::media::detail {
namespace {

thread_local std::string last_logged_error;

extern "C" void keep_errors(void * avcl, int level, const char * fmt, va_list vl) {
    if (level > AV_LOG_ERROR) return;
    char line[1024];
    int print_prefix = 1;
    av_log_format_line2(avcl, level, fmt, vl, line, sizeof line, &print_prefix);
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (!text.empty()) last_logged_error = text;
}

}  // namespace

void begin_libav_calls() {
    static std::once_flag once;
    std::call_once(once, [] { av_log_set_callback(keep_errors); });
    last_logged_error.clear();
}

std::string av_error_text(int err) {
    char buf[AV_ERROR_MAX_STRING_SIZE] = {};
    av_strerror(err, buf, sizeof buf);
    std::string text(buf);
    if (!last_logged_error.empty()) text += " (libav: " + last_logged_error + ")";
    return text;
}

FramePtr make_frame(const std::string & what) {
    FramePtr f(av_frame_alloc());
    if (!f) throw RuntimeError(what + ": out of memory allocating an AVFrame");
    return f;
}

PacketPtr make_packet(const std::string & what) {
    PacketPtr p(av_packet_alloc());
    if (!p) throw RuntimeError(what + ": out of memory allocating an AVPacket");
    return p;
}

std::string file_url(const std::string & path) { return "file:" + path; }

void set_tags(AVDictionary ** dict, const MediaTags & tags, const std::string & what) {
    for (const auto & [k, v] : tags)
        if (int r = av_dict_set(dict, k.c_str(), v.c_str(), 0); r < 0)
            throw RuntimeError(what + ": setting the tag '" + k + "' failed: " + av_error_text(r));
}

InputPtr open_input(const std::filesystem::path & path) {
    begin_libav_calls();
    const std::string url = file_url(path.string());
    AVFormatContext * raw = nullptr;
    int r = avformat_open_input(&raw, url.c_str(), nullptr, nullptr);
    if (r < 0) throw RuntimeError("media " + path.string() + ": cannot open it: " + av_error_text(r));
    InputPtr in(raw);
    r = avformat_find_stream_info(in.get(), nullptr);
    if (r < 0) throw RuntimeError("media " + path.string() + ": cannot read its streams: " + av_error_text(r));
    return in;
}

}  // namespace ddo::media::detail
