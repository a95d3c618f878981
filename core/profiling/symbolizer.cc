#include "core/profiling/symbolizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fstream>
#include <iterator>
#include <link.h>
#include <vector>

namespace konn::core::profiling {

struct Symbolizer::ObjectSymbols {
  struct Symbol {
    uintptr_t start;  // file virtual address
    uintptr_t size;
    std::string name;  // mangled
  };
  std::vector<Symbol> symbols;  // sorted by start
  uintptr_t bias = 0;           // load address minus file virtual address
  std::string short_name;       // the file's base name

  const Symbol* find(uintptr_t file_address) const {
    auto it = std::upper_bound(symbols.begin(), symbols.end(), file_address,
                               [](uintptr_t a, const Symbol& s) { return a < s.start; });
    if (it == symbols.begin()) return nullptr;
    --it;
    uintptr_t end = it->start + std::max<uintptr_t>(it->size, 1);
    return file_address < end ? &*it : nullptr;
  }
};

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
bool read_at(const std::string& file, uint64_t offset, T* out) {
  if (offset > file.size() || file.size() - offset < sizeof(T)) return false;
  std::memcpy(out, file.data() + offset, sizeof(T));
  return true;
}

// FUNC symbols of one symbol table section (`symtab`) with its string table.
void read_symbols(const std::string& file, const Elf64_Shdr& symtab, const Elf64_Shdr& strtab,
                  std::vector<Symbolizer::ObjectSymbols::Symbol>* out);

}  // namespace

std::string demangle(const char* mangled) {
  int status = 0;
  char* text = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || text == nullptr) return mangled;
  std::string out(text);
  std::free(text);  // NOLINT(cppcoreguidelines-owning-memory): __cxa_demangle's contract
  return out;
}

namespace {

void read_symbols(const std::string& file, const Elf64_Shdr& symtab, const Elf64_Shdr& strtab,
                  std::vector<Symbolizer::ObjectSymbols::Symbol>* out) {
  if (symtab.sh_entsize != sizeof(Elf64_Sym)) return;
  for (uint64_t off = symtab.sh_offset;
       off + sizeof(Elf64_Sym) <= symtab.sh_offset + symtab.sh_size; off += sizeof(Elf64_Sym)) {
    Elf64_Sym sym;
    if (!read_at(file, off, &sym)) return;
    if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value == 0) continue;
    uint64_t name_off = strtab.sh_offset + sym.st_name;
    if (name_off >= file.size()) continue;
    const char* name = file.data() + name_off;
    size_t len = strnlen(name, file.size() - name_off);
    out->push_back({static_cast<uintptr_t>(sym.st_value), static_cast<uintptr_t>(sym.st_size),
                    std::string(name, len)});
  }
}

// Where the main program is mapped (its lowest PT_LOAD), as dladdr's dli_fbase names it.
const void* dladdr_main_base() {
  static const void* base = [] {
    const void* found = nullptr;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
          uintptr_t lowest = UINTPTR_MAX;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            if (info->dlpi_phdr[i].p_type == PT_LOAD) {
              lowest = std::min<uintptr_t>(lowest, info->dlpi_phdr[i].p_vaddr);
            }
          }
          if (lowest != UINTPTR_MAX) {
            uintptr_t start = info->dlpi_addr + (lowest & ~uintptr_t{0xfff});
            // NOLINTNEXTLINE(performance-no-int-to-ptr): the loader gives addresses as integers
            *static_cast<const void**>(data) = reinterpret_cast<const void*>(start);
          }
          return 1;  // the first object is the main program
        },
        &found);
    return found;
  }();
  return base;
}

}  // namespace

Symbolizer::Symbolizer() = default;
Symbolizer::~Symbolizer() = default;

const Symbolizer::ObjectSymbols& Symbolizer::object(const std::string& path, uintptr_t base) {
  auto& slot = objects_[path];
  if (slot) return *slot;
  slot = std::make_unique<ObjectSymbols>();
  auto& obj = *slot;
  auto slash = path.rfind('/');
  obj.short_name = slash == std::string::npos ? path : path.substr(slash + 1);
  obj.bias = base;
  std::string file = read_file(path);
  Elf64_Ehdr eh;
  if (!read_at(file, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64) {
    return obj;
  }
  // The lowest PT_LOAD's address is where `base` (dli_fbase) maps: 0 for PIE and shared objects.
  uintptr_t lowest = UINTPTR_MAX;
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (!read_at(file, eh.e_phoff + static_cast<uint64_t>(i) * eh.e_phentsize, &ph)) break;
    if (ph.p_type == PT_LOAD) lowest = std::min<uintptr_t>(lowest, ph.p_vaddr & ~uintptr_t{0xfff});
  }
  if (lowest != UINTPTR_MAX) obj.bias = base - lowest;
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (int i = 0; i < eh.e_shnum; ++i) {
    if (!read_at(file, eh.e_shoff + static_cast<uint64_t>(i) * eh.e_shentsize, &sections[i])) {
      return obj;
    }
  }
  for (uint32_t want : {SHT_SYMTAB, SHT_DYNSYM}) {
    for (const auto& sh : sections) {
      if (sh.sh_type != want || sh.sh_link >= sections.size()) continue;
      read_symbols(file, sh, sections[sh.sh_link], &obj.symbols);
    }
    if (!obj.symbols.empty()) break;  // .symtab holds what .dynsym has
  }
  std::sort(obj.symbols.begin(), obj.symbols.end(),
            [](const auto& a, const auto& b) { return a.start < b.start; });
  return obj;
}

std::string Symbolizer::name(const void* address, bool return_address) {
  const void* lookup =
      return_address ? static_cast<const char*>(address) - 1 : static_cast<const char*>(address);
  auto cached = cache_.find(lookup);
  if (cached != cache_.end()) return cached->second;
  std::string out;
  Dl_info info{};
  if (dladdr(lookup, &info) == 0 || info.dli_fname == nullptr) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", lookup);
    out = text;
  } else {
    // The main program's dli_fname is argv[0] as it was run; /proc/self/exe is its file.
    std::string path = info.dli_fname;
    if (path.empty() || path.find('/') == std::string::npos ||
        info.dli_fbase == dladdr_main_base()) {
      path = "/proc/self/exe";
    }
    const auto& obj = object(path, reinterpret_cast<uintptr_t>(info.dli_fbase));
    uintptr_t file_address = reinterpret_cast<uintptr_t>(lookup) - obj.bias;
    if (const auto* sym = obj.find(file_address)) {
      out = demangle(sym->name.c_str());
    } else if (info.dli_sname != nullptr) {
      out = demangle(info.dli_sname);
    } else {
      char text[48];
      std::snprintf(
          text, sizeof text, "+0x%zx",
          reinterpret_cast<uintptr_t>(lookup) - reinterpret_cast<uintptr_t>(info.dli_fbase));
      out = (path == "/proc/self/exe" ? std::string("exe") : obj.short_name) + text;
    }
  }
  cache_.emplace(lookup, out);
  return out;
}

}  // namespace konn::core::profiling
