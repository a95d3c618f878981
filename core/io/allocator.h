#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include <asio/io_context.hpp>

namespace konn::core::io {

// Tunes glibc malloc for a daemon that relays bulk bytes: DATA buffers of 256 KiB-1 MiB come and
// go at GB/s. By default glibc serves each from its own mmap and unmaps it on free, so every
// buffer is page-faulted in again (in a bulk transfer through the proxy-server that was ~60% of
// its CPU, most of it in the VM's page-fault path). Served from the heap instead, they are
// reused; free memory is handed back by the trimmer below rather than on every free(). Also
// puts every thread in one arena, so that the trimmer can reach all of it.
// Call first thing in main().
void tune_allocator_for_relaying();

// Free heap memory glibc holds (every arena), in bytes.
size_t free_heap_bytes();

// Every `period`, on `ctx`: when more than `slack` bytes of the heap sit free (a burst of
// transfers or tunnels is over), returns them to the kernel (malloc_trim), so RSS comes back
// near its idle figure. While bytes flow the free part stays small and nothing is trimmed.
// Finding the free part walks the heap, which costs milliseconds on a server with thousands of
// agents, so a process that used under 5 ms of CPU since the last walk skips it (at most a
// minute): an idle daemon walks once a minute, not every period. Runs until `ctx` stops.
void start_memory_trimmer(asio::io_context& ctx,
                          std::chrono::milliseconds period = std::chrono::seconds(2),
                          size_t slack = size_t{1} << 20);

// How many times the trimmers of this process have walked the heap (tests).
uint64_t memory_trimmer_walks();

}  // namespace konn::core::io
