#pragma once

namespace konn::core::io {

// Tunes glibc malloc for a daemon that relays bulk bytes: DATA buffers of 256 KiB-1 MiB come and
// go at GB/s. By default glibc serves each from its own mmap and unmaps it on free, so every
// buffer is page-faulted in again (in a bulk transfer through the proxy-server that was ~30% of
// its CPU, most of it in the VM's page-fault path). Served from the heap instead, they are reused.
// Freed memory above kTrimThreshold at a heap's top still goes back to the kernel, and
// release_free_memory() returns the rest once the daemon is idle. Call first thing in main().
void tune_allocator_for_relaying();

// Returns free heap memory to the kernel (malloc_trim): for when the last tunnel closed, so RSS
// comes back near its idle figure. Costs a walk of the heaps: call it rarely.
void release_free_memory();

}  // namespace konn::core::io
