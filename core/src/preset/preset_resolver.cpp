// Preset resolution (docs/presets.md, docs/architecture.md "Presets and resolution").
#include "ddo/preset/preset_resolver.hpp"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>
#include <charconv>
#include <fstream>
#include <iterator>
#include <cmath>
#include <set>

#include "ddo/preset/preset_schema.hpp"
#include "ddo/util/file_digest.hpp"
#include "ddo/util/utf8_text.hpp"

extern char ** environ;

namespace ddo {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char * kDocsHint = "see docs/presets.md";

struct Loc {
    std::string file;
    int line = 0;
    int column = 0;
};

[[noreturn]] void fail(const Loc & loc, const std::string & problem, const std::string & hint) {
    throw PresetError(loc.file, loc.line, loc.column, problem, hint);
}

bool is_meta(std::string_view key) {
    return key == "schema_version" || key == "description" || key == "inherits" || key.starts_with("auto.");
}

struct Context {
    std::vector<std::string> allowed_components;  // known + the plugin's
    const ResolveRequest * request = nullptr;
    // lint_preset_file: every key's error is collected here and the walk goes on; null = the first error throws.
    std::vector<PresetError> * collect = nullptr;
};

std::vector<std::string> hint_keys(const Context & ctx) {
    auto keys = concrete_keys(ctx.allowed_components);
    if (!ctx.request->plugin_name.empty() && ctx.request->supported_options)
        for (const auto & p : *ctx.request->supported_options)
            keys.push_back(p.starts_with("plugin.") ? p : "plugin." + p);
    return keys;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string> & candidates,
                         const std::string & fallback = kDocsHint) {
    auto n = nearest(word, candidates);
    return n.empty() ? fallback : "did you mean '" + n + "'? (" + kDocsHint + ")";
}

std::string choices_text(const KeyDef & d) {
    std::string s;
    for (const auto & c : d.choices) s += (s.empty() ? "" : " | ") + c;
    return s;
}

std::string range_text(const KeyDef & d) {
    auto fmt = [](double v) {
        if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
        return std::to_string(v);
    };
    return "[" + fmt(*d.min) + ", " + fmt(*d.max) + "]";
}

void check_range(const KeyDef & d, const std::string & key, double v, const Loc & loc) {
    // nan and inf compare false with every bound: refuse them before they become budgets (nan GiB -> 2^63 bytes).
    if (!std::isfinite(v))
        fail(loc, "value " + std::string(std::isnan(v) ? "nan" : "inf") + " for '" + key + "' is not a finite number",
             "give a number in " + range_text(d) + " (" + kDocsHint + ")");
    if ((d.min && v < *d.min) || (d.max && v > *d.max))
        fail(loc, "value " + json(v).dump() + " for '" + key + "' is out of range",
             "allowed range " + range_text(d) + " (" + kDocsHint + ")");
}

json check_enum(const KeyDef & d, const std::string & key, const std::string & v, const Loc & loc) {
    if (std::find(d.choices.begin(), d.choices.end(), v) == d.choices.end()) {
        auto n = nearest(v, d.choices);
        fail(loc, "invalid value '" + v + "' for '" + key + "'",
             (n.empty() ? std::string() : "did you mean '" + n + "'? ") + "expected one of " + choices_text(d));
    }
    return v;
}

std::string toml_type_name(const toml::node & n) {
    switch (n.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    default: return "date/time";
    }
}

[[noreturn]] void wrong_type(const KeyDef & d, const std::string & key, const std::string & found, const Loc & loc) {
    std::string expected = to_string(d.type);
    if (d.type == KeyType::enumeration) expected = "string: " + choices_text(d);
    fail(loc, "wrong type for '" + key + "': expected " + expected + ", found " + found, kDocsHint);
}

json convert_node(const toml::node & n, const KeyDef & d, const std::string & key, const Loc & loc) {
    switch (d.type) {
    case KeyType::boolean:
        if (auto b = n.as_boolean()) return b->get();
        break;
    case KeyType::integer:
        if (auto i = n.as_integer()) {
            check_range(d, key, static_cast<double>(i->get()), loc);
            return i->get();
        }
        break;
    case KeyType::number:
        if (auto i = n.as_integer()) {
            check_range(d, key, static_cast<double>(i->get()), loc);
            return static_cast<double>(i->get());
        }
        if (auto f = n.as_floating_point()) {
            check_range(d, key, f->get(), loc);
            return f->get();
        }
        break;
    case KeyType::string:
        if (auto s = n.as_string()) return s->get();
        break;
    case KeyType::enumeration:
        if (auto s = n.as_string()) return check_enum(d, key, s->get(), loc);
        break;
    case KeyType::string_or_list:
        if (auto s = n.as_string()) return json::array({s->get()});
        if (auto a = n.as_array()) {
            json out = json::array();
            for (const auto & e : *a) {
                if (!e.is_string()) break;
                out.push_back(e.as_string()->get());
            }
            if (out.size() == a->size()) return out;
        }
        break;
    case KeyType::number_list:
        if (auto a = n.as_array()) {
            json out = json::array();
            for (const auto & e : *a) {
                double v = 0;
                if (auto i = e.as_integer()) v = double(i->get());
                else if (auto f = e.as_floating_point()) v = f->get();
                else wrong_type(d, key, "array with a " + toml_type_name(e), loc);
                if (!std::isfinite(v)) wrong_type(d, key, "array with a non-finite number", loc);
                check_range(d, key, v, loc);
                out.push_back(v);
            }
            if (out.empty()) fail(loc, "'" + key + "' is an empty array", "give at least one number, or remove the key");
            return out;
        }
        break;
    }
    wrong_type(d, key, toml_type_name(n), loc);
}

json convert_text(std::string text, const KeyDef & d, const std::string & key, const Loc & loc) {
    if (text.size() >= 2 && ((text.front() == '"' && text.back() == '"') || (text.front() == '\'' && text.back() == '\'')))
        text = text.substr(1, text.size() - 2);
    auto lower = text;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    switch (d.type) {
    case KeyType::boolean:
        if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
        if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
        wrong_type(d, key, "'" + text + "'", loc);
    case KeyType::integer: {
        long long v = 0;
        auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || p != text.data() + text.size() || text.empty()) wrong_type(d, key, "'" + text + "'", loc);
        check_range(d, key, static_cast<double>(v), loc);
        return v;
    }
    case KeyType::number: {
        char * end = nullptr;
        double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) wrong_type(d, key, "'" + text + "'", loc);
        check_range(d, key, v, loc);
        return v;
    }
    case KeyType::string: return text;
    case KeyType::enumeration: return check_enum(d, key, text, loc);
    case KeyType::string_or_list: {
        // '["a", "b"]' (a JSON array of strings: what --lora writes for several files), else one string.
        if (!text.empty() && text.front() == '[') {
            const auto j = json::parse(text, nullptr, /*allow_exceptions=*/false);
            if (j.is_array() && std::all_of(j.begin(), j.end(), [](const json & e) { return e.is_string(); })) return j;
        }
        return json::array({text});
    }
    case KeyType::number_list: {
        // "[1.0, 0.5]" or "1.0,0.5"
        if (!text.empty() && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
        json out = json::array();
        std::size_t at = 0;
        while (at <= text.size()) {
            const auto comma = text.find(',', at);
            std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
            part.erase(0, part.find_first_not_of(" \t"));
            part.erase(part.find_last_not_of(" \t") + 1);
            char * end = nullptr;
            const double v = std::strtod(part.c_str(), &end);
            if (part.empty() || end != part.c_str() + part.size() || !std::isfinite(v))
                wrong_type(d, key, "'" + text + "'", loc);
            check_range(d, key, v, loc);
            out.push_back(v);
            if (comma == std::string::npos) break;
            at = comma + 1;
        }
        return out;
    }
    }
    return text;
}

// Plugin options carry any scalar (or array); their meaning belongs to the plugin.
json plugin_node_to_json(const toml::node & n, const std::string & key, const Loc & loc) {
    if (auto b = n.as_boolean()) return b->get();
    if (auto i = n.as_integer()) return i->get();
    if (auto f = n.as_floating_point()) {
        if (!std::isfinite(f->get()))
            fail(loc, "value " + std::string(std::isnan(f->get()) ? "nan" : "inf") + " for plugin option '" + key +
                          "' is not a finite number", "give a finite number");
        return f->get();
    }
    if (auto s = n.as_string()) return s->get();
    if (auto a = n.as_array()) {
        json out = json::array();
        for (const auto & e : *a) out.push_back(plugin_node_to_json(e, key, loc));
        return out;
    }
    fail(loc, "unsupported value type " + toml_type_name(n) + " for plugin option '" + key + "'",
         "use a boolean, integer, float, string or array");
}

// --set plugin.<name>.<option>=TEXT: a boolean, an integer, a float, a quoted or bare string, or a TOML array
// ("[28]", "[1, 2]"), as the same value in a preset file would be.
json plugin_text_to_json(const std::string & text, const std::string & key, const Loc & loc) {
    if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
        toml::table t;
        try {
            t = toml::parse("v = " + text);
        } catch (const toml::parse_error & e) {
            fail(loc, "'" + text + "' is not a TOML array (" + std::string(e.description()) + ")",
                 "write it as in a preset file, e.g. [1, 2]");
        }
        return plugin_node_to_json(*t.get("v"), key, loc);
    }
    if (text == "true") return true;
    if (text == "false") return false;
    long long i = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
    if (ec == std::errc() && p == text.data() + text.size() && !text.empty()) return i;
    char * end = nullptr;
    double d = std::strtod(text.c_str(), &end);
    if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(d)) return d;  // "nan"/"inf": a string
    if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front())
        return text.substr(1, text.size() - 2);
    return text;
}

bool pattern_matches(const std::string & pattern, const std::string & key) {
    if (!pattern.empty() && pattern.back() == '*')
        return key.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
    return key == pattern;
}

// Refuses plugin.<chosen>.* keys outside the plugin's supported_options.
void check_plugin_option(const Context & ctx, const std::string & key, const Loc & loc) {
    const auto & rq = *ctx.request;
    if (rq.known_plugins) {  // plugin.<name>: a plugin that exists (its options may belong to another model)
        const std::string name = key.substr(7, key.find('.', 7) - 7);
        const auto & k = *rq.known_plugins;
        if (std::find(k.begin(), k.end(), name) == k.end()) {
            std::string list;
            for (const auto & n : k) list += (list.empty() ? "" : ", ") + n;
            auto n = nearest(name, k);
            fail(loc, "'" + key + "' configures plugin '" + name + "', but no plugin of that name is installed",
                 (n.empty() ? std::string() : "did you mean 'plugin." + n + "'? ") + "installed: " +
                     (list.empty() ? std::string("(none)") : list) + " (ddo-host plugins)");
        }
    }
    if (rq.plugin_name.empty() || !rq.supported_options) return;
    std::string prefix = "plugin." + rq.plugin_name + ".";
    if (!key.starts_with(prefix)) return;
    std::string bare = key.substr(7);  // without "plugin."
    for (const auto & p : *rq.supported_options)
        if (pattern_matches(p, key) || pattern_matches(p, bare)) return;
    std::string list;
    for (const auto & p : *rq.supported_options) list += (list.empty() ? "" : ", ") + p;
    std::vector<std::string> cands;
    for (const auto & p : *rq.supported_options) cands.push_back(p.starts_with("plugin.") ? p : "plugin." + p);
    auto n = nearest(key, cands);
    fail(loc, "option '" + key + "' is not supported by plugin '" + rq.plugin_name + "'",
         (n.empty() ? std::string() : "did you mean '" + n + "'? ") + "supported patterns: " +
             (list.empty() ? std::string("(none)") : list) + "; remove the key or choose another plugin");
}

struct RawValue {
    std::string key;
    json value;
    Loc loc;
};

struct PresetFile {
    fs::path path;
    std::string sha256;
    std::string description;
    std::vector<RawValue> values;
    std::vector<std::pair<std::string, Loc>> inherits;
    std::map<std::string, std::pair<std::string, Loc>> auto_map;  // platform -> (preset, where)
};

bool is_known_prefix(const std::string & prefix) {
    if (prefix == "plugin" || prefix.starts_with("plugin.")) return true;
    if (prefix == "components") return true;
    if (prefix.starts_with("components.") && prefix.find('.', 11) == std::string::npos) return true;  // components.<c>
    for (const auto & k : preset_schema())
        if (k.key.starts_with(prefix + ".")) return true;
    return false;
}

Loc loc_of(const fs::path & file, const toml::node & n) {
    const auto & b = n.source().begin;
    return Loc{file.string(), static_cast<int>(b.line), static_cast<int>(b.column)};
}

void check_component(const Context & ctx, const std::string & component, const std::string & key, const Loc & loc) {
    const auto & a = ctx.allowed_components;
    if (std::find(a.begin(), a.end(), component) != a.end()) return;
    auto n = nearest(component, a);
    std::string list;
    for (const auto & c : a) list += (list.empty() ? "" : ", ") + c;
    fail(loc, "unknown component '" + component + "' in '" + key + "'",
         (n.empty() ? std::string() : "did you mean '" + n + "'? ") + "known components: " + list);
}

void walk(const Context & ctx, const fs::path & file, const toml::table & t, const std::string & prefix, PresetFile & out);

// One key (or table) of a preset file; in lint mode its error is collected and the walk goes on with the next key.
void walk_key(const Context & ctx, const fs::path & file, const toml::key & k, const toml::node & node,
              const std::string & prefix, PresetFile & out);

void walk(const Context & ctx, const fs::path & file, const toml::table & t, const std::string & prefix, PresetFile & out) {
    for (const auto & [k, node] : t) {
        try {
            walk_key(ctx, file, k, node, prefix, out);
        } catch (const PresetError & e) {
            if (!ctx.collect) throw;
            ctx.collect->push_back(e);
        }
    }
}

void walk_key(const Context & ctx, const fs::path & file, const toml::key & k, const toml::node & node,
              const std::string & prefix, PresetFile & out) {
    {
        std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
        Loc loc = loc_of(file, node);
        const auto & kb = k.source().begin;
        Loc key_loc = kb.line > 0 ? Loc{file.string(), static_cast<int>(kb.line), static_cast<int>(kb.column)} : loc;
        if (node.is_table()) {
            if (!is_known_prefix(key)) fail(key_loc, "unknown table '[" + key + "]'", did_you_mean(key, hint_keys(ctx)));
            if (key.starts_with("components.")) check_component(ctx, key.substr(11), key, key_loc);
            if (key == "plugin" || key.starts_with("plugin.")) {
                // plugin.<name> must be a table; its leaves are options.
            }
            walk(ctx, file, *node.as_table(), key, out);
            return;
        }
        if (key.starts_with("plugin.")) {
            if (std::count(key.begin(), key.end(), '.') < 2)
                fail(loc, "'" + key + "' must be a table of options", "write [plugin.<name>] then option = value");
            check_plugin_option(ctx, key, key_loc);
            out.values.push_back({key, plugin_node_to_json(node, key, loc), loc});
            return;
        }
        std::string component;
        const KeyDef * def = find_key(key, &component);
        if (!def) fail(key_loc, "unknown key '" + key + "'", did_you_mean(key, hint_keys(ctx)));
        if (!component.empty()) check_component(ctx, component, key, key_loc);
        json v = convert_node(node, *def, key, loc);
        if (key == "schema_version") return;
        if (key == "description") {
            out.description = v.get<std::string>();
            return;
        }
        if (key == "inherits") {
            for (const auto & p : v) out.inherits.emplace_back(p.get<std::string>(), loc);
            return;
        }
        if (key.starts_with("auto.")) {
            out.auto_map[key.substr(5)] = {v.get<std::string>(), loc};
            return;
        }
        out.values.push_back({key, std::move(v), loc});
    }
}

PresetFile parse_preset_file(const Context & ctx, const fs::path & path) {
    PresetFile pf;
    pf.path = path;
    toml::table tbl;
    std::string text;
    {
        std::ifstream in(path, std::ios::binary);
        if (!in) fail(Loc{path.string(), 0, 0}, "cannot read the preset file", "check that it exists and is readable");
        text.assign(std::istreambuf_iterator<char>(in), {});
    }
    // UTF-8 first: toml++ 3.3 is not safe on every invalid byte sequence (issue 16).
    if (const auto bad = first_invalid_utf8(text))
        fail(Loc{path.string(), bad->line, bad->column}, "not UTF-8 (byte " + std::to_string(bad->offset) + ")",
             "save the preset as UTF-8");
    try {
        tbl = toml::parse(text, path.string());
    } catch (const toml::parse_error & e) {
        const auto & b = e.source().begin;
        fail(Loc{path.string(), static_cast<int>(b.line), static_cast<int>(b.column)},
             "TOML syntax error: " + std::string(e.description()), "fix the syntax at this position (toml.io)");
    }
    auto sv = tbl["schema_version"];
    if (!sv) fail(Loc{path.string(), 1, 1}, "missing 'schema_version'", "add 'schema_version = 1' as the first line");
    walk(ctx, path, tbl, "", pf);
    pf.sha256 = file_sha256(path).value_or("");
    return pf;
}

std::vector<std::string> preset_names(const std::vector<fs::path> & dirs) {
    std::vector<std::string> names;
    for (const auto & d : dirs) {
        std::error_code ec;
        for (const auto & e : fs::directory_iterator(d, ec))
            if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

struct Resolution {
    std::map<std::string, ResolvedValue> values;
    std::vector<PresetFile> files;  // in the order read (requested first)
    std::string auto_choice, auto_reason;
};

void apply_file(const Context & ctx, const fs::path & path, std::vector<fs::path> & stack, Resolution & res,
                const PlatformInfo & platform, const std::vector<fs::path> & dirs) {
    PresetFile pf = parse_preset_file(ctx, path);
    res.files.push_back(pf);
    std::vector<std::pair<std::string, Loc>> parents = pf.inherits;
    if (!pf.auto_map.empty()) {
        std::string plat = to_string(platform.platform);
        auto it = pf.auto_map.find(plat);
        if (it == pf.auto_map.end()) it = pf.auto_map.find("other");
        if (it == pf.auto_map.end())
            fail(Loc{path.string(), 1, 1}, "auto preset has no entry for platform '" + plat + "'",
                 "add 'auto." + plat + " = \"<preset>\"' or 'auto.other'");
        parents.push_back(it->second);
        if (stack.size() == 1 && res.auto_choice.empty()) {
            res.auto_choice = it->second.first;
            res.auto_reason = "auto: platform '" + plat + "' (" + platform.evidence + ") selects '" + it->second.first +
                              "' (" + it->second.second.file + ":" + std::to_string(it->second.second.line) + ")";
        }
    }
    for (const auto & [name, loc] : parents) {
        std::vector<fs::path> search{path.parent_path()};
        search.insert(search.end(), dirs.begin(), dirs.end());
        fs::path parent;
        try {
            parent = find_preset(name, search);
        } catch (const PresetError & e) {
            fail(loc, "inherited preset '" + name + "' not found", e.hint());
        }
        auto canon = fs::weakly_canonical(parent);
        if (std::find(stack.begin(), stack.end(), canon) != stack.end()) {
            std::string cycle;
            for (const auto & s : stack) cycle += s.filename().string() + " -> ";
            cycle += canon.filename().string();
            fail(loc, "inherits cycle: " + cycle, "remove one of the 'inherits' entries of this cycle");
        }
        stack.push_back(canon);
        apply_file(ctx, canon, stack, res, platform, dirs);
        stack.pop_back();
    }
    for (const auto & rv : pf.values)
        res.values[rv.key] = ResolvedValue{rv.value, Provenance{SettingLayer::preset, rv.loc.file, rv.loc.line, rv.loc.column}};
}

std::vector<std::string> mentioned_components(const std::map<std::string, ResolvedValue> & values) {
    std::vector<std::string> out;
    for (const auto & [k, _] : values) {
        if (!k.starts_with("components.")) continue;
        auto c = k.substr(11, k.find('.', 11) - 11);
        if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
    return out;
}

void cross_check(const std::map<std::string, ResolvedValue> & v) {
    auto loc_of_value = [&](const std::string & k) {
        const auto & p = v.at(k).provenance;
        return Loc{p.layer == SettingLayer::command_line ? "--set " + p.source : p.source, p.line, p.column};
    };
    if (v.at("capacities.host_registration").value == "bounded" &&
        v.at("capacities.host_registration_ceiling_gb").value.get<double>() <= 0)
        fail(loc_of_value("capacities.host_registration"),
             "capacities.host_registration = \"bounded\" needs capacities.host_registration_ceiling_gb > 0",
             "set capacities.host_registration_ceiling_gb (GiB), or use \"full\" / \"off\"");
    if (v.at("vae.tile_size").value.get<long long>() % 8 != 0)
        fail(loc_of_value("vae.tile_size"),
             "vae.tile_size = " + v.at("vae.tile_size").value.dump() + " is not a multiple of 8",
             "tiles are cut on the VAE's 8-pixel latent grid; use e.g. " +
                 std::to_string(v.at("vae.tile_size").value.get<long long>() / 8 * 8));
    if (v.at("vae.tile_overlap").value.get<long long>() >= v.at("vae.tile_size").value.get<long long>())
        fail(loc_of_value("vae.tile_overlap"), "vae.tile_overlap must be smaller than vae.tile_size",
             "lower vae.tile_overlap or raise vae.tile_size");
}

}  // namespace

std::map<std::string, std::string> current_environment() {
    std::map<std::string, std::string> env;
    for (char ** e = environ; e && *e; ++e) {
        std::string_view kv(*e);
        if (!kv.starts_with("DDO_")) continue;
        auto eq = kv.find('=');
        if (eq == std::string_view::npos) continue;
        env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    }
    return env;
}

fs::path find_preset(const std::string & name_or_path, const std::vector<fs::path> & preset_dirs) {
    fs::path p(name_or_path);
    std::error_code ec;
    bool looks_like_path = name_or_path.find('/') != std::string::npos;
    if (looks_like_path || p.is_absolute()) {
        if (fs::is_regular_file(p, ec)) return fs::absolute(p);
    } else {
        for (const auto & d : preset_dirs) {
            for (const fs::path & c : {d / p, d / (name_or_path + ".toml")})
                if (fs::is_regular_file(c, ec)) return fs::absolute(c);
        }
        if (fs::is_regular_file(p, ec)) return fs::absolute(p);  // a file in the working directory
    }
    std::string dirs;
    for (const auto & d : preset_dirs) dirs += (dirs.empty() ? "" : ", ") + d.string();
    auto names = preset_names(preset_dirs);
    auto n = nearest(p.stem().string(), names);
    std::string hint = n.empty() ? "" : "did you mean '" + n + "'? ";
    std::string avail;
    for (const auto & x : names) avail += (avail.empty() ? "" : ", ") + x;
    throw PresetError(name_or_path, 0, 0, "preset file not found (searched: " + (dirs.empty() ? "." : dirs) + ")",
                      hint + "available presets: " + (avail.empty() ? "(none)" : avail) + "; or pass a file path");
}

ResolvedSettings resolve_settings(const ResolveRequest & rq) {
    Context ctx;
    ctx.request = &rq;
    ctx.allowed_components = known_components();
    if (rq.plugin_components)
        for (const auto & c : *rq.plugin_components)
            if (std::find(ctx.allowed_components.begin(), ctx.allowed_components.end(), c) == ctx.allowed_components.end())
                ctx.allowed_components.push_back(c);

    PlatformInfo platform = rq.platform ? *rq.platform : detect_platform(rq.proc_root);

    Resolution res;
    fs::path top;
    if (!rq.preset.empty()) {
        top = fs::weakly_canonical(find_preset(rq.preset, rq.preset_dirs));
        std::vector<fs::path> stack{top};
        apply_file(ctx, top, stack, res, platform, rq.preset_dirs);
    }
    auto preset_values = std::move(res.values);
    std::map<std::string, ResolvedValue> values;

    // Layer 0: built-in defaults, for every component a layer mentions plus the chosen set.
    std::vector<std::string> components;
    if (rq.plugin_components) {
        components = *rq.plugin_components;
    } else {
        components = {"text_encoder", "transformer", "vae"};
        for (const auto & c : mentioned_components(preset_values))
            if (std::find(components.begin(), components.end(), c) == components.end()) components.push_back(c);
    }
    auto default_components = components;
    for (const auto & c : mentioned_components(preset_values))
        if (std::find(default_components.begin(), default_components.end(), c) == default_components.end())
            default_components.push_back(c);
    for (const auto & key : concrete_keys(default_components)) {
        if (is_meta(key)) continue;
        values[key] = ResolvedValue{find_key(key)->default_value, Provenance{SettingLayer::builtin_default, "default"}};
    }
    // Layer 1: the preset and its parents (already ordered parent-first, child last).
    for (auto & [k, v] : preset_values) values[k] = std::move(v);

    // Layer 2: DDO_* environment.
    auto env_keys = concrete_keys(ctx.allowed_components);
    for (const auto & key : env_keys) {
        if (is_meta(key)) continue;
        auto name = env_name_for(key);
        auto it = rq.environment.find(name);
        if (it == rq.environment.end()) continue;
        const KeyDef * def = find_key(key);
        Loc loc{"environment " + name};
        if (const auto bad = first_invalid_utf8(it->second))
            fail(loc, "not valid UTF-8 at byte " + std::to_string(bad->offset), "set it to UTF-8 text");
        values[key] = ResolvedValue{convert_text(it->second, *def, key, loc), Provenance{SettingLayer::environment, name}};
    }

    // Layer 3: --set key=value, in order (a later --set of the same key wins).
    for (const auto & s : rq.sets) {
        auto eq = s.find('=');
        if (const auto bad = first_invalid_utf8(s))  // before anything parses it (toml++ is not safe on such bytes)
            fail(Loc{"--set " + s.substr(0, std::min(eq, bad->offset))}, "not valid UTF-8 at byte " + std::to_string(bad->offset),
                 "pass UTF-8 text (check the terminal's or the script's encoding)");
        Loc loc{"--set " + s};
        if (eq == std::string::npos || eq == 0)
            fail(loc, "expected key=value", "e.g. --set capacities.resident_budget_gb=4 (" + std::string(kDocsHint) + ")");
        std::string key = s.substr(0, eq), text = s.substr(eq + 1);
        if (key.starts_with("plugin.")) {
            if (std::count(key.begin(), key.end(), '.') < 2) fail(loc, "'" + key + "' is not a plugin option", "use plugin.<name>.<option>=value");
            check_plugin_option(ctx, key, loc);
            values[key] = ResolvedValue{plugin_text_to_json(text, key, loc), Provenance{SettingLayer::command_line, s}};
            continue;
        }
        std::string component;
        const KeyDef * def = find_key(key, &component);
        if (!def) fail(loc, "unknown key '" + key + "'", did_you_mean(key, hint_keys(ctx)));
        if (is_meta(key)) fail(loc, "'" + key + "' is preset metadata and cannot be set with --set", "edit the preset file");
        if (!component.empty()) check_component(ctx, component, key, loc);
        values[key] = ResolvedValue{convert_text(text, *def, key, loc), Provenance{SettingLayer::command_line, s}};
    }

    cross_check(values);

    ResolvedSettings out;
    for (auto & [k, v] : values) out.set(k, std::move(v));
    out.set_components(components);
    auto & id = out.mutable_preset();
    id.requested = rq.preset;
    id.platform = to_string(platform.platform);
    id.platform_evidence = platform.evidence;
    if (!top.empty()) {
        id.file = top.string();
        const auto & first = res.files.front();
        id.file_sha256 = first.sha256;
        id.description = first.description;
        for (const auto & f : res.files) {
            id.chain.push_back(f.path.string());
            id.chain_sha256.push_back(f.sha256);
        }
        if (!res.auto_choice.empty()) {
            id.effective = res.auto_choice;
            id.reason = res.auto_reason;
        } else {
            id.effective = top.stem().string();
            id.reason = "as requested";
        }
    } else {
        id.reason = "no preset: built-in defaults only";
    }
    return out;
}

std::vector<PresetError> lint_preset_file(const fs::path & file, const std::vector<fs::path> & preset_dirs) {
    ResolveRequest rq;
    rq.preset = file.string();
    if (rq.preset.find('/') == std::string::npos) rq.preset = (fs::path(".") / file).string();
    rq.preset_dirs = preset_dirs;
    std::vector<PresetError> errors;
    Context ctx;
    ctx.request = &rq;
    ctx.allowed_components = known_components();
    ctx.collect = &errors;
    try {
        (void)parse_preset_file(ctx, fs::weakly_canonical(find_preset(rq.preset, rq.preset_dirs)));
    } catch (const PresetError & e) {  // syntax, missing file or schema_version: nothing more can be read
        errors.push_back(e);
    }
    if (errors.empty()) {
        try {  // what needs the whole resolution: inherits (cycles, parents' errors) and cross-key checks
            (void)resolve_settings(rq);
        } catch (const PresetError & e) {
            errors.push_back(e);
        }
    }
    std::stable_sort(errors.begin(), errors.end(), [](const PresetError & a, const PresetError & b) {
        return std::make_tuple(a.file(), a.line(), a.column()) < std::make_tuple(b.file(), b.line(), b.column());
    });
    return errors;
}

void check_preset_file(const fs::path & file, const std::vector<fs::path> & preset_dirs) {
    ResolveRequest rq;
    rq.preset = file.string();
    if (rq.preset.find('/') == std::string::npos) rq.preset = (fs::path(".") / file).string();
    rq.preset_dirs = preset_dirs;
    (void)resolve_settings(rq);
}

}  // namespace ddo
