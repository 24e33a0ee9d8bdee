// Container metadata written by the media writers (the MP4's udta/ilst, the WAV's LIST/INFO), as the PNG writer's
// text chunks tie an image to its run. The muxer keeps the keys its format knows (mp4: title, comment, description,
// ...; wav: title, comment, artist, ...) and drops the others.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddo::media {

using MediaTags = std::vector<std::pair<std::string, std::string>>;  // (key, UTF-8 value)

}  // namespace ddo::media
