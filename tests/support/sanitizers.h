#pragma once

namespace konn::testsupport {

// Whether this test binary was built with a sanitizer (the presets build every target the same
// way, so the daemons under test are then slow too).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// Whether it was built with ThreadSanitizer, whose runtime starts one background thread in every
// process that creates a thread (named after the process, as any thread is until it renames
// itself).
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizerBuild = true;
#else
inline constexpr bool kThreadSanitizerBuild = false;
#endif
#else
inline constexpr bool kThreadSanitizerBuild = false;
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
