#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <utility>

namespace konn::core::h2 {

// A queue that holds no memory while empty: std::deque allocates a 512-byte block and its map
// when constructed, which every idle stream would keep (an agent's, a held tunnel's). Allocated
// at the first push, freed when the last element leaves (issue 42).
template <typename T>
class IdleFreeQueue {
 public:
  bool empty() const { return !q_ || q_->empty(); }
  size_t size() const { return q_ ? q_->size() : 0; }
  void push_back(T&& v) {
    if (!q_) q_ = std::make_unique<std::deque<T>>();
    q_->push_back(std::move(v));
  }
  T& front() { return q_->front(); }
  const T& front() const { return q_->front(); }
  T& back() { return q_->back(); }
  void pop_front() {
    q_->pop_front();
    if (q_->empty()) q_.reset();
  }
  void pop_back() {
    q_->pop_back();
    if (q_->empty()) q_.reset();
  }
  void clear() { q_.reset(); }
  bool holds_memory() const { return q_ != nullptr; }
  // Iteration (const): an empty queue iterates over nothing.
  typename std::deque<T>::const_iterator begin() const { return (q_ ? *q_ : empty_).begin(); }
  typename std::deque<T>::const_iterator end() const { return (q_ ? *q_ : empty_).end(); }

 private:
  std::unique_ptr<std::deque<T>> q_;
  inline static const std::deque<T> empty_{};
};

}  // namespace konn::core::h2
