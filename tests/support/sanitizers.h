#pragma once

namespace konn::testsupport {

// Whether this test binary was built with ThreadSanitizer, whose runtime starts one background
// thread in every process that creates a thread (named after the process, as any thread is
// until it renames itself); and whether with any sanitizer (the presets build every target the
// same way, so the daemons under test are then slow too).
#if defined(__SANITIZE_THREAD__)
#define KONN_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KONN_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KONN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KONN_TEST_ASAN 1
#endif
#endif
#if defined(KONN_TEST_TSAN)
inline constexpr bool kThreadSanitizerBuild = true;
#else
inline constexpr bool kThreadSanitizerBuild = false;
#endif
#if defined(KONN_TEST_TSAN) || defined(KONN_TEST_ASAN)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// Multiplier for time bounds in tests: 1 normally, larger under sanitizers (TSan runs gRPC code
// 5-20x slower). Bounds that the brief sets (e.g. "within 1 s") are checked exactly in normal
// builds.
inline constexpr int kSlowFactor = kSanitizerBuild ? 10 : 1;

// Bulk sizes shrink under sanitizers so each test stays well inside ctest's timeout.
inline constexpr unsigned long long scaled_bytes(unsigned long long normal) {
  return kSanitizerBuild ? normal / 8 : normal;
}

}  // namespace konn::testsupport
