// The KilnMlirPch target's one source: CMake builds ir/Precompiled.h into a
// precompiled header with it (see ir/CMakeLists.txt).
