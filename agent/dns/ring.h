// A FIFO of at most `capacity` elements in one allocation, for what the DNS service keeps for
// hours under a steady stream (Accounting's verdict windows, the engine's recent traces). A
// std::deque allocates a block every few elements and frees the oldest as it rotates, so after a
// burst of DNS the blocks that stay live are scattered over every page the burst's heap used, and
// those pages stay resident (docs/benchmarks/density.md: most of the agent's RSS after load). A
// ring allocates while it grows (doubling, up to its capacity) and never while it rotates.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

namespace nodegate::dns {

template <typename T>
class Ring {
 public:
  explicit Ring(std::size_t capacity) : capacity_(capacity) {}

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == capacity_; }

  // At most capacity(): the caller makes room (pop_front) first; pushing onto a full ring is a
  // logic error and drops the element.
  void push_back(T v) {
    if (!full()) overwrite_back(std::move(v));
  }
  // Appends, and when the ring is full drops the oldest element by assigning `v` into its slot:
  // an element whose members keep their storage on assignment (strings, vectors) then takes a
  // copy of the same shape without allocating. A ring of capacity 0 keeps nothing.
  template <typename U>
  void overwrite_back(U&& v) {
    if (capacity_ == 0) return;
    if (full()) {
      slots_[head_] = std::forward<U>(v);
      head_ = (head_ + 1) % slots_.size();
      return;
    }
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) % slots_.size()] = std::forward<U>(v);
    ++size_;
  }
  void pop_front() {
    if (empty()) return;
    slots_[head_] = T{};  // what the element owns goes now, not when its slot is reused
    head_ = (head_ + 1) % slots_.size();
    --size_;
  }
  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }
  T& back() { return at(size_ - 1); }
  const T& back() const { return at(size_ - 1); }
  const T& operator[](std::size_t i) const { return at(i); }

  template <typename R, typename V>
  class Iter {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = std::remove_const_t<V>;
    using difference_type = std::ptrdiff_t;
    using pointer = V*;
    using reference = V&;
    Iter() = default;
    Iter(R* ring, std::size_t i) : ring_(ring), i_(i) {}
    reference operator*() const { return ring_->at(i_); }
    pointer operator->() const { return &ring_->at(i_); }
    Iter& operator++() {
      ++i_;
      return *this;
    }
    Iter operator++(int) {
      Iter old = *this;
      ++i_;
      return old;
    }
    Iter& operator--() {
      --i_;
      return *this;
    }
    Iter operator--(int) {
      Iter old = *this;
      --i_;
      return old;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }

   private:
    R* ring_ = nullptr;
    std::size_t i_ = 0;  // position from the front
  };
  using iterator = Iter<Ring, T>;
  using const_iterator = Iter<const Ring, const T>;
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }
  std::reverse_iterator<iterator> rbegin() { return std::reverse_iterator(end()); }
  std::reverse_iterator<iterator> rend() { return std::reverse_iterator(begin()); }

  // The i-th element from the front.
  T& at(std::size_t i) { return slots_[(head_ + i) % slots_.size()]; }
  const T& at(std::size_t i) const { return slots_[(head_ + i) % slots_.size()]; }

 private:
  // Room for twice as many (at least 16, at most capacity_), the elements moved to its front.
  // Full means size_ == capacity_ == slots_.size(), which overwrite_back() relies on.
  void grow() {
    const std::size_t n = std::min(capacity_, std::max<std::size_t>(16, 2 * slots_.size()));
    std::vector<T> bigger;
    bigger.reserve(n);
    for (std::size_t i = 0; i < size_; ++i) bigger.push_back(std::move(at(i)));
    bigger.resize(n);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::size_t capacity_;
  std::vector<T> slots_;  // the ring; its size is the room allocated so far
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace nodegate::dns
