// The in-memory cache provider alone, on a manual clock.
#include <catch2/catch.hpp>
#include <memory>
#include <rc/clock.hpp>
#include <rc/wrappers/cache.hpp>
#include <string>

namespace memory_cache_provider_test {

using namespace std::chrono_literals;

namespace {

std::optional<std::string> get_string(rc::memory_cache_provider& p, const std::string& key, const rc::scheduler& c) {
  auto v = p.get_now(key, c);
  if (!v) return std::nullopt;
  return v->get<std::string>();
}

}  // namespace

TEST_CASE("memory cache: get returns a copy of what was put, independent of the caller's body") {
  rc::manual_clock clock;
  rc::memory_cache_provider p(10);
  rc::any_body body(std::string("v1"));
  p.put_now("k", body, std::nullopt, clock);
  body.get<std::string>() = "changed";
  CHECK(get_string(p, "k", clock) == "v1");
  auto copy = p.get_now("k", clock);
  copy->get<std::string>() = "mutated";
  CHECK(get_string(p, "k", clock) == "v1");
  CHECK_FALSE(p.get_now("other", clock).has_value());
}

TEST_CASE("memory cache: an entry expires ttl after it was put, on the engine clock") {
  rc::manual_clock clock;
  rc::memory_cache_provider p(10);
  p.put_now("k", rc::any_body(std::string("v")), 10s, clock);
  clock.set_now(rc::time_point{} + 9999ms);
  CHECK(get_string(p, "k", clock) == "v");
  clock.set_now(rc::time_point{} + 10s);
  CHECK_FALSE(p.get_now("k", clock).has_value());
  CHECK(p.size() == 0);  // an expired entry is removed when found
}

TEST_CASE("memory cache: a put over an existing key replaces the value and its expiry") {
  rc::manual_clock clock;
  rc::memory_cache_provider p(10);
  p.put_now("k", rc::any_body(std::string("old")), 1s, clock);
  p.put_now("k", rc::any_body(std::string("new")), std::nullopt, clock);
  clock.set_now(rc::time_point{} + 1h);
  CHECK(get_string(p, "k", clock) == "new");
  CHECK(p.size() == 1);
}

TEST_CASE("memory cache: max_entries evicts the least recently used (a get counts as a use)") {
  rc::manual_clock clock;
  rc::memory_cache_provider p(2);
  p.put_now("a", rc::any_body(std::string("A")), std::nullopt, clock);
  p.put_now("b", rc::any_body(std::string("B")), std::nullopt, clock);
  CHECK(get_string(p, "a", clock) == "A");  // a is now the most recent
  p.put_now("c", rc::any_body(std::string("C")), std::nullopt, clock);
  CHECK(p.size() == 2);
  CHECK_FALSE(p.get_now("b", clock).has_value());
  CHECK(get_string(p, "a", clock) == "A");
  CHECK(get_string(p, "c", clock) == "C");
}

TEST_CASE("memory cache: a body that cannot be copied is refused with RC5003 and nothing is stored") {
  rc::manual_clock clock;
  rc::memory_cache_provider p(2);
  rc::any_body body(std::make_unique<int>(1));
  try {
    p.put_now("k", body, std::nullopt, clock);
    FAIL("expected RC5003");
  } catch (const rc::error& e) {
    CHECK(e.code() == rc::errc::misconfigured);
  }
  CHECK(p.size() == 0);
}

}  // namespace memory_cache_provider_test
