#include "mapping_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>

namespace stoker::detail {

// The handler reads these without locks: a slot's range is published begin-last and withdrawn
// begin-first, so it never sees half of one.
struct MappingGuard::Slot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<bool> damaged{false};
  std::atomic<bool> taken{false};
};

namespace {

constexpr int kSlots = 256;  // mappings guarded at once; more are left unguarded
MappingGuard::Slot* slots() {
  static MappingGuard::Slot s[kSlots];
  return s;
}
std::uintptr_t page_size = 4096;
struct sigaction previous {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (int i = 0; i < kSlots; ++i) {
    MappingGuard::Slot& s = slots()[i];
    const std::uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= s.end.load(std::memory_order_acquire)) continue;
    // Marked first: a thread that reads the zeros without faulting must find the mark after it.
    s.damaged.store(true, std::memory_order_seq_cst);
    void* page = reinterpret_cast<void*>(address & ~(page_size - 1));
    if (::mmap(page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      return;  // the access is retried and reads zeros
    }
    break;
  }
  // Not a guarded mapping: what was there before handles it.
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else {
    ::signal(SIGBUS, SIG_DFL);  // the access faults again and the process ends as it would have
  }
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    if (p > 0) page_size = static_cast<std::uintptr_t>(p);
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &previous);
  });
}

}  // namespace

MappingGuard::MappingGuard(const void* begin, std::size_t size) {
  if (begin == nullptr || size == 0) return;
  install_once();
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = slots()[i];
    bool expected = false;
    if (!s.taken.compare_exchange_strong(expected, true)) continue;
    s.damaged.store(false, std::memory_order_relaxed);
    s.end.store(reinterpret_cast<std::uintptr_t>(begin) + size, std::memory_order_release);
    s.begin.store(reinterpret_cast<std::uintptr_t>(begin), std::memory_order_release);
    slot_ = &s;
    return;
  }
}

MappingGuard::~MappingGuard() {
  if (slot_ == nullptr) return;
  slot_->begin.store(0, std::memory_order_release);
  slot_->end.store(0, std::memory_order_release);
  slot_->taken.store(false, std::memory_order_release);
}

bool MappingGuard::damaged() const noexcept {
  return slot_ != nullptr && slot_->damaged.load(std::memory_order_acquire);
}

}  // namespace stoker::detail
