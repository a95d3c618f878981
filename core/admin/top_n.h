#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace konn::core::admin {

// The best `n` of a stream of items by `better` (better(a, b): a ranks before b), for a status
// page's "longest-lived" and "busiest" lists: O(log n) per item offered and n items of memory,
// whatever the number of tunnels. A heap whose top is the worst item kept.
template <typename T, typename Better>
class TopN {
 public:
  TopN(size_t n, Better better) : n_(n), better_(std::move(better)) { items_.reserve(n); }

  void offer(const T& item) {
    if (n_ == 0) return;
    if (items_.size() < n_) {
      items_.push_back(item);
      std::push_heap(items_.begin(), items_.end(), better_);
    } else if (better_(item, items_.front())) {
      std::pop_heap(items_.begin(), items_.end(), better_);
      items_.back() = item;
      std::push_heap(items_.begin(), items_.end(), better_);
    }
  }

  // The items kept, best first.
  std::vector<T> sorted() && {
    std::sort(items_.begin(), items_.end(), better_);
    return std::move(items_);
  }

 private:
  const size_t n_;
  Better better_;
  std::vector<T> items_;
};

// The best `n` of `rows` by `better` (on rows), best first, as pointers into `rows`.
template <typename Row, typename Better>
std::vector<const Row*> best_of(const std::vector<Row>& rows, size_t n, Better better) {
  auto by_row = [&better](const Row* a, const Row* b) { return better(*a, *b); };
  TopN<const Row*, decltype(by_row)> top(n, by_row);
  for (const auto& r : rows) top.offer(&r);
  return std::move(top).sorted();
}

}  // namespace konn::core::admin
