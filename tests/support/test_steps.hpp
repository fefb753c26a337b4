// Small engine-level steps and sources for tests that run without the DSL.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "rc/endpoint.hpp"
#include "rc/route.hpp"
#include "rc/step.hpp"

namespace rc::test {

/// A synchronous step that calls `f(exchange&)`.
std::unique_ptr<step> lambda_step(std::string_view name, std::function<void(exchange&)> f);

/// Emits `n` int bodies (0..n-1) all at once.
std::unique_ptr<source_base> burst_source(int n);

}  // namespace rc::test
