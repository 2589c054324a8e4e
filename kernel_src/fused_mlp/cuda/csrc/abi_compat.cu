// Keeps the binary within manylinux_2_28 (glibc 2.28, GLIBCXX 3.4.24) although it may be built on a
// newer system, the way the manylinux toolchains' libstdc++_nonshared does. The linker version
// script exports no symbol of this library, so none of these copies is visible outside it.
#include <sstream>

// libstdc++ headers from GCC >= 11 read glibc 2.32's `__libc_single_threaded` to skip atomics in
// single-threaded programs. This private copy answers "not single threaded": always atomic, correct.
extern "C" {
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
}

namespace std {
// GLIBCXX_3.4.29 (GCC 11): thrown by std::allocator when asked for more than max_size() elements.
void __throw_bad_array_new_length() { throw std::bad_alloc(); }
}  // namespace std

// GLIBCXX_3.4.26 added out-of-line default constructors for these; torch's check macros use them.
template class std::__cxx11::basic_ostringstream<char>;
template class std::__cxx11::basic_stringstream<char>;
