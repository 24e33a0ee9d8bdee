#include "ddo/engine/route.hpp"

namespace ddo::engine {

const char * to_string(Route r) noexcept {
    switch (r) {
        case Route::resident: return "resident";
        case Route::component: return "component";
        case Route::group_block: return "group_block";
        case Route::group_leaf: return "group_leaf";
        case Route::dynamic: return "dynamic";
        case Route::disk: return "disk";
    }
    return "?";
}

std::optional<Route> parse_route(std::string_view s) noexcept {
    for (Route r : {Route::resident, Route::component, Route::group_block, Route::group_leaf, Route::dynamic, Route::disk})
        if (s == to_string(r)) return r;
    return std::nullopt;
}

}  // namespace ddo::engine
