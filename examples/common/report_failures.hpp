// How an example program ends on a failure: one line on stderr naming what
// went wrong, and exit code 1, never an abort. Running out of memory names
// the step that asked for too much (set with examples::step), since
// std::bad_alloc itself says nothing.
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "streamllm/core/error.hpp"

namespace examples {

inline std::string& current_step() {
  static std::string what = "starting";
  return what;
}

// What the program does next: "loading model.gguf (619 MiB)".
inline void step(std::string what) { current_step() = std::move(what); }

// Returns work(); a streamllm::Error, std::bad_alloc or other exception it
// throws is reported as "program: ..." and returns 1.
template <class F>
int report_failures(const char* program, F&& work) {
  try {
    return std::forward<F>(work)();
  } catch (const streamllm::Error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory while %s: this machine cannot allocate that much\n", program, current_step().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  }
  return 1;
}

}  // namespace examples
