// The copy worker's queue wait, shared by the transports' worker threads (CPU: cpu_transport.cpp, CUDA:
// core/torch/src/cuda_transport.cpp): each owns a mutex, a condition variable, a deque of jobs and a stop flag.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace ddo::engine {

// The next job from `queue`, waiting on `cv` until there is one or `stop` is set; nullopt once `stop` is set and
// the queue is drained (the worker then ends). `m` guards `queue` and `stop`.
template <class Job>
std::optional<Job> next_copy_job(std::mutex & m, std::condition_variable & cv, std::deque<Job> & queue, const bool & stop) {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return stop || !queue.empty(); });
    if (queue.empty()) return std::nullopt;
    std::optional<Job> job(std::move(queue.front()));
    queue.pop_front();
    return job;
}

}  // namespace ddo::engine
