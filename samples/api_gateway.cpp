// api_gateway: an HTTP API in front of real clients. Each client is slowed down after a few
// requests, refused past a hard ceiling, and the whole API sits behind a global throttle that
// refuses (rather than queues) what the backend cannot take. Every gate event is printed.
//
//   build/samples/api_gateway [--listen 127.0.0.1:8080] [--threads 1] [--quiet] [--for SECONDS]
//   build/samples/api_gateway --self-test      # ephemeral port, calls itself, checks, exits
//   --listen takes IPv6 in brackets ([::1]:8080, [::]:8080 for every address); --port N is
//   short for --listen 127.0.0.1:N.
//
//   GET /api/hello?name=ada   per client: no delay for 3 requests per 10 s, then +100 ms per
//                             request (at most 2 s); at most 6 per 10 s (draft-7 RateLimit
//                             headers, 429 + Retry-After past it); all clients: 100/s, else 429
//   GET /bench/plain          a fixed JSON text, 200, no limit (the load benchmark's 200 beside
//                             nginx's, which returns the same fixed text)
//   GET /bench/ok             a per-client rate limit that never refuses (the load benchmark's 200
//                             beside Express, whose 200 path counts the same)
//   GET /bench/limited        10 per minute per client (the load benchmark's 429)
//   GET /bench/redis-ok, /bench/redis-limited   the same two with the counts in Redis
//                             (only with --redis HOST:PORT: rc::redis_store, docs/redis.md)
//   GET /metrics, /health, /ready   Prometheus metrics, liveness, readiness (docs/http.md)
//
//   curl -i 'http://127.0.0.1:8080/api/hello?name=ada'
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "listen_address.hpp"

using namespace std::chrono_literals;

namespace {

struct settings {
  samples::listen_address listen;
  unsigned threads = 1;
  bool quiet = false;
  bool self_test = false;
  int seconds = 0;         // 0: until SIGINT / SIGTERM
  std::string redis_host;  // --redis HOST:PORT: the /bench/redis-* paths
  std::uint16_t redis_port = 0;
};

int to_int(std::string_view option, const std::string& text) {
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc{} || end != text.data() + text.size())
    throw std::invalid_argument(fmt::format("{} \"{}\": not a whole number", option, text));
  return n;
}

// Throws std::invalid_argument naming the option and what is wrong with its value.
settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(a + ": the value is missing");
      return std::string(argv[++i]);
    };
    if (a == "--listen") {
      s.listen = samples::parse_listen(next());
    } else if (a == "--port") {
      const std::string text = next();
      const int port = to_int("--port", text);
      if (port < 0 || port > 65535) throw std::invalid_argument("--port " + text + ": not in [0, 65535]");
      s.listen.port = static_cast<std::uint16_t>(port);
    } else if (a == "--threads") {
      const std::string text = next();
      const int threads = to_int("--threads", text);
      if (threads < 1) throw std::invalid_argument("--threads " + text + ": at least 1");
      s.threads = static_cast<unsigned>(threads);
    } else if (a == "--quiet") {
      s.quiet = true;
    } else if (a == "--for") {
      s.seconds = to_int("--for", next());
    } else if (a == "--self-test") {
      s.self_test = true;
    } else if (a == "--redis") {
      const std::string text = next();
      const auto colon = text.rfind(':');
      const int port = colon == std::string::npos ? -1 : to_int("--redis", text.substr(colon + 1));
      if (port < 1 || port > 65535) throw std::invalid_argument("--redis " + text + ": HOST:PORT");
      s.redis_host = text.substr(0, colon);
      s.redis_port = static_cast<std::uint16_t>(port);
    } else {
      fmt::print(stderr,
                 "usage: api_gateway [--listen ADDR:PORT | --port N] [--threads N] [--quiet] [--for SECONDS] "
                 "[--self-test] [--redis HOST:PORT]\n");
      std::exit(2);
    }
  }
  if (s.self_test) s.listen.port = 0;
  return s;
}

// The API and the two benchmark routes, all on one server.
rc::http_source_endpoint add_routes(rc::context& ctx, const samples::listen_address& at, rc::redis_connection* redis) {
  const std::string& host = at.host;
  const std::uint16_t port = at.port;
  auto hello = rc::http_source({.host = host,
                                .port = port,
                                .path = "/api/hello",
                                .metrics_path = "/metrics",
                                .health_path = "/health",
                                .ready_path = "/ready"});
  ctx.add(rc::craft()
              .id("hello")
              .slow_down({.window = 10s,
                          .delay_after = 3,
                          .delay = [](std::uint64_t hit) { return (hit - 3) * 100ms; },
                          .max_delay = 2s,
                          .key = rc::by_client(),
                          .label = "per-client"})
              .rate_limit({.limit = 6,
                           .window = 10s,
                           .headers = rc::rate_limit_headers::draft_7,
                           .key = rc::by_client(),
                           .label = "per-client"})
              .throttle({.rate = 100, .mode = rc::throttle_mode::reject, .label = "global"})
              .from(hello)
              .transform([](rc::http_request req) {
                return nlohmann::json{{"hello", req.query_param("name").value_or("world")}, {"client", req.client}};
              }));

  // The load benchmark's paths: /bench/ok and /bench/limited do the same work as an Express app
  // with express-rate-limit (fixed windows, draft-7 headers, a JSON body built per request);
  // /bench/plain answers the same bytes as a fixed text with no limit, as nginx's 200 path does
  // (bench/nginx/nginx.conf).
  const rc::rate_limit_options generous{.limit = 1'000'000'000,
                                        .window = 60s,
                                        .headers = rc::rate_limit_headers::draft_7,
                                        .key = rc::by_client(),
                                        .counting = rc::counting::fixed};
  rc::rate_limit_options strict = generous;
  strict.limit = 10;
  const auto ok_body = [](const rc::http_request&) { return nlohmann::json{{"ok", true}}; };
  const auto fixed_body = [](const rc::http_request&) {
    return rc::http_response{.body = R"({"ok":true})", .content_type = "application/json"};
  };
  ctx.add(rc::craft()
              .id("bench-plain")
              .from(rc::http_source({.host = host, .port = port, .path = "/bench/plain"}))
              .transform(fixed_body));
  ctx.add(rc::craft()
              .id("bench-ok")
              .rate_limit(generous)
              .from(rc::http_source({.host = host, .port = port, .path = "/bench/ok"}))
              .transform(ok_body));
  ctx.add(rc::craft()
              .id("bench-limited")
              .rate_limit(strict)
              .from(rc::http_source({.host = host, .port = port, .path = "/bench/limited"}))
              .transform(ok_body));
  if (redis != nullptr) {
    // The same two, counted in Redis: what several instances behind a load balancer would share.
    rc::rate_limit_options shared_ok = generous, shared_limited = strict;
    shared_ok.store = rc::redis_store(*redis, {.prefix = "bench-ok"});
    shared_limited.store = rc::redis_store(*redis, {.prefix = "bench-limited"});
    ctx.add(rc::craft()
                .id("bench-redis-ok")
                .rate_limit(shared_ok)
                .from(rc::http_source({.host = host, .port = port, .path = "/bench/redis-ok"}))
                .transform(ok_body));
    ctx.add(rc::craft()
                .id("bench-redis-limited")
                .rate_limit(shared_limited)
                .from(rc::http_source({.host = host, .port = port, .path = "/bench/redis-limited"}))
                .transform(ok_body));
  }
  return hello;
}

std::vector<rc::subscription> print_events(rc::context& ctx) {
  static std::mutex out;
  std::vector<rc::subscription> subs;
  auto print = [](const rc::event& e) {
    const auto& d = e.details;
    std::string line = fmt::format("{:<28}", e.name);
    for (const char* field : {"routeId", "label", "key", "hits", "delayMs", "limit", "remaining", "retryAfterMs",
                              "reason", "method", "path", "status", "client", "duration"})
      if (auto it = d.find(field); it != d.end()) line += fmt::format(" {}={}", field, it->dump());
    std::lock_guard lock(out);
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  for (const char* name : {"route:slowDown:delayed", "route:rateLimit:rejected", "route:throttle:rejected",
                           "route:exchange:dropped", "plugin:http:request:completed"})
    subs.push_back(ctx.on(name, print));
  return subs;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Calls the gateway from a route of its own: eight quick requests from one client, then checks
// what the issue promises: three undelayed, growing delays after, 429 past six, headers on all.
int self_test(rc::context& ctx, const std::string& url_host, std::uint16_t port) {
  struct call {
    rc::http_response response;
    double elapsed_ms;
  };
  std::mutex m;
  std::vector<call> calls;
  ctx.add(
      rc::craft()
          .id("self-test")
          .from(rc::sequence(std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}))
          .process([](rc::exchange& ex) { ex.set_header("started", now_ms()); })
          .request<rc::http_response>(rc::http(
              {.url = fmt::format("http://{}:{}/api/hello?name=self", url_host, port), .throw_on_http_error = false}))
          .process([&](rc::exchange& ex) {
            const double started = ex.header("started")->get<double>();
            std::lock_guard lock(m);
            calls.push_back({ex.body<rc::http_response>(), now_ms() - started});
          }));
  // The two benchmark paths nginx and Express are measured against answer the same bytes.
  std::map<std::string, rc::http_response> bench;
  for (const std::string path : {"/bench/plain", "/bench/ok"}) {
    ctx.add(rc::craft()
                .id("self-test " + path)
                .from(rc::sequence(std::vector<int>{1}))
                .request<rc::http_response>(rc::http(
                    {.url = fmt::format("http://{}:{}{}", url_host, port, path), .throw_on_http_error = false}))
                .process([&m, &bench, path](rc::exchange& ex) {
                  std::lock_guard lock(m);
                  bench[path] = ex.body<rc::http_response>();
                }));
  }
  ctx.drain();
  bool ok = calls.size() == 8;
  for (const auto& [path, r] : bench) {
    const auto* type = r.header("Content-Type");
    fmt::print("self-test: {} -> {} {} {}\n", path, r.status, type ? *type : "-", r.body);
    ok = ok && r.status == 200 && type != nullptr && *type == "application/json" && r.body == R"({"ok":true})";
  }
  ok = ok && bench.size() == 2;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    const auto* limit = c.response.header("RateLimit");
    const auto* retry = c.response.header("Retry-After");
    fmt::print("self-test: request {} -> {} after {:.0f} ms  RateLimit: {}{}\n", i + 1, c.response.status, c.elapsed_ms,
               limit ? *limit : "-", retry ? "  Retry-After: " + *retry : "");
    const int expected_status = i < 6 ? 200 : 429;
    const double expected_delay = i < 3 ? 0 : 100.0 * static_cast<double>(i - 2);
    ok = ok && c.response.status == expected_status && limit != nullptr && (i < 6 || retry != nullptr) &&
         c.elapsed_ms >= expected_delay * 0.9 && c.elapsed_ms < expected_delay + 1000;
  }
  fmt::print("self-test: {}\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  try {
    s = parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "api_gateway: {}\n", e.what());
    return 2;
  }
  // SIGINT and SIGTERM are taken with sigwait below: block them before the worker threads exist.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  rc::context ctx({.threads = s.threads, .shutdown_timeout = 5s});
  std::unique_ptr<rc::redis_connection> redis;  // after ctx: closed before it goes
  if (!s.redis_host.empty())
    redis = std::make_unique<rc::redis_connection>(ctx, rc::redis_options{.host = s.redis_host, .port = s.redis_port});
  rc::http_source_endpoint hello = [&] {
    try {
      return add_routes(ctx, s.listen, redis.get());
    } catch (const rc::error& e) {
      fmt::print(stderr, "api_gateway: {}\n", e.what());
      std::exit(1);
    }
  }();
  std::vector<rc::subscription> subs;
  if (!s.quiet) subs = print_events(ctx);
  ctx.start();
  std::uint16_t port = 0;
  try {
    port = hello.port();
  } catch (const rc::error& e) {
    fmt::print(stderr, "api_gateway: {}\n", e.what());
    return 1;
  }
  if (s.self_test) {
    const int status = self_test(ctx, s.listen.url_host(), port);
    ctx.stop();
    return status;
  }
  fmt::print("api_gateway listening on http://{}:{}  (GET /api/hello, /bench/plain, /bench/ok, /bench/limited)\n",
             s.listen.url_host(), port);
  std::fflush(stdout);
  if (s.seconds > 0) {
    timespec t{s.seconds, 0};
    (void)sigtimedwait(&signals, nullptr, &t);
  } else {
    int sig = 0;
    sigwait(&signals, &sig);
  }
  const auto result = ctx.stop();
  fmt::print("api_gateway stopped{}\n", result.forced ? " (forced)" : "");
  return 0;
}
