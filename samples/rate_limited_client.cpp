// rate_limited_client: a route that calls an HTTP service no faster than its own rate, and
// retries the service's 429s no sooner than the Retry-After the service asks for.
//
//   build/samples/rate_limited_client                   # against a local service it starts itself
//   build/samples/rate_limited_client --calls 10 --rate 2
//   build/samples/rate_limited_client --url 'http://127.0.0.1:8080/api/hello?name=client'
//   build/samples/rate_limited_client --listen '[::1]:0'  # the local service on IPv6
//
// The local service allows 3 calls per 2 s per client (draft-7 RateLimit headers). All calls
// start at once; `.retry(...).throttle(...)` puts every attempt, retries included, through the
// throttle (burst 1), so the service never sees this client faster than --rate; a 429 carries
// Retry-After, which retry waits at least before the next attempt. With the local service the
// sample checks both from the service's side and prints a summary line.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "listen_address.hpp"

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

struct settings {
  std::string url;                                                 // empty: start the local service
  samples::listen_address listen{.host = "127.0.0.1", .port = 0};  // where the local service listens
  double rate = 2;
  int calls = 10;
};

double number(std::string_view option, const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  if (used == 0 || used != text.size() || !(v > 0))
    throw std::invalid_argument(fmt::format("{} \"{}\": not a number > 0", option, text));
  return v;
}

// Throws std::invalid_argument naming the option and what is wrong with its value.
settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (a == "--url")
      s.url = next();
    else if (a == "--listen")
      s.listen = samples::parse_listen(next());
    else if (a == "--rate")
      s.rate = number("--rate", next());
    else if (a == "--calls")
      s.calls = static_cast<int>(number("--calls", next()));
    else {
      fmt::print(stderr,
                 "usage: rate_limited_client [--url URL | --listen ADDR:PORT] [--rate PER_SECOND] [--calls N]\n");
      std::exit(2);
    }
  }
  return s;
}

// What the local service saw, per arrival.
struct arrival {
  int call;
  double at_ms;
  int status;
  double retry_after_ms;  // 0 unless refused
};

}  // namespace

int main(int argc, char** argv) {
  settings s;
  try {
    s = parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "rate_limited_client: {}\n", e.what());
    return 2;
  }
  rc::context ctx({.shutdown_timeout = 5s});
  const auto t0 = clock_type::now();
  auto since_start = [t0] { return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count(); };
  std::mutex m;

  // ---- the local service: 3 calls per 2 s per client ----
  std::vector<arrival> arrivals;
  std::vector<double> refused_retry_after;
  std::string url = s.url;
  if (url.empty()) {
    auto items = rc::http_source({.host = s.listen.host, .port = s.listen.port, .path = "/items/:id"});
    ctx.add(rc::craft()
                .id("service")
                .rate_limit({.limit = 3,
                             .window = 2s,
                             .headers = rc::rate_limit_headers::draft_7,
                             .key = rc::by_client(),
                             .counting = rc::counting::fixed})
                .from(items)
                .transform([](rc::http_request r) {
                  return nlohmann::json{{"item", std::stoi(r.param("id"))}};
                }));
    // A refusal's event (with the retry-after the 429 will carry) comes just before the
    // request's completion event, on the same thread.
    ctx.on("route:rateLimit:rejected",
           [&](const rc::event& e) {
             std::lock_guard lock(m);
             refused_retry_after.push_back(1000.0 * std::ceil(e.details["retryAfterMs"].get<double>() / 1000.0));
           })
        .release();
    ctx.on("plugin:http:request:completed",
           [&](const rc::event& e) {
             const auto path = e.details["path"].get<std::string>();
             const int status = e.details["status"].get<int>();
             std::lock_guard lock(m);
             double retry_after = 0;
             if (status == 429 && !refused_retry_after.empty()) {
               retry_after = refused_retry_after.front();
               refused_retry_after.erase(refused_retry_after.begin());
             }
             arrivals.push_back({std::stoi(path.substr(path.rfind('/') + 1)), since_start(), status, retry_after});
           })
        .release();
    ctx.start();
    url = fmt::format("http://{}:{}/items/", s.listen.url_host(), items.port());
  } else {
    ctx.start();
  }
  const bool local = s.url.empty();

  // ---- the client ----
  std::map<std::string, int> call_of;  // exchange id -> call number
  std::vector<double> sent;            // when each attempt passed the client's throttle
  int retried = 0;
  ctx.on("route:throttle:passed",
         [&](const rc::event&) {
           std::lock_guard lock(m);
           sent.push_back(since_start());
         })
      .release();
  ctx.on("route:retry:attempt",
         [&](const rc::event& e) {
           std::lock_guard lock(m);
           ++retried;
           fmt::print("  {:>7.3f}s  call {:<3} refused: {} -> next attempt in {:.0f} ms\n", since_start() / 1000,
                      call_of[e.details["exchangeId"].get<std::string>()],
                      e.details["lastError"]["message"].get<std::string>(), e.details["backoffMs"].get<double>());
         })
      .release();

  std::vector<int> ids(static_cast<std::size_t>(s.calls));
  for (int i = 0; i < s.calls; ++i) ids[static_cast<std::size_t>(i)] = i + 1;
  int succeeded = 0;
  fmt::print("rate_limited_client: {} calls to {} at most {}/s, retrying 429s after their Retry-After\n", s.calls, url,
             s.rate);
  ctx.add(rc::craft()
              .id("client")
              .from(rc::simple(ids))  // all at once: the throttle paces them
              .process([&](rc::exchange& ex) {
                std::lock_guard lock(m);
                call_of[ex.id()] = ex.body<int>();
              })
              .retry({.max_attempts = 8, .backoff = 100ms})
              .throttle({.rate = s.rate, .burst = 1})
              .request<rc::http_response>(rc::http({.url_from =
                                                        [url, local](const rc::exchange& ex) {
                                                          return local ? url + std::to_string(ex.body<int>()) : url;
                                                        },
                                                    .timeout = 10s}))
              .process([&](rc::exchange& ex) {
                const auto& r = ex.body<rc::http_response>();
                const auto* limit = r.header("RateLimit");
                std::lock_guard lock(m);
                ++succeeded;
                fmt::print("  {:>7.3f}s  call {:<3} {} {}  RateLimit: {}\n", since_start() / 1000, call_of[ex.id()],
                           r.status, r.body, limit ? *limit : "-");
              }));
  ctx.drain();
  ctx.stop();

  // ---- did it keep its word? ----
  std::lock_guard lock(m);
  std::sort(sent.begin(), sent.end());
  bool paced = true;  // attempt k never before the first + k / rate (a little lateness is fine)
  for (std::size_t k = 0; k < sent.size(); ++k)
    paced = paced && sent[k] - sent[0] >= static_cast<double>(k) * 1000.0 / s.rate - 30;
  std::string waited = "n/a";
  if (local) {
    // Every refused call's next arrival came no sooner than the Retry-After it was given.
    bool ok = true;
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
      if (arrivals[i].status != 429) continue;
      for (std::size_t j = i + 1; j < arrivals.size(); ++j)
        if (arrivals[j].call == arrivals[i].call) {
          ok = ok && arrivals[j].at_ms - arrivals[i].at_ms >= arrivals[i].retry_after_ms - 10;
          break;
        }
    }
    waited = ok ? "yes" : "NO";
  }
  const bool all = succeeded == s.calls;
  fmt::print(
      "summary: {}/{} calls succeeded, {} attempts sent, {} refused with 429 and retried, never faster than "
      "{}/s: {}, every retry waited its Retry-After: {}\n",
      succeeded, s.calls, sent.size(), retried, s.rate, paced ? "yes" : "NO", waited);
  return all && paced && waited != "NO" ? 0 : 1;
}
