// HTTP source and client (issue 4), on 127.0.0.1 with ephemeral ports, in real time. Requests are
// written with plain sockets so a test controls every byte (slow clients, oversized headers,
// disconnects); every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <coroutine>
#include <future>
#include <memory>
#include <optional>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/dsl_support.hpp"
#include "support/prometheus_check.hpp"

namespace http_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;

namespace {

using clock_type = std::chrono::steady_clock;

struct reply {
  int status = 0;
  rc::http_headers headers;
  std::string body;
  const std::string* header(std::string_view name) const { return rc::find_http_header(headers, name); }
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

/// A client on a plain socket: what it sends is exactly what the test wrote.
class raw_client {
 public:
  /// `check`: REQUIRE the connection (only on the test's own thread: Catch is not thread-safe).
  /// `host`: an IPv4 or IPv6 address.
  explicit raw_client(std::uint16_t port, bool check = true, const std::string& host = "127.0.0.1") {
    bool connected = false;
    if (host.find(':') == std::string::npos) {
      fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
      connected = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    } else {
      fd_ = ::socket(AF_INET6, SOCK_STREAM, 0);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(port);
      ::inet_pton(AF_INET6, host.c_str(), &a.sin6_addr);
      connected = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
    if (check) REQUIRE(connected);
  }
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;
  ~raw_client() { close(); }

  void send(std::string_view data) {
    while (!data.empty()) {
      const auto n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return;  // the server closed: the test reads what it said
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  /// One response, or nothing when the connection closes or `timeout` passes first.
  std::optional<reply> read(std::chrono::milliseconds timeout = 5000ms, bool head = false) {
    const auto until = clock_type::now() + timeout;
    for (;;) {
      if (auto r = take(head)) return r;
      if (!fill(until)) return std::nullopt;
    }
  }

  /// True when the server closes the connection within `timeout` (anything it sends is skipped).
  bool closed_within(std::chrono::milliseconds timeout) {
    const auto until = clock_type::now() + timeout;
    while (fill(until)) buffer_.clear();
    return eof_;
  }

  /// True when bytes arrive within `timeout` (they are left unread).
  bool readable_within(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
  }

  /// Caps the kernel's receive buffer (no autotuning): a client that reads nothing soon stalls
  /// the server's writes.
  void limit_receive_buffer(int bytes) { ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes); }

  /// Reads until the server closes the connection; the bytes received, or nothing if it did not
  /// close within `timeout`.
  std::optional<std::size_t> drain(std::chrono::milliseconds timeout) {
    const auto until = clock_type::now() + timeout;
    std::size_t n = buffer_.size();
    buffer_.clear();
    while (fill(until)) {
      n += buffer_.size();
      buffer_.clear();
    }
    if (!eof_) return std::nullopt;
    return n;
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::string& buffered() { return buffer_; }

 private:
  bool fill(clock_type::time_point until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
    if (left <= 0 || eof_) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char chunk[16384];
    const auto n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  std::optional<reply> take(bool head) {
    const auto end = buffer_.find("\r\n\r\n");
    if (end == std::string::npos) return std::nullopt;
    reply r;
    std::string_view head_text(buffer_.data(), end);
    const auto line_end = head_text.find("\r\n");
    const std::string_view status_line = head_text.substr(0, line_end);
    r.status = std::stoi(std::string(status_line.substr(9, 3)));
    std::string_view rest = line_end == std::string_view::npos ? std::string_view{} : head_text.substr(line_end + 2);
    while (!rest.empty()) {
      const auto e = rest.find("\r\n");
      const auto line = rest.substr(0, e);
      const auto colon = line.find(':');
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      r.headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
      rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e + 2);
    }
    std::size_t length = 0;
    if (const auto* cl = r.header("Content-Length"); cl && !head) length = std::stoul(*cl);
    if (buffer_.size() < end + 4 + length) return std::nullopt;
    r.body = buffer_.substr(end + 4, length);
    buffer_.erase(0, end + 4 + length);
    return r;
  }

  int fd_ = -1;
  std::string buffer_;
  bool eof_ = false;
};

std::string get(std::string_view target, std::string_view extra = {}) {
  return fmt::format("GET {} HTTP/1.1\r\nHost: test\r\n{}\r\n", target, extra);
}

std::string post(std::string_view target, std::string_view body, std::string_view type = "application/json",
                 std::string_view extra = {}) {
  return fmt::format("POST {} HTTP/1.1\r\nHost: test\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}\r\n{}", target,
                     type, body.size(), extra, body);
}

/// One request on a fresh connection.
reply request(std::uint16_t port, const std::string& raw, std::chrono::milliseconds timeout = 5000ms) {
  raw_client c(port);
  c.send(raw);
  auto r = c.read(timeout);
  REQUIRE(r.has_value());
  return *r;
}

rc::context_options quick_stop() { return {.shutdown_timeout = 3s}; }

/// Starts the context and stops it at the end of the scope.
struct running {
  rc::context& ctx;
  explicit running(rc::context& c) : ctx(c) { ctx.start(); }
  ~running() { ctx.stop(); }
};

double elapsed_ms(clock_type::time_point since) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - since).count();
}

}  // namespace

// ---- routing and the response body ------------------------------------------------------------

TEST_CASE("http: routes on one server are chosen by method and path, and the final body is the response") {
  rc::context ctx(quick_stop());
  auto hello = rc::http_source({.path = "/hello"});
  ctx.add(rc::craft().id("hello").from(hello).transform(
      [](rc::http_request r) { return "hello " + r.query_param("name").value_or("nobody"); }));
  const auto port_of = [&] { return hello.port(); };
  ctx.add(rc::craft()
              .id("create")
              .from(rc::http_source({.path = "/items", .method = "POST"}))
              .transform([](rc::http_request r, rc::exchange& ex) {
                rc::set_http_status(ex, 201);
                return nlohmann::json{{"created", r.json.value_or(nullptr)}};
              }));
  ctx.add(rc::craft().id("item").from(rc::http_source({.path = "/items/:id"})).transform([](rc::http_request r) {
    return nlohmann::json{{"id", r.param("id")}};
  }));
  ctx.add(rc::craft().id("files").from(rc::http_source({.path = "/files/*"})).transform([](rc::http_request r) {
    return r.param("*");
  }));
  ctx.add(rc::craft()
              .id("teapot")
              .from(rc::http_source({.path = "/teapot", .method = "*"}))
              .transform([](rc::http_request) { return rc::text_response("short and stout", 418); }));
  running run(ctx);
  const auto port = port_of();

  auto r = request(port, get("/hello?name=Ada%20L"));
  CHECK(r.status == 200);
  CHECK(r.body == "hello Ada L");
  CHECK(*r.header("Content-Type") == "text/plain; charset=utf-8");
  CHECK(r.header("Date") != nullptr);

  r = request(port, post("/items", R"({"name":"widget"})"));
  CHECK(r.status == 201);
  CHECK(r.json() == nlohmann::json{{"created", {{"name", "widget"}}}});
  CHECK(*r.header("Content-Type") == "application/json");

  r = request(port, get("/items/42"));
  CHECK(r.status == 200);
  CHECK(r.json()["id"] == "42");

  r = request(port, get("/files/a/b%20c.txt"));
  CHECK(r.body == "a/b c.txt");

  r = request(port, "DELETE /teapot HTTP/1.1\r\nHost: t\r\n\r\n");
  CHECK(r.status == 418);
  CHECK(r.body == "short and stout");

  r = request(port, get("/nowhere"));
  CHECK(r.status == 404);
  CHECK(r.json()["code"] == "not_found");

  r = request(port, "PUT /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
  CHECK(r.status == 405);
  CHECK(*r.header("Allow") == "GET, HEAD");
}

// What a server with the given routes (plus `fillers` more that match none of the requests)
// answers to a fixed list of requests: status, body and Allow header, one line per request.
std::vector<std::string> routing_answers(int fillers) {
  rc::context ctx(quick_stop());
  auto first = rc::http_source({.path = "/items/:id"});
  ctx.add(rc::craft().id("param").from(first).transform([](rc::http_request) { return std::string("param"); }));
  const auto answer = [&](std::string id, rc::http_source_options o) {
    ctx.add(rc::craft().id(id).from(rc::http_source(std::move(o))).transform([id](rc::http_request) { return id; }));
  };
  answer("literal", {.path = "/items/new"});
  answer("wild", {.path = "/items/*"});
  answer("create", {.path = "/items", .method = "POST"});
  answer("teapot", {.path = "/teapot", .method = "*"});
  answer("any-new", {.path = "/:kind/new", .method = "DELETE"});
  for (int i = 0; i < fillers; ++i) answer(fmt::format("filler{}", i), {.path = fmt::format("/filler/{}", i)});
  running run(ctx);
  std::vector<std::string> out;
  for (const std::string& raw :
       {get("/items/new"), get("/items/7"), get("/items/7/parts"), get("/items"), post("/items", "{}"),
        std::string("DELETE /teapot HTTP/1.1\r\nHost: t\r\n\r\n"),
        std::string("DELETE /items/new HTTP/1.1\r\nHost: t\r\n\r\n"),
        std::string("PUT /items/new HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"), get("/nowhere/"), get("/")}) {
    const reply r = request(first.port(), raw);
    const std::string* allow = r.header("Allow");
    out.push_back(fmt::format("{} {} {}", r.status, r.status == 200 ? r.body : "", allow ? *allow : ""));
  }
  return out;
}

TEST_CASE("http: a server with many routes chooses among them as one with few does") {
  // From eight routes on the server looks a path's routes up in an index instead of trying each.
  const auto few = routing_answers(0);
  CHECK(few[0] == "200 literal ");            // more literal segments win
  CHECK(few[7] == "405  GET, HEAD, DELETE");  // every method served at the path, in route order
  CHECK(routing_answers(6) == few);
}

TEST_CASE("http: a GET route answers HEAD with the headers and no body") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/doc"});
  ctx.add(rc::craft().id("doc").from(src).transform([](rc::http_request) { return std::string("twelve bytes"); }));
  running run(ctx);
  raw_client c(src.port());
  c.send("HEAD /doc HTTP/1.1\r\nHost: t\r\n\r\n");
  auto r = c.read(5000ms, true);
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(*r->header("Content-Length") == "12");
  c.send(get("/doc"));  // nothing of the HEAD response's body is on the wire before this one
  r = c.read();
  REQUIRE(r);
  CHECK(r->body == "twelve bytes");
}

TEST_CASE("http: a body of another type is JSON, and an unchanged request, a drop or null is 204") {
  struct point {
    int x, y;
  };
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/p"});
  ctx.add(rc::craft().id("p").from(src).transform([](rc::http_request) {
    return std::map<std::string, int>{{"x", 1}, {"y", 2}};
  }));
  ctx.add(rc::craft().id("same").from(rc::http_source({.path = "/same"})).to(rc::noop()));
  ctx.add(rc::craft().id("drop").from(rc::http_source({.path = "/drop"})).filter([](const rc::http_request&) {
    return false;
  }));
  running run(ctx);
  const auto port = src.port();
  auto r = request(port, get("/p"));
  CHECK(r.json() == nlohmann::json{{"x", 1}, {"y", 2}});
  CHECK(request(port, get("/same")).status == 204);
  r = request(port, get("/drop"));
  CHECK(r.status == 204);
  CHECK(r.body.empty());
}

TEST_CASE("http: the request carries method, target, query, headers, JSON body and the peer") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/echo", .method = "POST"});
  ctx.add(rc::craft().id("echo").from(src).transform([](rc::http_request r, rc::exchange& ex) {
    return nlohmann::json{{"method", r.method},
                          {"target", r.target},
                          {"path", r.path},
                          {"query", r.query},
                          {"x", *r.header("x-custom")},
                          {"json", r.json.value_or(nullptr)},
                          {"body", r.body},
                          {"peer", r.peer},
                          {"client", r.client},
                          {"key", ex.header_or(rc::client_header, "")}};
  }));
  running run(ctx);
  const auto r = request(
      src.port(), post("/echo?a=1&b=two", R"({"n": 7})", "application/json; charset=utf-8", "X-Custom: yes\r\n"));
  REQUIRE(r.status == 200);
  const auto j = r.json();
  CHECK(j["method"] == "POST");
  CHECK(j["target"] == "/echo?a=1&b=two");
  CHECK(j["path"] == "/echo");
  CHECK(j["query"] == "a=1&b=two");
  CHECK(j["x"] == "yes");
  CHECK(j["json"] == nlohmann::json{{"n", 7}});
  CHECK(j["body"] == R"({"n": 7})");
  CHECK(j["peer"] == "127.0.0.1");
  CHECK(j["client"] == "127.0.0.1");
  CHECK(j["key"] == "127.0.0.1");
}

TEST_CASE("http: two sources on the same port share one server, and different server options refuse to start") {
  rc::context ctx(quick_stop());
  auto a = rc::http_source({.path = "/a"});
  ctx.add(rc::craft().id("a").from(a).transform([](rc::http_request) { return std::string("A"); }));
  running run(ctx);
  const auto port = a.port();
  auto b = rc::http_source({.port = port, .path = "/b"});
  ctx.add(rc::craft().id("b").from(b).transform([](rc::http_request) { return std::string("B"); }));
  CHECK(b.port() == port);
  CHECK(request(port, get("/a")).body == "A");
  CHECK(request(port, get("/b")).body == "B");

  auto c = rc::http_source({.port = port, .path = "/c", .server = {.max_body_bytes = 10}});
  ctx.add(rc::craft().id("c").from(c).to(rc::noop()));
  CHECK_THROWS_AS(c.port(), rc::error);
}

TEST_CASE("http: a context with two threads serves concurrent keep-alive clients, each on its own strand") {
  rc::context ctx({.threads = 2, .shutdown_timeout = 3s});
  auto src = rc::http_source({.path = "/c/:n"});
  ctx.add(rc::craft()
              .id("c")
              .rate_limit(
                  {.limit = 1000, .window = 60s, .headers = rc::rate_limit_headers::draft_7, .key = rc::by_client()})
              .from(src)
              .transform([](rc::http_request r) { return r.param("n"); }));
  running run(ctx);
  const auto port = src.port();
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c)
    clients.emplace_back([&, c] {
      raw_client client(port, false);
      for (int i = 0; i < 25; ++i) {
        const auto n = std::to_string(c * 100 + i);
        client.send(get("/c/" + n));
        const auto r = client.read(2000ms);
        if (!r) break;  // bounded: a broken server fails the count, not the clock
        if (r->status == 200 && r->body == n && r->header("RateLimit")) ++ok;
      }
    });
  for (auto& t : clients) t.join();
  CHECK(ok == 150);
}

// ---- keep-alive -------------------------------------------------------------------------------

TEST_CASE("http: keep-alive serves several requests on one connection, pipelined ones in order") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/n/:n"});
  ctx.add(rc::craft().id("n").from(src).transform([](rc::http_request r) {
    return nlohmann::json{{"n", r.param("n")}, {"port", r.peer_port}};
  }));
  running run(ctx);
  raw_client c(src.port());
  c.send(get("/n/1"));
  const auto first = c.read();
  REQUIRE(first);
  CHECK(first->header("Connection") == nullptr);
  c.send(get("/n/2"));
  const auto second = c.read();
  REQUIRE(second);
  CHECK(second->json()["n"] == "2");
  CHECK(second->json()["port"] == first->json()["port"]);
  c.send(get("/n/3") + get("/n/4") + get("/n/5"));
  for (const char* n : {"3", "4", "5"}) {
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->json()["n"] == n);
  }
  c.send(get("/n/6", "Connection: close\r\n"));
  const auto last = c.read();
  REQUIRE(last);
  INFO(last->body);
  REQUIRE(last->header("Connection"));
  CHECK(*last->header("Connection") == "close");
  CHECK(c.closed_within(2000ms));
}

TEST_CASE("http: each request on a keep-alive connection starts with only its own client header") {
  // The server hands one exchange's header list on to the next request's exchange when it held
  // only the client key: whatever a route did to the headers, the next request sees none of it.
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/h/:what", .server = {.trusted_proxies = {"loopback"}}});
  ctx.add(rc::craft().id("h").from(src).transform([](rc::http_request r, rc::exchange& ex) {
    auto seen = ex.headers().to_json();
    const std::string what = r.param("what");
    if (what == "replace") {  // one header still, but not the client's
      ex.headers().erase(rc::client_header);
      ex.set_header("x-left-behind", 1);
    } else if (what == "number") {
      ex.set_header(rc::client_header, 7);
    } else if (what == "add") {
      ex.set_header("x-added", "yes");
    }
    return seen;
  }));
  running run(ctx);
  raw_client c(src.port());
  const auto seen = [&c](std::string_view what, std::string_view client) {
    c.send(get(fmt::format("/h/{}", what), fmt::format("X-Forwarded-For: {}\r\n", client)));
    const auto r = c.read();
    REQUIRE(r);
    return r->json();
  };
  const auto only = [](std::string_view client) { return nlohmann::json{{rc::client_header, client}}; };
  CHECK(seen("plain", "203.0.113.1") == only("203.0.113.1"));
  CHECK(seen("plain", "203.0.113.2") == only("203.0.113.2"));
  CHECK(seen("replace", "203.0.113.3") == only("203.0.113.3"));
  CHECK(seen("plain", "203.0.113.4") == only("203.0.113.4"));
  CHECK(seen("number", "203.0.113.5") == only("203.0.113.5"));
  CHECK(seen("plain", "203.0.113.66") == only("203.0.113.66"));
  CHECK(seen("add", "203.0.113.7") == only("203.0.113.7"));
  CHECK(seen("plain", "203.0.113.8") == only("203.0.113.8"));
}

TEST_CASE("http: HTTP/1.0 closes after the response unless it asks for keep-alive") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/"});
  ctx.add(rc::craft().id("root").from(src).transform([](rc::http_request) { return std::string("ok"); }));
  running run(ctx);
  {
    raw_client c(src.port());
    c.send("GET / HTTP/1.0\r\n\r\n");
    REQUIRE(c.read());
    CHECK(c.closed_within(2000ms));
  }
  raw_client c(src.port());
  c.send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  auto r = c.read();
  REQUIRE(r);
  REQUIRE(r->header("Connection"));
  CHECK(*r->header("Connection") == "keep-alive");
  c.send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  CHECK(c.read());
}

TEST_CASE("http: Expect 100-continue gets its interim response before the body is sent") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/up", .method = "POST"});
  ctx.add(rc::craft().id("up").from(src).transform([](rc::http_request r) { return std::to_string(r.body.size()); }));
  running run(ctx);
  raw_client c(src.port());
  c.send("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  auto interim = c.read();
  REQUIRE(interim);
  CHECK(interim->status == 100);
  c.send("hello");
  auto r = c.read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "5");
}

// ---- errors to statuses -------------------------------------------------------------------------

TEST_CASE("http: a throttle refusal is 429 with Retry-After in whole seconds, rounded up") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/t"});
  ctx.add(rc::craft()
              .id("t")
              .throttle({.rate = 1, .per = rc::per::minute, .mode = rc::throttle_mode::reject})
              .from(src)
              .transform([](rc::http_request) { return std::string("in"); }));
  running run(ctx);
  CHECK(request(src.port(), get("/t")).status == 200);
  const auto r = request(src.port(), get("/t"));
  CHECK(r.status == 429);
  REQUIRE(r.header("Retry-After"));
  const int seconds = std::stoi(*r.header("Retry-After"));
  CHECK(seconds >= 59);
  CHECK(seconds <= 60);
  CHECK(r.json()["code"] == "RC5013");
}

TEST_CASE("http: a draft-8 policy name that would break the header block is not written, the numbers still are") {
  // Every RateLimit header is written as made but draft-8's, whose policy name is the user's text:
  // one holding CR LF (a header of its own, smuggled) is dropped, as any header of that kind is.
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/p"});
  ctx.add(rc::craft()
              .id("p")
              .rate_limit({.limit = 1,
                           .window = 30s,
                           .headers = rc::rate_limit_headers::draft_8 | rc::rate_limit_headers::legacy,
                           .key = rc::by_client(),
                           .policy = "q\r\nX-Smuggled: yes"})
              .from(src)
              .transform([](rc::http_request) { return std::string("ok"); }));
  running run(ctx);
  for (const int status : {200, 429}) {
    const auto r = request(src.port(), get("/p"));
    CHECK(r.status == status);
    CHECK(r.header("X-Smuggled") == nullptr);
    CHECK(r.header("RateLimit") == nullptr);
    CHECK(r.header("RateLimit-Policy") == nullptr);
    REQUIRE(r.header("X-RateLimit-Limit"));
    CHECK(*r.header("X-RateLimit-Limit") == "1");
    CHECK(r.header("X-RateLimit-Remaining") != nullptr);
  }
}

TEST_CASE("http: rate_limit headers (draft-6, draft-7, draft-8, legacy) on every response, and 429 with Retry-After") {
  struct mode_case {
    rc::rate_limit_headers mode;
    std::vector<std::string> names;
  };
  const auto c = GENERATE(
      mode_case{rc::rate_limit_headers::draft_6,
                {"RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}},
      mode_case{rc::rate_limit_headers::draft_7, {"RateLimit-Policy", "RateLimit"}},
      mode_case{rc::rate_limit_headers::draft_8, {"RateLimit", "RateLimit-Policy"}},
      mode_case{rc::rate_limit_headers::legacy, {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}});
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/r"});
  ctx.add(rc::craft()
              .id("r")
              .rate_limit({.limit = 2, .window = 30s, .headers = c.mode, .key = rc::by_client()})
              .from(src)
              .transform([](rc::http_request r) -> std::string {
                if (r.query_param("fail")) throw std::runtime_error("secret database password in here");
                return "ok";
              }));
  running run(ctx);
  const auto port = src.port();
  auto first = request(port, get("/r"));
  CHECK(first.status == 200);
  for (const auto& n : c.names) CHECK(first.header(n) != nullptr);
  CHECK(first.header("Retry-After") == nullptr);
  if (c.mode == rc::rate_limit_headers::draft_7) CHECK(*first.header("RateLimit") == "limit=2, remaining=1, reset=30");
  if (c.mode == rc::rate_limit_headers::draft_6) CHECK(*first.header("RateLimit-Policy") == "2;w=30");
  std::size_t dates = 0;  // legacy headers bring their own Date: it replaces the server's
  for (const auto& [k, v] : first.headers) dates += k == "Date" ? 1 : 0;
  CHECK(dates == 1);
  if (c.mode == rc::rate_limit_headers::draft_8) {
    CHECK(*first.header("RateLimit") == "\"2-in-30sec\"; r=1; t=30");
    CHECK(*first.header("RateLimit-Policy") == "\"2-in-30sec\"; q=2; w=30; pk=:MTJjYTE3YjQ5YWYy:");
  }

  // A failure downstream is a 500 that still carries the limiter's headers, and no internals.
  auto failed = request(port, get("/r?fail=1"));
  CHECK(failed.status == 500);
  for (const auto& n : c.names) CHECK(failed.header(n) != nullptr);
  CHECK(failed.json() == nlohmann::json{{"code", "RC5001"}, {"message", "Internal Server Error"}});
  CHECK(failed.body.find("secret") == std::string::npos);

  auto refused = request(port, get("/r"));
  CHECK(refused.status == 429);
  for (const auto& n : c.names) CHECK(refused.header(n) != nullptr);
  REQUIRE(refused.header("Retry-After"));
  CHECK(std::stoi(*refused.header("Retry-After")) >= 29);
  CHECK(refused.body == "Too many requests, please try again later.");
  std::size_t rate_limit_lines = 0;
  for (const auto& [k, v] : refused.headers) rate_limit_lines += k == "RateLimit" ? 1 : 0;
  CHECK(rate_limit_lines <= 1);  // the note and the refusal carry the same header: written once
}

TEST_CASE("http: a refusal's status and message come from the rate_limit options") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/r"});
  ctx.add(rc::craft()
              .id("r")
              .rate_limit({.limit = 0,
                           .window = 10s,
                           .headers = rc::rate_limit_headers::draft_7,
                           .message = "slow down, friend",
                           .status = 503})
              .from(src)
              .to(rc::noop()));
  running run(ctx);
  const auto r = request(src.port(), get("/r"));
  CHECK(r.status == 503);
  CHECK(r.body == "slow down, friend");
  REQUIRE(r.header("Retry-After"));
  CHECK(r.header("RateLimit") != nullptr);
}

TEST_CASE("http: a rate_limit refusal carries one Retry-After and one Date, with its headers on or off") {
  rc::context ctx(quick_stop());
  auto quiet = rc::http_source({.path = "/quiet"});
  auto loud = rc::http_source({.path = "/loud"});
  auto legacy = rc::http_source({.path = "/legacy"});
  const auto refuse_all = [](rc::rate_limit_headers headers) {
    return rc::rate_limit_options{.limit = 0, .window = 10s, .headers = headers};
  };
  ctx.add(rc::craft().id("quiet").rate_limit(refuse_all(rc::rate_limit_headers::none)).from(quiet).to(rc::noop()));
  ctx.add(rc::craft().id("loud").rate_limit(refuse_all(rc::rate_limit_headers::draft_7)).from(loud).to(rc::noop()));
  ctx.add(rc::craft()
              .id("legacy")
              .rate_limit(refuse_all(rc::rate_limit_headers::draft_6 | rc::rate_limit_headers::legacy))
              .from(legacy)
              .to(rc::noop()));
  running run(ctx);
  const auto count = [](const auto& reply, std::string_view name) {
    const auto lower = [](std::string_view text) {
      std::string out(text);
      for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return out;
    };
    return std::count_if(reply.headers.begin(), reply.headers.end(),
                         [&](const auto& h) { return lower(h.first) == lower(name); });
  };
  const auto q = request(quiet.port(), get("/quiet"));
  CHECK(q.status == 429);
  CHECK(count(q, "Retry-After") == 1);              // from the refusal itself: the gate wrote no headers
  CHECK(std::stoi(*q.header("Retry-After")) >= 9);  // the 10 s window, in whole seconds rounded up
  CHECK(std::stoi(*q.header("Retry-After")) <= 10);
  CHECK(count(q, "RateLimit") == 0);
  CHECK(count(q, "Date") == 1);
  const auto l = request(loud.port(), get("/loud"));
  CHECK(l.status == 429);
  CHECK(count(l, "Retry-After") == 1);  // the gate's, not a second one
  CHECK(count(l, "RateLimit") == 1);
  CHECK(count(l, "Date") == 1);
  const auto g = request(legacy.port(), get("/legacy"));
  CHECK(g.status == 429);
  CHECK(count(g, "Retry-After") == 1);
  CHECK(count(g, "X-RateLimit-Limit") == 1);
  CHECK(count(g, "Date") == 1);  // the legacy family's Date stands in for the server's own
}

TEST_CASE("http: a body that is not valid JSON and a validation error are 400, other failures 500") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/v", .method = "POST"});
  ctx.add(rc::craft().id("v").from(src).transform([](rc::http_request r) -> std::string {
    if (!r.json || !r.json->contains("name")) throw rc::error(rc::errc::validation, "name is required");
    if ((*r.json)["name"] == "boom") throw std::logic_error("std::vector out of range at 0x7fff");
    return "fine";
  }));
  running run(ctx);
  const auto port = src.port();
  auto r = request(port, post("/v", "{not json"));
  CHECK(r.status == 400);
  CHECK(r.json()["code"] == "RC5002");
  r = request(port, post("/v", R"({"other":1})"));
  CHECK(r.status == 400);
  CHECK(r.json() == nlohmann::json{{"code", "RC5002"}, {"message", "name is required"}});
  r = request(port, post("/v", R"({"name":"boom"})"));
  CHECK(r.status == 500);
  CHECK(r.body.find("vector") == std::string::npos);
  CHECK(request(port, post("/v", R"({"name":"x"})")).body == "fine");
}

TEST_CASE("http: status and headers are settable from the pipeline, and rc::http_response is sent as given") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/s"});
  ctx.add(rc::craft()
              .id("s")
              .from(src)
              .process([](rc::exchange& ex) {
                rc::set_http_header(ex, "X-Trace", "abc");
                rc::set_http_status(ex, 202);
              })
              .transform([](rc::http_request) { return std::string("queued"); }));
  ctx.add(rc::craft().id("raw").from(rc::http_source({.path = "/raw"})).transform([](rc::http_request) {
    rc::http_response res;
    res.status = 301;
    res.headers = {{"Location", "/elsewhere"}, {"Content-Length", "999"}, {"X-Bad\r\nInjected", "x"}};
    res.body = "moved";
    return res;
  }));
  running run(ctx);
  auto r = request(src.port(), get("/s"));
  CHECK(r.status == 202);
  CHECK(*r.header("X-Trace") == "abc");
  CHECK(r.body == "queued");
  r = request(src.port(), get("/raw"));
  CHECK(r.status == 301);
  CHECK(*r.header("Location") == "/elsewhere");
  CHECK(*r.header("Content-Length") == "5");
  CHECK(r.header("Injected") == nullptr);
}

TEST_CASE("http: a response not ready within response_timeout is 503 and the exchange's wait ends") {
  rc::context ctx(quick_stop());
  event_recorder dropped(ctx, "route:exchange:dropped");
  auto src = rc::http_source({.path = "/slow", .response_timeout = 200ms});
  ctx.add(rc::craft().id("slow").throttle({.rate = 1, .per = rc::per::minute, .burst = 1}).from(src).to(rc::noop()));
  running run(ctx);
  CHECK(request(src.port(), get("/slow")).status == 204);
  const auto started = clock_type::now();
  const auto r = request(src.port(), get("/slow"));
  CHECK(r.status == 503);
  CHECK(r.json()["code"] == "RC5011");
  CHECK(elapsed_ms(started) < 1500);
  for (int i = 0; i < 100 && dropped.count("route:exchange:dropped") == 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(dropped.count("route:exchange:dropped") == 1);
}

// ---- limits -------------------------------------------------------------------------------------

TEST_CASE("http: oversized headers are 431, an oversized body 413, and the connection closes") {
  rc::context ctx(quick_stop());
  auto src =
      rc::http_source({.path = "/u", .method = "POST", .server = {.max_header_bytes = 1024, .max_body_bytes = 100}});
  ctx.add(rc::craft().id("u").from(src).transform([](rc::http_request r) { return std::to_string(r.body.size()); }));
  running run(ctx);
  const auto port = src.port();
  {
    raw_client c(port);
    c.send(get("/u", "X-Big: " + std::string(2000, 'a') + "\r\n"));
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == 431);
    CHECK(*r->header("Connection") == "close");
    CHECK(c.closed_within(3000ms));
  }
  {
    raw_client c(port);
    c.send(post("/u", std::string(500, 'b'), "text/plain"));
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK(c.closed_within(3000ms));
  }
  {  // chunked: the limit holds without a Content-Length too
    raw_client c(port);
    c.send("POST /u HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; ++i) c.send(fmt::format("40\r\n{}\r\n", std::string(64, 'c')));
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == 413);
  }
  CHECK(request(port, post("/u", std::string(100, 'd'), "text/plain")).body == "100");
  CHECK(request(port, "BREW /u HTTP/1.1\r\nHost t\r\n\r\n").status == 400);
}

// ---- framing: chunked lines, Transfer-Encoding, Host, empty lines --------------------------------

namespace {

/// An echo of the request body on POST /echo, and a counter of requests reaching GET /smuggled.
struct framing_server {
  rc::context ctx{quick_stop()};
  rc::http_source_endpoint echo;
  std::shared_ptr<std::atomic<int>> smuggled = std::make_shared<std::atomic<int>>(0);
  std::optional<running> run;

  explicit framing_server(rc::http_server_options server = {.read_timeout = 30s})
      : echo(rc::http_source({.path = "/echo", .method = "POST", .server = server})) {
    ctx.add(rc::craft().id("echo").from(echo).transform([](rc::http_request r) { return r.body; }));
    ctx.add(rc::craft()
                .id("smuggled")
                .from(rc::http_source({.path = "/smuggled", .method = "*"}))
                .transform([n = smuggled](rc::http_request) {
                  ++*n;
                  return std::string("smuggled");
                }));
    run.emplace(ctx);
  }
  std::uint16_t port() const { return echo.port(); }
};

}  // namespace

TEST_CASE("http: chunked bodies with extensions and trailers within the limits are read") {
  framing_server s;
  raw_client c(s.port());
  c.send(
      "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value;flag\r\nhello\r\n" +
      fmt::format("6;x={}\r\n world\r\n", std::string(3000, 'e')) + "0\r\nX-Checksum: abc\r\nX-More: def\r\n\r\n");
  auto r = c.read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "hello world");
  c.send(get("/smuggled"));  // the connection goes on
  r = c.read();
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("http: a chunk-size line that never ends is 400 and closes once it passes its limit") {
  framing_server s;  // read_timeout 30 s: a 408 could not come in time for this test
  const std::string start = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  SECTION("an endless chunk extension") {
    raw_client c(s.port());
    c.send(start + "5\r\nhello\r\n1;ext=");
    // 64 KiB, no line end: were the line buffered without a bound, no answer would come before
    // the read timeout, whatever the client sent.
    for (int i = 0; i < 16; ++i) c.send(std::string(4096, 'x'));
    const auto r = c.read(3000ms);
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(r->json()["message"] == "a chunk-size line exceeds 4096 bytes");
    const auto* connection = r->header("Connection");
    CHECK((connection && *connection == "close"));
    CHECK(c.closed_within(3000ms));
  }
  SECTION("an endless chunk size") {
    raw_client c(s.port());
    c.send(start);
    for (int i = 0; i < 16; ++i) c.send(std::string(4096, '0'));
    const auto r = c.read(3000ms);
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(c.closed_within(3000ms));
  }
  CHECK(*s.smuggled == 0);
}

TEST_CASE("http: trailers are held to max_header_bytes: an endless or oversized trailer section is 400") {
  framing_server s({.max_header_bytes = 1024, .read_timeout = 30s});
  const std::string start = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n";
  SECTION("one trailer line that never ends") {
    raw_client c(s.port());
    c.send(start + "X-Trailer: ");
    for (int i = 0; i < 16; ++i) c.send(std::string(4096, 't'));
    const auto r = c.read(3000ms);
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(r->json()["message"] == "request trailers exceed 1024 bytes");
    CHECK(c.closed_within(3000ms));
  }
  SECTION("many short trailer lines") {
    raw_client c(s.port());
    c.send(start);
    for (int i = 0; i < 200; ++i) c.send(fmt::format("X-T-{}: v\r\n", i));
    const auto r = c.read(3000ms);
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(c.closed_within(3000ms));
  }
  SECTION("a trailer section within the limit") {
    raw_client c(s.port());
    c.send(start + "X-T: " + std::string(900, 'v') + "\r\n\r\n");
    const auto r = c.read(3000ms);
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->body == "hello");
  }
}

TEST_CASE("http: a Transfer-Encoding the server cannot frame is refused and its body never served as a request") {
  framing_server s;
  const std::string inner = "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n";
  const std::string chunked_inner = fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", inner.size(), inner);
  struct refused {
    std::string headers;
    std::string body;
    int status;
  };
  const std::vector<refused> cases = {
      {"Transfer-Encoding: gzip\r\n", inner, 400},
      {"Transfer-Encoding: chunked, gzip\r\n", inner, 400},
      {"Transfer-Encoding: identity\r\n", inner, 400},
      {"Transfer-Encoding: xchunked\r\n", inner, 400},
      {"Transfer-Encoding: chunked, chunked\r\n", chunked_inner, 400},
      {"Transfer-Encoding: ,\r\n", inner, 400},
      {fmt::format("Transfer-Encoding: gzip\r\nContent-Length: {}\r\n", inner.size()), inner, 400},
      {fmt::format("Content-Length: {}\r\nTransfer-Encoding: gzip\r\n", inner.size()), inner, 400},
      {fmt::format("Transfer-Encoding: chunked\r\nContent-Length: {}\r\n", chunked_inner.size()), chunked_inner, 400},
      {fmt::format("Content-Length: {}\r\nTransfer-Encoding: chunked\r\n", chunked_inner.size()), chunked_inner, 400},
      {"Transfer-Encoding: gzip, chunked\r\n", chunked_inner + inner, 501},
      {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", chunked_inner + inner, 501},
  };
  for (const auto& k : cases) {
    INFO(k.headers);
    raw_client c(s.port());
    c.send("POST /echo HTTP/1.1\r\nHost: t\r\n" + k.headers + "\r\n" + k.body + inner);
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == k.status);
    const auto* connection = r->header("Connection");
    CHECK((connection && *connection == "close"));
    CHECK(c.closed_within(3000ms));  // closed: nothing after the header was taken for a request
  }
  {  // HTTP/1.0 has no transfer codings: the framing cannot be trusted
    raw_client c(s.port());
    c.send("POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_inner + inner);
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(c.closed_within(3000ms));
  }
  CHECK(*s.smuggled == 0);
  // chunked alone, in any case, is fine, and the request after it is served
  raw_client c(s.port());
  c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + inner);
  auto r = c.read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "hello");
  r = c.read();
  REQUIRE(r);
  CHECK(r->body == "smuggled");
  CHECK(*s.smuggled == 1);
}

TEST_CASE("http: an HTTP/1.1 request without Host, or any request with two, is 400") {
  framing_server s;
  for (const std::string raw :
       {"GET /smuggled HTTP/1.1\r\n\r\n", "GET /smuggled HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET /smuggled HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n"}) {
    INFO(raw);
    raw_client c(s.port());
    c.send(raw);
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(c.closed_within(3000ms));
  }
  CHECK(*s.smuggled == 0);
  CHECK(request(s.port(), "GET /smuggled HTTP/1.0\r\n\r\n").status == 200);  // HTTP/1.0 needs none
}

TEST_CASE("http: empty lines before a request line are skipped, up to a bound") {
  framing_server s;
  {
    raw_client c(s.port());
    c.send("\r\n\r\n\n" + post("/echo", "one", "text/plain") + "\r\n");  // a stray CRLF after the body too
    auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->body == "one");
    c.send("\r\n" + get("/smuggled"));
    r = c.read();
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  {
    raw_client c(s.port());
    std::string blank;
    while (blank.size() <= rc::http_server_options::leading_blank_limit) blank += "\r\n";
    c.send(blank + get("/smuggled"));
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(c.closed_within(3000ms));
  }
  CHECK(*s.smuggled == 1);
}

// ---- a forced stop -------------------------------------------------------------------------------

namespace {
struct never_resumes {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  void await_resume() const noexcept {}
};

// A step that never finishes; its frame holds `held`.
class stuck_destination final : public rc::destination_base {
 public:
  explicit stuck_destination(std::shared_ptr<int> held) : held_(std::move(held)) {}
  std::string_view adapter() const override { return "stuck"; }
  bool synchronous() const noexcept override { return false; }
  rc::task<void> send(rc::exchange&, rc::route_runtime&) override {
    const std::shared_ptr<int> keep = held_;
    co_await never_resumes{};
  }

 private:
  std::shared_ptr<int> held_;
};
}  // namespace

TEST_CASE("http: a request stuck in a step when a stop gives up is freed with the context, connection and all") {
  auto held = std::make_shared<int>(0);
  std::optional<raw_client> c;
  {
    rc::context ctx({.shutdown_timeout = 30ms});
    auto src = rc::http_source({.path = "/stuck"});
    ctx.add(rc::craft().id("stuck").from(src).to(stuck_destination(held)));
    ctx.start();
    c.emplace(src.port());
    c->send(get("/stuck"));
    for (int i = 0; i < 2000 && held.use_count() < 3; ++i) std::this_thread::sleep_for(1ms);
    REQUIRE(held.use_count() == 3);  // the destination and the stuck run
    const rc::stop_result result = ctx.stop();
    CHECK(result.forced);
  }
  CHECK(held.use_count() == 1);
  CHECK(c->closed_within(1000ms));  // the connection went with it
}

// ---- IPv6 ---------------------------------------------------------------------------------------

namespace {
/// Whether this machine has an IPv6 loopback to listen on.
bool ipv6_loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}
}  // namespace

TEST_CASE("http: a server on ::1 serves IPv6 clients, and (::1) names the same server") {
  if (!ipv6_loopback()) {
    WARN("skipped: this machine has no IPv6 loopback (::1)");
    return;
  }
  rc::context ctx(quick_stop());
  auto who = rc::http_source({.host = "::1", .path = "/who"});
  ctx.add(rc::craft().id("who").from(who).transform([](rc::http_request r) {
    return nlohmann::json{{"peer", r.peer}, {"key", r.client_key}};
  }));
  auto other = rc::http_source({.host = "[::1]", .path = "/other"});
  ctx.add(rc::craft().id("other").from(other).transform([](rc::http_request) { return std::string("other"); }));
  running run(ctx);
  REQUIRE(other.port() == who.port());
  raw_client c(who.port(), true, "::1");
  c.send(get("/who"));
  auto r = c.read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->json()["peer"] == "::1");
  CHECK(r->json()["key"] == "::/56");
  c.send(get("/other"));
  r = c.read();
  REQUIRE(r);
  CHECK(r->body == "other");
}

TEST_CASE("http: a server on :: takes IPv4 and IPv6 clients alike") {
  if (!ipv6_loopback()) {
    WARN("skipped: this machine has no IPv6 loopback (::1)");
    return;
  }
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.host = "::", .path = "/who"});
  ctx.add(rc::craft().id("who").from(src).transform([](rc::http_request r) { return r.peer; }));
  running run(ctx);
  raw_client v6(src.port(), true, "::1");
  v6.send(get("/who"));
  auto r = v6.read();
  REQUIRE(r);
  CHECK(r->body == "::1");
  raw_client v4(src.port(), true, "127.0.0.1");
  v4.send(get("/who"));
  r = v4.read();
  REQUIRE(r);
  CHECK(r->body == "127.0.0.1");  // an IPv4-mapped peer is reported as IPv4
}

TEST_CASE("http: a request trickling in slower than read_timeout is 408 (slowloris)") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/", .server = {.read_timeout = 30ms}});
  ctx.add(rc::craft().id("root").from(src).transform([](rc::http_request) { return std::string("ok"); }));
  running run(ctx);
  raw_client c(src.port());
  const auto started = clock_type::now();
  // One header line every 10 ms: each byte is "recent", but the request never completes.
  c.send("GET / HTTP/1.1\r\n");
  std::optional<reply> r;
  int lines = 0;
  for (; lines < 50 && !r; ++lines) {
    c.send(fmt::format("X-Slow-{}: 1\r\n", lines));
    r = c.read(10ms);
  }
  REQUIRE(r);
  CHECK(r->status == 408);
  CHECK(elapsed_ms(started) < 1000);
  CHECK(c.closed_within(3000ms));
}

TEST_CASE("http: a client that does not read its response is disconnected after write_timeout") {
  rc::context ctx(quick_stop());
  constexpr std::size_t size = 16 * 1024 * 1024;  // far more than the socket buffers hold
  auto src = rc::http_source({.path = "/big", .server = {.write_timeout = 20ms}});
  ctx.add(rc::craft().id("big").from(src).transform([](rc::http_request) { return std::string(size, 'x'); }));
  running run(ctx);
  raw_client c(src.port());
  c.limit_receive_buffer(64 * 1024);
  c.send(get("/big"));
  REQUIRE(c.readable_within(5000ms));  // the response has started
  std::this_thread::sleep_for(60ms);   // reads nothing: the server's write stalls past its 20 ms
  const auto received = c.drain(5000ms);
  REQUIRE(received);        // the server closed the connection
  CHECK(*received < size);  // before the response was all out
}

TEST_CASE("http: an idle keep-alive connection is closed after idle_timeout") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/", .server = {.idle_timeout = 200ms}});
  ctx.add(rc::craft().id("root").from(src).transform([](rc::http_request) { return std::string("ok"); }));
  running run(ctx);
  raw_client c(src.port());
  c.send(get("/"));
  REQUIRE(c.read());
  const auto started = clock_type::now();
  CHECK(c.closed_within(2000ms));
  CHECK(elapsed_ms(started) >= 150);
  CHECK(elapsed_ms(started) < 1500);
}

// More connections than threads: between requests a connection lets the others run before it
// reads again. Each still gets its own answers in order, and idle ones still time out.
TEST_CASE("http: one thread serving several keep-alive connections answers each in turn, then closes idle ones") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/n/:n", .server = {.idle_timeout = 300ms}});
  ctx.add(rc::craft().id("n").from(src).transform([](rc::http_request r) { return r.param("n"); }));
  running run(ctx);
  std::vector<std::unique_ptr<raw_client>> clients;
  for (int c = 0; c < 4; ++c) clients.push_back(std::make_unique<raw_client>(src.port()));
  for (int i = 0; i < 20; ++i) {
    for (std::size_t c = 0; c < clients.size(); ++c) clients[c]->send(get("/n/" + std::to_string(c * 100 + i)));
    for (std::size_t c = 0; c < clients.size(); ++c) {
      const auto r = clients[c]->read();
      REQUIRE(r);
      CHECK(r->status == 200);
      CHECK(r->body == std::to_string(c * 100 + i));
    }
  }
  // Two requests in one write, then the next only once both are answered.
  clients[0]->send(get("/n/7") + get("/n/8"));
  for (const char* n : {"7", "8"}) {
    const auto r = clients[0]->read();
    REQUIRE(r);
    CHECK(r->body == n);
  }
  const auto started = clock_type::now();
  for (auto& c : clients) CHECK(c->closed_within(3000ms));
  CHECK(elapsed_ms(started) >= 250);
}

TEST_CASE("http: stop() closes idle keep-alive connections before it returns") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/"});
  ctx.add(rc::craft().id("root").from(src).transform([](rc::http_request) { return std::string("ok"); }));
  ctx.start();
  std::vector<std::unique_ptr<raw_client>> clients;
  for (int c = 0; c < 3; ++c) {
    clients.push_back(std::make_unique<raw_client>(src.port()));
    clients.back()->send(get("/"));
    REQUIRE(clients.back()->read());
  }
  const auto started = clock_type::now();
  ctx.stop();
  CHECK(elapsed_ms(started) < 2500);  // shutdown_timeout is 3 s: nobody held the stop up
  // Closed already (a short wait for the FIN to arrive): before, they stayed open until the
  // context was destroyed, as the event loop ended before the connections were told.
  for (auto& c : clients) CHECK(c->closed_within(500ms));
}

TEST_CASE("http: connections beyond max_connections are turned away with 503") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/", .server = {.max_connections = 2}});
  ctx.add(rc::craft().id("root").from(src).transform([](rc::http_request) { return std::string("ok"); }));
  running run(ctx);
  raw_client a(src.port()), b(src.port());
  a.send(get("/"));
  b.send(get("/"));
  REQUIRE(a.read());
  REQUIRE(b.read());
  {
    raw_client c(src.port());
    c.send(get("/"));
    const auto r = c.read();
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(c.closed_within(3000ms));
  }
  a.close();
  std::optional<reply> r;
  for (int i = 0; i < 50; ++i) {  // the slot frees once the server has seen a's close
    raw_client d(src.port());
    d.send(get("/"));
    r = d.read(500ms);
    if (r && r->status == 200) break;
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(r);
  CHECK(r->status == 200);
}

// ---- clients that go away -----------------------------------------------------------------------

TEST_CASE("http: a client leaving while it waits in a throttle is dropped as client-gone and gives its slot back") {
  rc::context ctx(quick_stop());
  event_recorder dropped(ctx, "route:exchange:dropped");
  auto src = rc::http_source({.path = "/q"});
  // One admission a second: the crowd below must be in, gone and noticed before the first slot,
  // with room for a loaded sanitizer build.
  ctx.add(rc::craft().id("q").throttle({.rate = 1, .burst = 1}).from(src).transform([](rc::http_request) {
    return std::string("served");
  }));
  running run(ctx);
  const auto port = src.port();
  CHECK(request(port, get("/q")).body == "served");  // takes the token at t0

  // Five impatient clients queue (slots t0+1 s .. t0+5 s) and leave.
  std::vector<std::unique_ptr<raw_client>> crowd;
  for (int i = 0; i < 5; ++i) {
    crowd.push_back(std::make_unique<raw_client>(port));
    crowd.back()->send(get("/q"));
  }
  std::this_thread::sleep_for(100ms);
  crowd.clear();
  for (int i = 0; i < 100 && dropped.count("route:exchange:dropped") < 5; ++i) std::this_thread::sleep_for(10ms);
  const auto drops = dropped.named("route:exchange:dropped");
  REQUIRE(drops.size() == 5);
  for (const auto& d : drops) CHECK(d.details["reason"] == "client-gone");

  // A patient client now gets the first free slot (t0+1 s), not the sixth (t0+6 s).
  const auto started = clock_type::now();
  const auto r = request(port, get("/q"), 8000ms);
  CHECK(r.body == "served");
  CHECK(elapsed_ms(started) < 3000);
}

TEST_CASE("http: a client leaving during a slow_down delay ends the exchange as client-gone") {
  rc::context ctx(quick_stop());
  event_recorder events(ctx);
  auto src = rc::http_source({.path = "/s"});
  std::atomic<int> served{0};
  ctx.add(rc::craft()
              .id("s")
              .slow_down({.window = 10s, .delay_after = 1, .delay = 5s, .key = rc::by_client()})
              .from(src)
              .transform([&](rc::http_request) {
                ++served;
                return std::string("ok");
              }));
  running run(ctx);
  CHECK(request(src.port(), get("/s")).status == 200);
  {
    raw_client c(src.port());
    c.send(get("/s"));
    std::this_thread::sleep_for(100ms);
  }
  for (int i = 0; i < 100 && events.count("route:exchange:dropped") == 0; ++i) std::this_thread::sleep_for(10ms);
  const auto drops = events.named("route:exchange:dropped");
  REQUIRE(drops.size() == 1);
  CHECK(drops[0].details["reason"] == "client-gone");
  CHECK(served == 1);
}

// ---- client identity ----------------------------------------------------------------------------

TEST_CASE("http: X-Forwarded-For is ignored unless the peer is a trusted proxy") {
  const auto who = [](rc::http_server_options server, std::string_view extra) {
    rc::context ctx(quick_stop());
    auto src = rc::http_source({.path = "/who", .server = std::move(server)});
    ctx.add(rc::craft().id("who").from(src).transform([](rc::http_request r, rc::exchange& ex) {
      return nlohmann::json{{"client", r.client}, {"key", ex.header_or(rc::client_header, "")}};
    }));
    running run(ctx);
    return request(src.port(), get("/who", extra)).json();
  };
  // Not trusted: the header is the client's word, and the client's word is not taken.
  CHECK(who({}, "X-Forwarded-For: 203.0.113.9\r\n")["client"] == "127.0.0.1");
  CHECK(who({.trusted_proxies = {"10.0.0.0/8"}}, "X-Forwarded-For: 203.0.113.9\r\n")["client"] == "127.0.0.1");
  // Trusted: the right-most address that is not a trusted proxy.
  CHECK(who({.trusted_proxies = {"127.0.0.1"}}, "X-Forwarded-For: 203.0.113.9\r\n")["client"] == "203.0.113.9");
  CHECK(who({.trusted_proxies = {"loopback", "10.0.0.0/8"}},
            "X-Forwarded-For: 6.6.6.6, 203.0.113.9, 10.1.2.3\r\n")["client"] == "203.0.113.9");
  // IPv6 clients share a key per /56.
  const auto v6 = who({.trusted_proxies = {"loopback"}}, "X-Forwarded-For: 2001:db8:1:2::5\r\n");
  CHECK(v6["client"] == "2001:db8:1:2::5");
  CHECK(v6["key"] == "2001:db8:1::/56");
  // Forwarded (RFC 7239) when configured; X-Forwarded-For then means nothing.
  const rc::http_server_options fwd{.trusted_proxies = {"loopback"}, .forwarded_header = rc::proxy_header::forwarded};
  CHECK(who(fwd, "Forwarded: for=198.51.100.17;proto=http, for=\"[2001:db8::9]:4711\"\r\n")["client"] == "2001:db8::9");
  CHECK(who(fwd, "X-Forwarded-For: 203.0.113.9\r\n")["client"] == "127.0.0.1");
}

TEST_CASE("http: resolve_http_client walks trusted hops, maps IPv4-mapped addresses and groups IPv6") {
  const rc::http_server_options o{.trusted_proxies = {"private", "loopback"}, .ipv6_prefix = 48};
  CHECK(rc::resolve_http_client("::ffff:127.0.0.1", {}, o).address == "127.0.0.1");
  auto id = rc::resolve_http_client("10.0.0.1", {{"x-forwarded-for", "2001:db8:aa:bb::1, 192.168.1.1"}}, o);
  CHECK(id.address == "2001:db8:aa:bb::1");
  CHECK(id.key == "2001:db8:aa::/48");
  id = rc::resolve_http_client("10.0.0.1", {{"X-Forwarded-For", "garbage, 192.168.1.1"}}, o);
  CHECK(id.address == "192.168.1.1");  // an unreadable hop: the last one we can vouch for
  id = rc::resolve_http_client("203.0.113.1", {{"X-Forwarded-For", "10.9.9.9"}}, o);
  CHECK(id.address == "203.0.113.1");
  CHECK_THROWS_AS(rc::http_source({.server = {.trusted_proxies = {"10.0.0.0/33"}}}), rc::error);
}

TEST_CASE("http: a per-client rate limit cannot be escaped by sending X-Forwarded-For") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/l"});
  ctx.add(rc::craft()
              .id("l")
              .rate_limit({.limit = 2, .window = 30s, .key = rc::by_client()})
              .from(src)
              .transform([](rc::http_request) { return std::string("ok"); }));
  running run(ctx);
  std::vector<int> statuses;
  for (const char* spoof : {"1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4"})
    statuses.push_back(request(src.port(), get("/l", fmt::format("X-Forwarded-For: {}\r\n", spoof))).status);
  CHECK(statuses == std::vector<int>{200, 200, 429, 429});
}

// ---- the client ---------------------------------------------------------------------------------

TEST_CASE("http client: calls keep one pooled connection per host, JSON in and JSON out") {
  rc::context ctx(quick_stop());
  auto api = rc::http_source({.path = "/sum", .method = "POST"});
  ctx.add(rc::craft().id("sum").from(api).transform([](rc::http_request r) {
    return nlohmann::json{{"sum", (*r.json)["a"].get<int>() + (*r.json)["b"].get<int>()}, {"port", r.peer_port}};
  }));
  running run(ctx);
  const auto port = api.port();
  rc::spy<rc::http_response> out;
  ctx.add(
      rc::craft()
          .id("caller")
          .from(rc::sequence(std::vector<int>{1, 2, 3}))
          .transform([](int n) {
            return nlohmann::json{{"a", n}, {"b", 10}};
          })
          .request<rc::http_response>(rc::http({.url = fmt::format("http://127.0.0.1:{}/sum", port), .method = "POST"}))
          .to(out));
  ctx.drain();
  const auto got = out.bodies();
  REQUIRE(got.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(got[i].status == 200);
    REQUIRE(got[i].json);
    CHECK((*got[i].json)["sum"] == 11 + i);
  }
  CHECK((*got[0].json)["port"] == (*got[1].json)["port"]);  // the same connection, reused
  CHECK((*got[1].json)["port"] == (*got[2].json)["port"]);
}

TEST_CASE("http client: a call slower than its timeout fails with RC5011 and the server sees the caller leave") {
  rc::context ctx(quick_stop());
  event_recorder events(ctx);
  auto api = rc::http_source({.path = "/slow"});
  // The first call passes; the second would wait a minute in the throttle.
  ctx.add(rc::craft()
              .id("api")
              .throttle({.rate = 1, .per = rc::per::minute, .burst = 1})
              .from(api)
              .transform([](rc::http_request) { return std::string("ok"); }));
  running run(ctx);
  rc::spy<rc::http_response> out;
  ctx.add(rc::craft()
              .id("calls")
              .from(rc::sequence(std::vector<int>{1, 2}))
              .request<rc::http_response>(
                  rc::http({.url = fmt::format("http://127.0.0.1:{}/slow", api.port()), .timeout = 300ms}))
              .to(out));
  const auto started = clock_type::now();
  ctx.drain();
  CHECK(elapsed_ms(started) < 3000);
  REQUIRE(out.count() == 1);
  CHECK(out.bodies()[0].body == "ok");
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["routeId"] == "calls");
  CHECK(failed[0].details["error"]["code"] == "RC5011");
  CHECK(failed[0].details["error"]["retryable"] == true);
  for (int i = 0; i < 100 && events.count("route:exchange:dropped") == 0; ++i) std::this_thread::sleep_for(10ms);
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].details["routeId"] == "api");
  CHECK(dropped[0].details["reason"] == "client-gone");
}

TEST_CASE("http client: a non-2xx response is an rc::error with the status: 5xx and 429 retryable, 4xx not") {
  rc::context ctx(quick_stop());
  event_recorder failed(ctx, "route:exchange:failed");
  auto api = rc::http_source({.path = "/status/:code"});
  ctx.add(rc::craft().id("api").from(api).transform(
      [](rc::http_request r) { return rc::text_response("status", std::stoi(r.param("code"))); }));
  running run(ctx);
  const auto base = fmt::format("http://127.0.0.1:{}/status/", api.port());
  rc::spy<rc::http_response> ok;
  ctx.add(rc::craft()
              .id("calls")
              .from(rc::sequence(std::vector<std::string>{"404", "503", "429", "200"}))
              .request<rc::http_response>(
                  rc::http({.url_from = [base](const rc::exchange& ex) { return base + ex.body<std::string>(); }}))
              .to(ok));
  ctx.drain();
  const auto errors = failed.named("route:exchange:failed");
  REQUIRE(errors.size() == 3);
  CHECK(errors[0].details["error"]["details"]["status"] == 404);
  CHECK(errors[0].details["error"]["retryable"] == false);
  CHECK(errors[1].details["error"]["details"]["status"] == 503);
  CHECK(errors[1].details["error"]["retryable"] == true);
  CHECK(errors[2].details["error"]["details"]["status"] == 429);
  CHECK(errors[2].details["error"]["retryable"] == true);
  REQUIRE(ok.count() == 1);
  CHECK(ok.bodies()[0].status == 200);
  CHECK(ok.bodies()[0].body == "status");
}

TEST_CASE("http client: retry waits at least the Retry-After of a 429 before the next attempt") {
  rc::context ctx(quick_stop());
  event_recorder retries(ctx, "route:retry:attempt");
  auto api = rc::http_source({.path = "/once"});
  std::mutex m;
  std::vector<clock_type::time_point> hits;
  ctx.add(rc::craft().id("api").from(api).transform([&](rc::http_request) {
    std::lock_guard lock(m);
    hits.push_back(clock_type::now());
    if (hits.size() == 1) {
      auto r = rc::text_response("busy", 429);
      r.headers.emplace_back("Retry-After", "1");
      return r;
    }
    return rc::text_response("done");
  }));
  running run(ctx);
  rc::spy<rc::http_response> out;
  ctx.add(rc::craft()
              .id("caller")
              .from(rc::simple(1))
              .retry({.max_attempts = 3, .backoff = 10ms})
              .request<rc::http_response>(rc::http({.url = fmt::format("http://127.0.0.1:{}/once", api.port())}))
              .to(out));
  ctx.drain();
  REQUIRE(out.count() == 1);
  CHECK(out.bodies()[0].body == "done");
  std::lock_guard lock(m);
  REQUIRE(hits.size() == 2);
  const double gap = std::chrono::duration<double, std::milli>(hits[1] - hits[0]).count();
  CHECK(gap >= 990);
  CHECK(gap < 2500);
  REQUIRE(retries.count("route:retry:attempt") == 1);
  CHECK(retries.named("route:retry:attempt")[0].details["backoffMs"].get<double>() >= 1000);
}

TEST_CASE("http client: a refused connection is RC5010 (retryable) and a bad URL is RC5003 at build time") {
  CHECK_THROWS_AS(rc::http({.url = "http//example.test/"}), rc::error);
  CHECK_THROWS_AS(rc::http({.url = "ftp://x"}), rc::error);
  // A port nobody listens on: bind one, close it, call it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ::close(fd);

  rc::context ctx(quick_stop());
  event_recorder failed(ctx, "route:exchange:failed");
  ctx.add(rc::craft().id("c").from(rc::simple(1)).to(rc::http({.url = fmt::format("http://127.0.0.1:{}/", port)})));
  running run(ctx);
  ctx.drain();
  const auto errors = failed.named("route:exchange:failed");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].details["error"]["code"] == "RC5010");
  CHECK(errors[0].details["error"]["retryable"] == true);
}

TEST_CASE("http: http_source needs a real-time context") {
  rc::context ctx(rc::virtual_time);
  auto src = rc::http_source({.path = "/"});
  ctx.add(rc::craft().id("v").from(src).to(rc::noop()));
  ctx.start();
  ctx.run_until_idle();
  CHECK_THROWS_AS(src.port(0ms), rc::error);
  ctx.stop();
}

// ---- metrics, health and readiness ----------------------------------------------------------------

namespace {

rc::test::prometheus_text scrape(std::uint16_t port, std::string_view path = "/metrics") {
  const auto r = request(port, get(path));
  REQUIRE(r.status == 200);
  REQUIRE(r.header("Content-Type"));
  CHECK(*r.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  auto p = rc::test::parse_prometheus(r.body);
  INFO(r.body);
  for (const auto& e : p.errors) FAIL_CHECK(e);
  return p;
}

}  // namespace

TEST_CASE("http: /metrics after known traffic: gate counts, responses by status, and valid text") {
  rc::context ctx(quick_stop());
  auto src =
      rc::http_source({.path = "/t", .metrics_path = "/metrics", .health_path = "/health", .ready_path = "/ready"});
  ctx.add(rc::craft()
              .id("t")
              .throttle({.rate = 3, .per = rc::per::minute, .mode = rc::throttle_mode::reject, .label = "api"})
              .from(src)
              .transform([](rc::http_request) { return std::string("in"); }));
  running run(ctx);
  const auto port = src.port();
  const std::string listener = fmt::format("listener=\"127.0.0.1:{}\"", port);
  int ok = 0, refused = 0;
  for (int i = 0; i < 5; ++i) {
    const int status = request(port, get("/t")).status;
    ok += status == 200;
    refused += status == 429;
  }
  REQUIRE(ok == 3);
  REQUIRE(refused == 2);

  auto m = scrape(port);
  const std::string gate = R"(route="t",gate="throttle#1",kind="throttle",label="api")";
  CHECK(m.get("rc_gate_passed_total{" + gate + "}") == 3);
  CHECK(m.get("rc_gate_rejected_total{" + gate + "}") == 2);
  CHECK(m.get("rc_gate_delayed_total{" + gate + "}") == 0);
  CHECK(m.get("rc_gate_wait_seconds_bucket{" + gate + ",le=\"0\"}") == 3);
  CHECK(m.get("rc_gate_wait_seconds_bucket{" + gate + ",le=\"+Inf\"}") == 3);
  CHECK(m.get("rc_gate_wait_seconds_count{" + gate + "}") == 3);
  CHECK(m.get("rc_gate_wait_seconds_sum{" + gate + "}") == 0);
  CHECK(m.get("rc_http_responses_total{" + listener + ",code=\"200\"}") == 3);
  CHECK(m.get("rc_http_responses_total{" + listener + ",code=\"429\"}") == 2);
  CHECK(m.get("rc_route_exchanges_in_flight{route=\"t\"}") == 0);
  CHECK(m.get("rc_route_started{route=\"t\"}") == 1);
  CHECK(m.get("rc_ready") == 1);
  CHECK(m.get("process_open_fds").value_or(0) > 0);
  CHECK(m.types.at("rc_gate_wait_seconds") == "histogram");

  // The built-ins answer GET and HEAD, are counted themselves, and never reach the route.
  auto r = request(port, get("/health"));
  CHECK(r.status == 200);
  CHECK(r.body == "ok\n");
  r = request(port, get("/ready"));
  CHECK(r.status == 200);
  CHECK(r.body == "ready\n");
  r = request(port, "POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
  CHECK(r.status == 405);
  CHECK(*r.header("Allow") == "GET, HEAD");
  m = scrape(port);
  CHECK(m.get("rc_http_responses_total{" + listener + ",code=\"200\"}") == 3 + 3);  // + scrape, health, ready
  CHECK(m.get("rc_http_responses_total{" + listener + ",code=\"405\"}") == 1);
  CHECK(m.get("rc_gate_passed_total{" + gate + "}") == 3);
}

TEST_CASE("http: /metrics shows an exchange held in a gate as in flight and delayed, until its client leaves") {
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.path = "/q", .metrics_path = "/metrics"});
  ctx.add(rc::craft().id("q").throttle({.rate = 1, .per = rc::per::minute}).from(src).transform([](rc::http_request) {
    return std::string("served");
  }));
  running run(ctx);
  const auto port = src.port();
  CHECK(request(port, get("/q")).body == "served");  // takes the only token
  const std::string gate = R"(route="q",gate="throttle#1",kind="throttle",label="")";
  std::optional<rc::test::prometheus_text> m;
  {
    raw_client held(port);
    held.send(get("/q"));  // waits a minute in the throttle
    for (int i = 0; i < 200; ++i) {
      m = scrape(port);
      if (m->get("rc_route_exchanges_in_flight{route=\"q\"}") == 1) break;
      std::this_thread::sleep_for(5ms);
    }
    CHECK(m->get("rc_route_exchanges_in_flight{route=\"q\"}") == 1);
    CHECK(m->get("rc_gate_delayed_total{" + gate + "}") == 1);
    CHECK(m->get("rc_gate_passed_total{" + gate + "}") == 1);
  }  // the client leaves: its exchange is dropped
  for (int i = 0; i < 200; ++i) {
    m = scrape(port);
    if (m->get("rc_route_exchanges_in_flight{route=\"q\"}") == 0) break;
    std::this_thread::sleep_for(5ms);
  }
  CHECK(m->get("rc_route_exchanges_in_flight{route=\"q\"}") == 0);
  CHECK(m->get("rc_gate_passed_total{" + gate + "}") == 1);  // dropped, never admitted
  CHECK(m->get("rc_gate_wait_seconds_count{" + gate + "}") == 1);
}

TEST_CASE("http: /ready is 503 until every route has started, 200 then, and 503 again once stop() is called") {
  rc::context ctx({.threads = 2, .shutdown_timeout = 3s});
  auto src = rc::http_source({.path = "/a", .health_path = "/health", .ready_path = "/ready"});
  ctx.add(rc::craft().id("a").from(src).to(rc::noop()));
  // Route b's start is held in its route:started handler (on a context thread; the other serves).
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> holding{false};
  auto hold = ctx.on("route:started", [&](const rc::event& e) {
    if (e.details["routeId"] != "b") return;
    holding = true;
    (void)released.wait_for(5s);
  });
  ctx.add(rc::craft().id("b").from(rc::timer({.interval = 1h})).to(rc::noop()));
  int ready_while_stopping = 0, health_while_stopping = 0;
  auto stopping = ctx.on("context:stopping", [&](const rc::event&) {
    raw_client c(src.port(), false);
    c.send(get("/ready"));
    if (auto r = c.read(2000ms)) ready_while_stopping = r->status;
    c.send(get("/health"));
    if (auto r = c.read(2000ms)) health_while_stopping = r->status;
  });
  ctx.start();
  const auto port = src.port();
  for (int i = 0; i < 500 && !holding; ++i) std::this_thread::sleep_for(2ms);
  REQUIRE(holding);
  auto r = request(port, get("/ready"));
  CHECK(r.status == 503);
  CHECK(r.body == "not ready\n");
  CHECK(request(port, get("/health")).status == 200);
  release.set_value();
  for (int i = 0; i < 500 && r.status != 200; ++i) {
    std::this_thread::sleep_for(2ms);
    r = request(port, get("/ready"));
  }
  CHECK(r.status == 200);
  ctx.stop();
  CHECK(ready_while_stopping == 503);
  CHECK(health_while_stopping == 200);
}

TEST_CASE("http: built-in paths win over pattern routes, and a route with the same literal path fails to start") {
  rc::context ctx(quick_stop());
  auto all = rc::http_source({.path = "/*", .health_path = "/health"});
  ctx.add(rc::craft().id("all").from(all).transform([](rc::http_request) { return std::string("route"); }));
  running run(ctx);
  const auto port = all.port();
  CHECK(request(port, get("/health")).body == "ok\n");
  CHECK(request(port, get("/health/")).body == "ok\n");
  CHECK(request(port, get("/other")).body == "route");

  auto clash = rc::http_source({.port = port, .path = "/health"});
  ctx.add(rc::craft().id("clash").from(clash).to(rc::noop()));
  CHECK_THROWS_WITH(clash.port(), Catch::Contains("health_path"));
  auto other = rc::http_source({.port = port, .path = "/x", .health_path = "/healthz"});
  ctx.add(rc::craft().id("other").from(other).to(rc::noop()));
  CHECK_THROWS_WITH(other.port(), Catch::Contains("health_path"));
  auto same = rc::http_source({.port = port, .path = "/y", .metrics_path = "/m", .health_path = "/health"});
  ctx.add(rc::craft().id("same").from(same).to(rc::noop()));
  CHECK(same.port() == port);
  CHECK(request(port, get("/m")).status == 200);
  CHECK(request(port, get("/health")).body == "ok\n");  // the route that clashed never took it

  CHECK_THROWS_WITH(rc::http_source({.path = "/a", .metrics_path = "metrics"}), Catch::Contains("metrics_path"));
  CHECK_THROWS_WITH(rc::http_source({.path = "/a", .metrics_path = "/m/:x"}), Catch::Contains("metrics_path"));
  CHECK_THROWS_WITH(rc::http_source({.path = "/a", .health_path = "/h", .ready_path = "/h"}),
                    Catch::Contains("ready_path"));
}

}  // namespace http_test
