// rc::deferred_error: an error whose message and details a raise site leaves to be built when
// first read. Every read (and every copy, before or after it) sees what an eager error would hold;
// details the fields answer one by one are read without building the rest.
#include "rc/error.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// Counts how often each part is built.
struct counted_fields {
  std::shared_ptr<int> messages = std::make_shared<int>(0);
  std::shared_ptr<int> details_built = std::make_shared<int>(0);
  std::string key;
  nlohmann::json retry_after_ms = 250.0;

  std::string message() const {
    ++*messages;
    return "refused key \"" + key + "\"";
  }
  nlohmann::json details() const {
    ++*details_built;
    return {{"key", key}, {"retry_after_ms", retry_after_ms}};
  }
  const nlohmann::json* field(std::string_view name) const noexcept {
    return name == "retry_after_ms" ? &retry_after_ms : nullptr;
  }
};

// counted_fields that also say which names their details may hold.
struct listed_fields : counted_fields {
  bool may_have(std::string_view name) const noexcept { return name == "key" || name == "retry_after_ms"; }
};

// Builds slowly, counting its builds; its first `failures` builds throw.
struct racing_fields {
  std::shared_ptr<std::atomic<int>> builds = std::make_shared<std::atomic<int>>(0);
  int failures = 0;

  std::string message() const {
    const int n = ++*builds;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // long enough for the others to meet it
    if (n <= failures) throw std::runtime_error("not yet");
    return "built by build " + std::to_string(n);
  }
  nlohmann::json details() const { return {{"n", 1}}; }
};

// Without field(): every detail() builds the details.
struct plain_fields {
  std::string message() const { return "plain"; }
  nlohmann::json details() const { return {{"n", 1}}; }
};

}  // namespace

TEST_CASE("deferred_error builds its message and details once, on first read, the same for every copy") {
  counted_fields f{.key = "a"};
  const auto messages = f.messages;
  const auto details_built = f.details_built;
  const rc::error err = rc::deferred_error(rc::errc::rate_limited, true, f);
  CHECK(*messages == 0);
  CHECK(*details_built == 0);
  CHECK(err.code() == rc::errc::rate_limited);
  CHECK(err.retryable());

  // A field the source holds is answered without building anything.
  const nlohmann::json* one = err.detail("retry_after_ms");
  REQUIRE(one != nullptr);
  CHECK(*one == 250.0);
  CHECK(*messages == 0);
  CHECK(*details_built == 0);

  const rc::error before = err;  // copied before the first read: shares the source
  CHECK(err.message() == "refused key \"a\"");
  CHECK(std::string(err.what()) == "RC5013: refused key \"a\"");
  CHECK(err.details() == nlohmann::json{{"key", "a"}, {"retry_after_ms", 250.0}});
  CHECK(*messages == 1);
  CHECK(*details_built == 1);
  CHECK(err.message() == "refused key \"a\"");  // built once
  CHECK(*messages == 1);

  const rc::error after = err;  // copied after: takes the built fields
  CHECK(after.message() == err.message());
  CHECK(after.details() == err.details());
  CHECK(*messages == 1);
  CHECK(before.message() == err.message());  // the earlier copy builds its own, identical
  CHECK(before.details() == err.details());
  CHECK(*messages == 2);

  // A field the source does not hold: the details are built and searched.
  const rc::error fresh = rc::deferred_error(rc::errc::rate_limited, true, counted_fields{.key = "b"});
  const nlohmann::json* key = fresh.detail("key");
  REQUIRE(key != nullptr);
  CHECK(*key == "b");
  CHECK(fresh.detail("missing") == nullptr);
}

TEST_CASE("a deferred error builds its message without its details, and answers names its source lacks unbuilt") {
  listed_fields f;
  f.key = "a";
  const auto messages = f.messages;
  const auto details_built = f.details_built;
  const rc::error err = rc::deferred_error(rc::errc::rate_limited, true, f);
  // What an HTTP transport asks of a refusal: a status, a body, headers; then its message.
  CHECK(err.detail("status") == nullptr);
  CHECK(err.detail("message") == nullptr);
  CHECK(err.detail("headers") == nullptr);
  CHECK(*err.detail("retry_after_ms") == 250.0);
  CHECK(err.message() == "refused key \"a\"");
  CHECK(std::string(err.what()) == "RC5013: refused key \"a\"");
  CHECK(*messages == 1);
  CHECK(*details_built == 0);

  // A name the source may hold is looked up in the built details.
  const rc::error copy = err;  // takes the built message; its details are its own to build
  CHECK(*err.detail("key") == "a");
  CHECK(*details_built == 1);
  CHECK(err.detail("key") != nullptr);
  CHECK(*details_built == 1);
  CHECK(copy.message() == "refused key \"a\"");
  CHECK(*messages == 1);
  CHECK(copy.details() == err.details());
  CHECK(*details_built == 2);

  // Without may_have, every name not at hand builds the details (plain_fields: the "n" only).
  const rc::error plain = rc::deferred_error(rc::errc::rate_limited, true, plain_fields{});
  CHECK(plain.detail("status") == nullptr);
  CHECK(*plain.detail("n") == 1);
}

TEST_CASE("deferred_error travels in an exception_ptr and reads there as thrown") {
  const std::exception_ptr e =
      std::make_exception_ptr(rc::deferred_error(rc::errc::circuit_open, false, plain_fields{}));
  const rc::error* err = rc::error_of(e);
  REQUIRE(err != nullptr);
  CHECK(err->code() == rc::errc::circuit_open);
  CHECK_FALSE(err->retryable());
  CHECK(err->detail("n") != nullptr);
  CHECK(rc::message_of(e) == "plain");
  CHECK(rc::to_error(e).details() == nlohmann::json{{"n", 1}});
  CHECK(rc::error_json(e)["message"] == "plain");
}

TEST_CASE("a deferred error read on several threads at once is built once, and every thread reads that build") {
  racing_fields f;
  const auto builds = f.builds;
  const rc::error err = rc::deferred_error(rc::errc::rate_limited, true, f);
  std::vector<std::string> seen(4);
  std::vector<std::thread> readers;
  for (std::size_t i = 0; i < seen.size(); ++i) readers.emplace_back([&err, &seen, i] { seen[i] = err.message(); });
  for (auto& t : readers) t.join();
  CHECK(builds->load() == 1);
  for (const auto& m : seen) CHECK(m == "built by build 1");
  CHECK(std::string(err.what()) == "RC5013: built by build 1");
}

TEST_CASE("a deferred error whose build throws is left unbuilt, and the next read builds it") {
  racing_fields f{.failures = 1};
  const auto builds = f.builds;
  const rc::error err = rc::deferred_error(rc::errc::rate_limited, true, f);
  CHECK_THROWS_WITH(err.message(), "not yet");
  CHECK(err.message() == "built by build 2");
  CHECK(err.details() == nlohmann::json{{"n", 1}});
  CHECK(builds->load() == 2);
}

TEST_CASE("an error copied or moved holds what the original held: code, message, details, cause, built parts") {
  const std::exception_ptr cause = std::make_exception_ptr(std::runtime_error("root"));
  const rc::error eager(rc::errc::step_failed, "boom", false, cause, {{"n", 1}});
  rc::error copy = eager;
  const rc::error moved = std::move(copy);
  for (const rc::error* e : {&eager, &moved}) {
    CHECK(e->code() == rc::errc::step_failed);
    CHECK(e->message() == "boom");
    CHECK_FALSE(e->retryable());
    CHECK(e->cause() == cause);
    CHECK(e->details() == nlohmann::json{{"n", 1}});
    CHECK(std::string(e->what()) == "RC5001: boom");
  }

  // A deferred error moved before its first read builds on its new owner; one moved after keeps
  // what was built and builds nothing again.
  counted_fields f{.key = "m"};
  const auto messages = f.messages;
  rc::error unread = rc::deferred_error(rc::errc::rate_limited, true, f);
  const rc::error took_unread = std::move(unread);
  CHECK(took_unread.message() == "refused key \"m\"");
  CHECK(*messages == 1);
  rc::error read = rc::deferred_error(rc::errc::rate_limited, true, f);
  CHECK(read.message() == "refused key \"m\"");
  CHECK(*messages == 2);
  const rc::error took_read = std::move(read);
  CHECK(took_read.message() == "refused key \"m\"");
  CHECK(std::string(took_read.what()) == "RC5013: refused key \"m\"");
  CHECK(took_read.retryable());
  CHECK(*messages == 2);
  CHECK(took_read.details() == nlohmann::json{{"key", "m"}, {"retry_after_ms", 250.0}});
}
