// What the parity tests (tests/parity/*_parity_test.cpp) share: the fixture set's reference.json and the line naming
// who made it, the error measure and its check, and the messages of what a call throws.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::test {

// `dir`/reference.json (a fixture set of tools/reference, written last by its script), read once per folder; throws
// naming the file and `target`, the build target that generates it, when it is missing.
inline const nlohmann::json & reference_of(const std::filesystem::path & dir, const std::string & target) {
    static std::map<std::filesystem::path, nlohmann::json> read;
    auto it = read.find(dir);
    if (it == read.end()) {
        std::ifstream in(dir / "reference.json");
        if (!in)
            throw std::runtime_error((dir / "reference.json").string() + " missing: build target " + target +
                                     " (tools/ddo build)");
        it = read.emplace(dir, nlohmann::json::parse(in)).first;
    }
    return it->second;
}

// Prints and records (the test's "reference" property) who made the reference `r`:
// "<reference> <reference_version> (torch <torch_version>, seed <seed>)".
inline void announce_reference(const nlohmann::json & r) {
    const std::string who = r.at("reference").get<std::string>() + " " + r.at("reference_version").get<std::string>() +
                            " (torch " + r.at("torch_version").get<std::string>() + ", seed " +
                            std::to_string(r.at("seed").get<int>()) + ")";
    std::cout << "[ reference ] " << who << "\n";
    ::testing::Test::RecordProperty("reference", who);
}

// A parity suite on the fixture set in `dir`: SetUp skips the test when `dir`/reference.json is missing (naming
// `target`, the build target that generates it), else announces who made the reference.
class ParitySuite : public ::testing::Test {
protected:
    ParitySuite(std::filesystem::path dir, std::string target) : dir_(std::move(dir)), target_(std::move(target)) {}
    void SetUp() override {
        if (!std::filesystem::exists(dir_ / "reference.json"))
            GTEST_SKIP() << (dir_ / "reference.json").string() << " missing: build target " << target_;
        announce_reference(reference_of(dir_, target_));
    }

private:
    std::filesystem::path dir_;
    std::string target_;
};

// The largest |a - b| (in double); a size mismatch fails the test (naming `what`) and gives 1e30.
inline double max_abs(const at::Tensor & a, const at::Tensor & b, const std::string & what = "") {
    EXPECT_EQ(a.sizes(), b.sizes()) << what;
    if (a.sizes() != b.sizes()) return 1e30;
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Prints the largest |got - want| and checks it is at most `tol`; returns it.
inline double expect_close(const std::string & what, const at::Tensor & got, const at::Tensor & want, double tol) {
    const double e = max_abs(got, want, what);
    std::cout << "[ parity    ] " << what << ": max abs error " << e << " (tolerance " << tol << ")\n";
    EXPECT_LE(e, tol) << what;
    return e;
}

// What `f` throws, as "usage: <message>" (ddo::UsageError) or "runtime: <message>" (ddo::RuntimeError); "" when
// nothing is thrown.
template <class F>
std::string error_of(F && f) {
    try {
        f();
    } catch (const UsageError & e) {
        return std::string("usage: ") + e.what();
    } catch (const RuntimeError & e) {
        return std::string("runtime: ") + e.what();
    }
    return "";
}

// The message of the E that `f` throws; "(no error of the expected type)" when it throws none.
template <class E, class F>
std::string message_of(F && f) {
    try {
        f();
    } catch (const E & e) {
        return e.what();
    }
    return "(no error of the expected type)";
}

}  // namespace ddo::test
