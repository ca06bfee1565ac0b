// Boost.Container collections whose memory comes from a PostgreSQL memory
// context, so that an error or a transaction end can never leak them, and an
// allocation failure becomes std::bad_alloc (turned into an out-of-memory
// error by the boundary) instead of a longjmp out of a C++ frame.
#pragma once

#include <boost/container/small_vector.hpp>

#include "pg/pg.h"

namespace pgq::pg {

template <typename T>
class ContextAllocator {
 public:
  using value_type = T;

  explicit ContextAllocator(MemoryContext context) noexcept : context_(context) {}
  template <typename U>
  ContextAllocator(const ContextAllocator<U>& other) noexcept : context_(other.context()) {}

  T* allocate(std::size_t n) {
    if (n > MaxAllocSize / sizeof(T)) throw std::bad_alloc();
    void* memory = MemoryContextAllocExtended(context_, n * sizeof(T), MCXT_ALLOC_NO_OOM);
    if (memory == nullptr) throw std::bad_alloc();
    return static_cast<T*>(memory);
  }
  void deallocate(T* p, std::size_t) noexcept { pfree(p); }

  MemoryContext context() const noexcept { return context_; }

  template <typename U>
  bool operator==(const ContextAllocator<U>& other) const noexcept {
    return context_ == other.context();
  }
  template <typename U>
  bool operator!=(const ContextAllocator<U>& other) const noexcept {
    return context_ != other.context();
  }

 private:
  MemoryContext context_;
};

// A vector that keeps its first N elements inline and spills into `context`.
template <typename T, std::size_t N>
using SmallVector = boost::container::small_vector<T, N, ContextAllocator<T>>;

template <typename T, std::size_t N>
SmallVector<T, N> MakeSmallVector(MemoryContext context) {
  using Vector = SmallVector<T, N>;
  return Vector(typename Vector::allocator_type(ContextAllocator<T>(context)));
}

}  // namespace pgq::pg
