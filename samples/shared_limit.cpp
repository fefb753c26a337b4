// shared_limit: two gateway instances behind one limit. Each instance is its own rc::context with
// its own HTTP server and its own Redis connection, as two processes behind a load balancer would
// be; their per-client rate_limit keeps its counts in Redis (rc::redis_store), so a client gets
// `limit` requests per window in total, not `limit` per instance.
//
//   build/samples/shared_limit                       # starts its own redis-server (loopback, no persistence)
//   build/samples/shared_limit --redis 127.0.0.1:6379
//
// A client then sends 30 requests, alternating between the two instances, and the sample prints
// what each got. With the limit in memory, each instance would admit 10: 20 in all.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <rc/rc.hpp>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

constexpr std::int64_t limit = 10;
constexpr int requests = 30;

// A redis-server of our own on a free loopback port, in a temporary directory, no persistence.
class own_redis {
 public:
  own_redis() {
    char dir[] = "/tmp/shared-limit-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
    port_ = free_port();
    const std::string port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--dir", dir_.c_str(),
               "--save", "", "--appendonly", "no", "--logfile", (dir_ + "/redis.log").c_str(),
               static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 1000; ++i) {
      if (answers()) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) throw std::runtime_error("redis-server did not start");
      std::this_thread::sleep_for(10ms);
    }
    throw std::runtime_error("redis-server did not answer");
  }
  ~own_redis() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::uint16_t port() const { return port_; }

 private:
  static std::uint16_t free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  }
  bool answers() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port_);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (ok) {
      ok = ::write(fd, "PING\r\n", 6) == 6;
      char buf[8] = {};
      ok = ok && ::read(fd, buf, 5) == 5 && std::string(buf, 5) == "+PONG";
    }
    ::close(fd);
    return ok;
  }
  std::string dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

// One gateway instance: its own context, Redis connection and HTTP server.
struct gateway {
  rc::context ctx;
  rc::redis_connection redis;
  rc::http_source_endpoint api;

  gateway(const std::string& redis_host, std::uint16_t redis_port)
      : redis(ctx, {.host = redis_host, .port = redis_port}),
        api(rc::http_source({.host = "127.0.0.1", .port = 0, .path = "/api"})) {
    auto shared = rc::redis_store(redis, {.prefix = "shared_limit", .timeout = 100ms});
    ctx.add(rc::craft()
                .id("api")
                .rate_limit({.limit = limit,
                             .window = 1min,
                             .headers = rc::rate_limit_headers::draft_7,
                             .key = rc::by_client(),
                             .store = shared})
                .from(api)
                .transform([](rc::http_request) {
                  return nlohmann::json{{"ok", true}};
                }));
    ctx.start();
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::unique_ptr<own_redis> server;
  try {
    if (argc == 3 && std::string(argv[1]) == "--redis") {
      const std::string at = argv[2];
      const auto colon = at.rfind(':');
      host = at.substr(0, colon);
      port = static_cast<std::uint16_t>(std::stoi(at.substr(colon + 1)));
    } else if (argc != 1) {
      fmt::print(stderr, "usage: shared_limit [--redis HOST:PORT]\n");
      return 2;
    } else {
      server = std::make_unique<own_redis>();
      port = server->port();
      fmt::print("started redis-server on 127.0.0.1:{}\n", port);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "shared_limit: {}\n", e.what());
    return 1;
  }

  int status = 0;
  {
    gateway a(host, port), b(host, port);
    const std::uint16_t ports[2] = {a.api.port(), b.api.port()};
    fmt::print("instance A on :{}, instance B on :{}, one rate_limit of {} per minute per client in Redis\n", ports[0],
               ports[1], limit);

    // The client: 30 requests, A, B, A, B, ...
    rc::context client;
    std::mutex m;
    int admitted[2] = {0, 0}, refused[2] = {0, 0};
    std::vector<int> order;
    for (int i = 0; i < requests; ++i) order.push_back(i);
    client.add(rc::craft()
                   .id("client")
                   .from(rc::sequence(order))
                   .process([&](rc::exchange& ex) { ex.set_header("instance", ex.body<int>() % 2); })
                   .request<rc::http_response>(rc::http({.url_from =
                                                             [&](const rc::exchange& ex) {
                                                               const int i = ex.header("instance")->get<int>();
                                                               return fmt::format("http://127.0.0.1:{}/api", ports[i]);
                                                             },
                                                         .throw_on_http_error = false}))
                   .process([&](rc::exchange& ex) {
                     const int i = ex.header("instance")->get<int>();
                     const auto& r = ex.body<rc::http_response>();
                     const auto* rl = r.header("RateLimit");
                     std::lock_guard lock(m);
                     (r.status == 200 ? admitted : refused)[i]++;
                     fmt::print("request to {} -> {}  RateLimit: {}\n", i == 0 ? 'A' : 'B', r.status, rl ? *rl : "-");
                   }));
    client.start();
    client.drain();
    client.stop();
    const int total = admitted[0] + admitted[1];
    const bool held = total == limit && refused[0] + refused[1] == requests - limit;
    fmt::print("A admitted {}, refused {}; B admitted {}, refused {}\n", admitted[0], refused[0], admitted[1],
               refused[1]);
    fmt::print("result: 2 instances, {} requests, {} admitted in all (limit {}), {} refused with 429: {}\n", requests,
               total, limit, refused[0] + refused[1], held ? "the shared limit held" : "the shared limit did NOT hold");
    status = held ? 0 : 1;
    a.ctx.stop();
    b.ctx.stop();
  }
  return status;
}
