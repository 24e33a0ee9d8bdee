// Routes of the preset vocabulary (docs/presets.md, design.md §4): how a component's weights reach compute.
// One enum for presets (ddo::Route, resolved_settings.hpp) and the engine.
#pragma once

#include <optional>
#include <string_view>

namespace ddo::engine {

enum class Route {
    resident,     // every group uploaded once, kept for the engine's life
    component,    // every group uploaded at phase begin, freed at phase end (diffusers model offload)
    group_block,  // diffusers group offload, block level: no residents, one group ahead
    group_leaf,   // diffusers group offload, leaf level: no residents, one group ahead
    dynamic,      // planned resident prefix/selection within budgets; the rest streamed via slots
    disk,         // streamed from the checkpoint file through bounded staging slots
};

const char * to_string(Route r) noexcept;  // static storage
std::optional<Route> parse_route(std::string_view s) noexcept;

}  // namespace ddo::engine
