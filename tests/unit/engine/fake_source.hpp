#pragma once
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ddo/store/weight_store.hpp"

struct FakeSource : ddo::store::TensorSource {
    std::map<std::string, ddo::store::TensorInfo, std::less<>> t;
    void add(const std::string & name, std::uint64_t bytes) {
        ddo::store::TensorInfo i;
        i.name = name;
        i.dtype = ddo::store::DType::u8;
        i.shape = {static_cast<std::int64_t>(bytes)};
        i.nbytes = bytes;
        t[name] = i;
    }
    const ddo::store::TensorInfo * find(std::string_view n) const override {
        auto it = t.find(n);
        return it == t.end() ? nullptr : &it->second;
    }
    void read_tensor(const ddo::store::TensorInfo & i, void * dst, ddo::store::ReadMode) const override {
        std::memset(dst, static_cast<int>(i.name.size()), i.nbytes);
    }
    std::string describe() const override { return "fake"; }
};
