//===- TestFiles.h - scratch directories for runtime tests --------*- C++ -*-===//
//
// Each test gets a fresh directory under $TMPDIR (or /tmp), removed when the
// test ends, and helpers to write and read raw bytes.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_RUNTIME_TESTFILES_H
#define KILN_TESTS_UNIT_RUNTIME_TESTFILES_H

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kiln::testing {

class ScratchDir {
public:
  ScratchDir() {
    const char *base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/kiln-rt-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()))
      path_ = buf.data();
  }
  ~ScratchDir() {
    if (!path_.empty())
      std::system(("chmod -R u+w '" + path_ + "' && rm -rf '" + path_ + "'")
                      .c_str());
  }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

inline void writeBytes(const std::string &path,
                       const std::vector<uint8_t> &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            std::streamsize(bytes.size()));
}

inline std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline bool hasPythonModule(const std::string &module) {
  std::string cmd = "python3 -c 'import " + module + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

} // namespace kiln::testing

#endif // KILN_TESTS_UNIT_RUNTIME_TESTFILES_H
