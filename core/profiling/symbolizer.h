#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace konn::core::profiling {

// Names code addresses of this process: finds the loaded object with dladdr(), then the function
// in that object's ELF symbol table (.symtab, which also holds the functions a binary does not
// export, else .dynsym), read once from its file; demangles C++ names. An address no symbol
// covers is named "file+0xoffset". Not thread-safe: one Symbolizer per use.
class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // `return_address`: a return address, not the call itself (looked up one byte before it).
  std::string name(const void* address, bool return_address);

  struct ObjectSymbols;  // one binary's functions (symbolizer.cc)

 private:
  const ObjectSymbols& object(const std::string& path, uintptr_t base);

  std::map<std::string, std::unique_ptr<ObjectSymbols>> objects_;
  std::map<const void*, std::string> cache_;
};

// A demangled C++ name, or `mangled` itself when it is not one.
std::string demangle(const char* mangled);

}  // namespace konn::core::profiling
