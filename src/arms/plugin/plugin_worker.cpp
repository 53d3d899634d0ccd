// Finding the worker executable, naming signals (plugin_worker.hpp).
#include "arms/plugin/plugin_worker.hpp"

#include "core/name_table.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace qc::plugin_detail {

namespace fs = std::filesystem;

// ---- plugin: the library in a worker process -------------------------------------------------

static bool is_executable(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
}

std::string plugin_host_path() {
  if (const char* env = std::getenv("QCONFORM_PLUGIN_HOST"); env != nullptr && env[0] != '\0') {
    QC_INPUT(is_executable(env), "environment variable QCONFORM_PLUGIN_HOST: expected the path of the executable "
             "`qconform-plugin-host`, found `{}` (not an executable file)", printable(env));
    return env;
  }
  std::vector<std::string> tried;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back((self.parent_path() / "qconform-plugin-host").string());
  // Beside the shared object this code is linked into, when that is not the executable (the
  // Python module `_qconform.so`).
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&plugin_host_path), &where) != 0 && where.dli_fname != nullptr) {
    const fs::path object = fs::weakly_canonical(where.dli_fname, ec);
    if (!ec) {
      const std::string beside = (object.parent_path() / "qconform-plugin-host").string();
      if (std::find(tried.begin(), tried.end(), beside) == tried.end()) tried.push_back(beside);
    }
  }
#ifdef QC_PLUGIN_HOST_BUILD_PATH
  tried.push_back(QC_PLUGIN_HOST_BUILD_PATH);
#endif
  for (const std::string& t : tried) {
    if (is_executable(t)) return t;
  }
  std::string list;
  for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + printable(t);
  QC_FAIL_INPUT("isolated plugin arms need the worker executable `qconform-plugin-host`: not found at {} (set "
                "QCONFORM_PLUGIN_HOST to its path, or run the plugin in qconform's process, unprotected, as "
                "`plugin-inproc:<path>`)", list.empty() ? "(no candidate)" : list);
}

// The signals a worker can end by, named.
constexpr NameRow<int> kSignalNames[] = {
    {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},   {SIGABRT, "SIGABRT"}, {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},
    {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},   {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},
    {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGPIPE, "SIGPIPE"}};

const char* signal_name(int s) {
  const std::string_view name = name_of(kSignalNames, s);
  return name == "?" ? "signal" : name.data();  // the rows' names are literals, so NUL-terminated
}

}  // namespace qc::plugin_detail
