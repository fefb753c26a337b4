// The HTTP server behind rc::http_source: one per (host, port) and context, shared by its routes.
//
// Each connection is one coroutine (Boost.Asio C++20 coroutines) on its own strand (the
// io_context itself when the context runs one thread): read a request, answer it, write the
// response, again while the connection is kept alive; reading a request and writing a response
// are sub-coroutines. Deadlines are kept apart from the I/O, in a watchdog coroutine per
// connection: the idle timeout runs until a request's first byte, the read timeout from there to
// its last (a slowloris client gets 408 however slowly it trickles), the response timeout while
// the pipeline runs, the write timeout while a response is going out. When one passes, the
// watchdog cancels what the connection waits for, and the connection answers for the phase it
// is in. Moving a deadline later costs nothing: the watchdog finds out when it wakes.
//
// While a request is busy a read stays outstanding, so a client that goes away is noticed at
// once (EOF or reset, as Node's default): the exchange's abort signal fires, the gates waiting
// for it give their slot back and drop it, and nothing is written. Bytes the client pipelines in
// the meantime are kept for the next request (up to watch_limit).
//
// HTTPS: the connection is a template over its stream, a plain TCP socket or a TLS stream over
// one, so the plain path is the code it was (no virtual call, no extra allocation). A TLS
// connection first handshakes within read_timeout (the watchdog closes one that never does; a
// client speaking plain HTTP to it fails the handshake and is closed), writes every response
// through the stream's asynchronous path (the eager write_some is plain TCP only: a TLS record
// cannot be half-written), and ends with a close_notify exchange bounded by the linger time.
//
// Built-in endpoints (metrics_path, health_path, ready_path) are the server's, matched before the
// routes in the same locked lookup, so a server without them pays one flag check per request. A
// route with the same literal path is refused when it starts. Every response the server sends is
// counted by status (a relaxed atomic per response); /metrics reads those counters, the engine's
// snapshot and /proc only when scraped (rc/prometheus.hpp renders them).
//
// Pipelines run on the context's io_context like everything else: a route whose steps are all
// synchronous runs inline on the connection's strand; others are spawned as rc::tasks and hand
// their result back to the strand. drain() waits for responses being written (work_started).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_set>

#include "http_internal.hpp"
#include "http_request_reader.hpp"
#include "http_routes.hpp"
#include "rc/context.hpp"
#include "rc/error.hpp"
#include "rc/prometheus.hpp"

namespace rc {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace detail {

struct http_source_state {
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<std::uint16_t> port;
  std::exception_ptr failure;

  void ready(std::uint16_t p) {
    std::lock_guard lock(mutex);
    port = p;
    cv.notify_all();
  }
  void failed(std::exception_ptr e) {
    std::lock_guard lock(mutex);
    failure = std::move(e);
    cv.notify_all();
  }

  // The route's hold on its server, released once by whichever comes first: the intake
  // callback or the source's own return (see run()).
  std::function<void()> release;
  void detach() {
    std::function<void()> f;
    {
      std::lock_guard lock(mutex);
      f = std::exchange(release, nullptr);
    }
    if (f) f();
  }
};

}  // namespace detail

namespace {

using http_detail::response_parts;

constexpr std::size_t read_chunk = 8 * 1024;
constexpr std::size_t watch_limit = 64 * 1024;  // pipelined bytes kept while a request is busy
constexpr std::size_t overflow_limit = 256;     // connections being turned away at once
constexpr auto linger_time = std::chrono::seconds(2);

// ---- routes ----------------------------------------------------------------------------------

using http_detail::path_pattern;
using http_detail::strip_trailing_slash;

struct route_entry {
  std::string method;
  std::string path;
  path_pattern pattern;
  route_runtime* route;
  std::optional<duration> response_timeout;
};

// The server's own endpoints, ahead of every route.
enum class builtin : std::uint8_t { metrics, health, ready, count_ };
constexpr std::array<std::string_view, 3> builtin_options{"metrics_path", "health_path", "ready_path"};

struct route_match {
  std::optional<builtin> special;  // a built-in endpoint: no route
  route_runtime* route = nullptr;
  std::optional<duration> response_timeout;
  bool path_found = false;
  std::string allow;  // methods served at the path, for 405
};

// What the server knows of a connection, whichever its stream.
class connection_base : public std::enable_shared_from_this<connection_base> {
 public:
  virtual ~connection_base() = default;
  /// The server is stopping: a connection waiting for a request closes now, one answering a
  /// request after its response.
  virtual void stop_soon() = 0;
};

// The TLS context of a server, from its options: RC5003 naming the file that does not load.
asio::ssl::context make_server_tls(const tls_server& t) {
  asio::ssl::context c(asio::ssl::context::tls_server);
  SSL_CTX_set_min_proto_version(c.native_handle(), TLS1_2_VERSION);
  c.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_compression |
                asio::ssl::context::single_dh_use);
  beast::error_code ec;
  c.use_certificate_chain_file(t.cert_file, ec);
  if (ec)
    invalid_option("http_source", "tls.cert_file", "a PEM certificate chain",
                   fmt::format("\"{}\" ({})", t.cert_file, ec.message()));
  c.use_private_key_file(t.key_file, asio::ssl::context::pem, ec);
  if (ec)
    invalid_option("http_source", "tls.key_file", "a PEM private key",
                   fmt::format("\"{}\" ({})", t.key_file, ec.message()));
  if (SSL_CTX_check_private_key(c.native_handle()) != 1)
    invalid_option("http_source", "tls.key_file", "the private key of tls.cert_file",
                   fmt::format("\"{}\"", t.key_file));
  return c;
}

// What a connection holds a client to while reading a request.
http_detail::request_limits limits_of(const http_server_options& o) {
  http_detail::request_limits l;
  l.max_header_bytes = o.max_header_bytes;
  l.max_body_bytes = o.max_body_bytes;
  l.chunk_line_limit = http_server_options::chunk_line_limit;
  l.leading_blank_limit = http_server_options::leading_blank_limit;
  return l;
}

// ---- the server -------------------------------------------------------------------------------

class server : public std::enable_shared_from_this<server> {
 public:
  server(context& ctx, const tcp::endpoint& ep, http_server_options options, std::optional<tls_server> tls)
      : ctx_(ctx),
        options_(std::move(options)),
        tls_options_(std::move(tls)),
        resolver_(options_),
        acceptor_(asio::make_strand(ctx.io())),
        retry_timer_(acceptor_.get_executor()) {
    if (tls_options_) tls_.emplace(make_server_tls(*tls_options_));
    beast::error_code ec;
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec && ep.address().is_v6() && ep.address().is_unspecified())
      acceptor_.set_option(asio::ip::v6_only(false), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      throw error(errc::connection_failed, fmt::format("http_source cannot listen on {}:{}: {}",
                                                       ep.address().to_string(), ep.port(), ec.message()));
    port_ = acceptor_.local_endpoint().port();
    listener_ = ep.address().is_v6() ? fmt::format("[{}]:{}", ep.address().to_string(), port_)
                                     : fmt::format("{}:{}", ep.address().to_string(), port_);
  }

  std::uint16_t port() const noexcept { return port_; }
  context& ctx() noexcept { return ctx_; }
  const http_server_options& options() const noexcept { return options_; }
  const std::optional<tls_server>& tls_options() const noexcept { return tls_options_; }
  const http_detail::client_resolver& resolver() const noexcept { return resolver_; }
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }

  void start_accepting() { accept(); }

  /// Adds a route and turns on the built-in endpoints its options name; RC5003 when a path is
  /// taken (by a route, or by another built-in path for the same endpoint). All or nothing.
  void add(route_entry e, const http_source_options& o) {
    std::lock_guard lock(mutex_);
    for (const auto& r : routes_)
      if (r.method == e.method && r.path == e.path)
        throw error(errc::misconfigured, fmt::format("http_source: {} {} on port {} is already served by route \"{}\"",
                                                     e.method, e.path, port_, r.route->id()));
    std::array<std::string, 3> paths = builtin_paths_;
    const std::array<const std::string*, 3> asked{&o.metrics_path, &o.health_path, &o.ready_path};
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (asked[i]->empty()) continue;
      const std::string p(strip_trailing_slash(*asked[i]));
      if (!paths[i].empty() && paths[i] != p)
        throw error(errc::misconfigured,
                    fmt::format("http_source: route \"{}\" gives {} \"{}\" for port {}, which serves it at \"{}\"",
                                e.route->id(), builtin_options[i], p, port_, paths[i]));
      paths[i] = p;
    }
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (paths[i].empty()) continue;
      const auto clash = [&](const route_entry& r) {
        return r.pattern.literal_only && strip_trailing_slash(r.path) == std::string_view(paths[i]);
      };
      const route_entry* taken = clash(e) ? &e : nullptr;
      for (const auto& r : routes_)
        if (taken == nullptr && clash(r)) taken = &r;
      if (taken != nullptr)
        throw error(errc::misconfigured,
                    fmt::format("http_source: route \"{}\" serves {} on port {}, the server's {}: built-in "
                                "endpoints may not share a path with a route",
                                taken->route->id(), taken->path, port_, builtin_options[i]));
    }
    builtin_paths_ = std::move(paths);
    any_builtin_ = std::any_of(builtin_paths_.begin(), builtin_paths_.end(), [](const auto& p) { return !p.empty(); });
    routes_.push_back(std::move(e));
    index_stale_ = true;
  }

  /// Returns true when no route is left.
  bool remove(route_runtime* rt) {
    std::lock_guard lock(mutex_);
    std::erase_if(routes_, [&](const route_entry& e) { return e.route == rt; });
    index_stale_ = true;
    return routes_.empty();
  }

  route_match match(std::string_view method, std::string_view path, http_headers& params) const {
    route_match m;
    const route_entry* best = nullptr;
    std::lock_guard lock(mutex_);
    if (any_builtin_) {
      const std::string_view p = strip_trailing_slash(path);
      for (std::size_t i = 0; i < builtin_paths_.size(); ++i)
        if (!builtin_paths_[i].empty() && p == builtin_paths_[i]) {
          m.special = static_cast<builtin>(i);
          return m;
        }
    }
    // The routes are tried in the order they were added: all of them, or (from index_from routes
    // on) those the index names, which include every one that matches: the same route wins. The
    // index is made when first needed after the routes changed, not on every change.
    bool narrowed = false;
    if (routes_.size() >= index_from) {
      if (index_stale_) reindex();
      narrowed = indexed_ && consider_indexed(method, path, m, best);
    }
    if (!narrowed)
      for (const auto& e : routes_) consider(e, method, path, m, best);
    if (best) {
      best->pattern.match(path, &params);
      m.route = best->route;
      m.response_timeout = best->response_timeout;
    }
    return m;
  }

  // Connection bookkeeping (any thread).
  bool admit() { return open_.fetch_add(1, std::memory_order_acq_rel) < options_.max_connections; }
  void opened(connection_base* c) {
    std::lock_guard lock(mutex_);
    live_.insert(c);
  }
  void closed(connection_base* c, bool counted) {
    if (counted) open_.fetch_sub(1, std::memory_order_acq_rel);
    std::lock_guard lock(mutex_);
    live_.erase(c);
  }
  std::atomic<std::size_t>& overflow() noexcept { return overflow_; }
  /// More connections open than threads to serve them: while one waits for its client, others
  /// may have work ready.
  bool shared_threads() const noexcept { return open_.load(std::memory_order_relaxed) > ctx_.threads(); }

  /// One response sent (any thread): a relaxed increment, nothing else.
  void count_response(int status) noexcept {
    if (status >= 100 && status < 600)
      responses_[static_cast<std::size_t>(status - 100)].fetch_add(1, std::memory_order_relaxed);
  }
  http_detail::listener_snapshot snapshot() const {
    http_detail::listener_snapshot s;
    s.listener = listener_;
    for (std::size_t i = 0; i < responses_.size(); ++i)
      if (const auto n = responses_[i].load(std::memory_order_relaxed); n > 0)
        s.responses.emplace_back(static_cast<int>(i) + 100, n);
    s.connections = open_.load(std::memory_order_relaxed);
    return s;
  }

  /// The answer of a built-in endpoint (GET and HEAD; 405 otherwise).
  http_detail::response_parts builtin_response(builtin which, std::string_view method) {
    using http_detail::response_parts;
    if (method != "GET" && method != "HEAD") {
      auto r = http_detail::error_response(405, "method_not_allowed", fmt::format("{} is not allowed here", method));
      r.headers.emplace_back("Allow", "GET, HEAD");
      return r;
    }
    response_parts r;
    r.content_type = "text/plain; charset=utf-8";
    r.headers.emplace_back("Cache-Control", "no-store");
    switch (which) {
      case builtin::metrics:
        r.content_type = std::string(prometheus_content_type);
        r.body = prometheus_text(ctx_);
        break;
      case builtin::health:
        r.body = "ok\n";
        break;
      case builtin::ready:
        if (ctx_.ready()) {
          r.body = "ready\n";
        } else {
          r.status = 503;
          r.body = "not ready\n";
        }
        break;
      case builtin::count_:
        break;
    }
    return r;
  }

  void shutdown();

 private:
  // From this many routes on, match() asks the index which may match instead of trying each.
  static constexpr std::size_t index_from = 8;

  // match()'s test of one route: whether it serves the path, for this method (else its method
  // joins Allow), and whether it beats the best so far.
  [[gnu::always_inline]] static void consider(const route_entry& e, std::string_view method, std::string_view path,
                                              route_match& m, const route_entry*& best) {
    if (!e.pattern.match(path, nullptr)) return;
    m.path_found = true;
    const bool method_ok = e.method == "*" || e.method == method || (method == "HEAD" && e.method == "GET");
    if (!method_ok) {
      if (m.allow.find(e.method) == std::string::npos) {
        if (!m.allow.empty()) m.allow += ", ";
        m.allow += e.method;
        if (e.method == "GET" && m.allow.find("HEAD") == std::string::npos) m.allow += ", HEAD";
      }
      return;
    }
    if (!best || better(e, *best, method)) best = &e;
  }

  // match() over the routes the index names; false (nothing tried) for a path it cannot narrow.
  [[gnu::noinline]] bool consider_indexed(std::string_view method, std::string_view path, route_match& m,
                                          const route_entry*& best) const {
    thread_local std::vector<std::uint32_t> candidates;
    if (!index_.candidates(path, candidates)) return false;
    for (const std::uint32_t i : candidates) consider(routes_[i], method, path, m, best);
    return true;
  }

  // Never throws: an index that could not be made is not used (every route is tried) until the
  // routes change again.
  void reindex() const noexcept {
    index_stale_ = false;
    indexed_ = false;
    try {
      std::vector<const path_pattern*> patterns;
      patterns.reserve(routes_.size());
      for (const auto& r : routes_) patterns.push_back(&r.pattern);
      index_.rebuild(patterns);
      indexed_ = true;
    } catch (...) {
    }
  }

  static bool better(const route_entry& a, const route_entry& b, std::string_view method) {
    // More literal segments, then fewer parameters, then no wildcard, then an exact method.
    if (a.pattern.literals != b.pattern.literals) return a.pattern.literals > b.pattern.literals;
    if (a.pattern.params != b.pattern.params) return a.pattern.params < b.pattern.params;
    if (a.pattern.wildcard != b.pattern.wildcard) return !a.pattern.wildcard;
    return a.method == method && b.method != method;
  }

  void accept();
  template <class Stream>
  void admit_connection(Stream stream);

  context& ctx_;
  http_server_options options_;
  std::optional<tls_server> tls_options_;
  std::optional<asio::ssl::context> tls_;
  http_detail::client_resolver resolver_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  std::uint16_t port_ = 0;
  std::string listener_;      // "127.0.0.1:8080": the metrics' label
  mutable std::mutex mutex_;  // routes_ and their index, builtin_paths_, live_
  std::vector<route_entry> routes_;
  mutable http_detail::route_index index_;    // of routes_, by their numbers there
  mutable bool index_stale_ = true;           // routes_ changed since index_ was made
  mutable bool indexed_ = false;              // index_ describes routes_
  std::array<std::string, 3> builtin_paths_;  // by builtin; empty: off (no trailing slash)
  bool any_builtin_ = false;
  std::array<std::atomic<std::uint64_t>, 500> responses_{};  // by status - 100
  std::unordered_set<connection_base*> live_;
  std::atomic<std::size_t> open_{0};
  std::atomic<std::size_t> overflow_{0};
  std::atomic<bool> stopping_{false};
};

// ---- one connection ---------------------------------------------------------------------------

template <class Stream>
class connection final : public connection_base {
  static constexpr bool is_tls = !std::is_same_v<Stream, tcp::socket>;

 public:
  connection(std::shared_ptr<server> srv, Stream stream, bool counted)
      : server_(std::move(srv)),
        socket_(std::move(stream)),
        timer_(socket_.get_executor()),
        wake_(socket_.get_executor(), steady::time_point::max()),
        counted_(counted),
        bus_(server_->ctx().events()),
        reader_(limits_of(server_->options())) {}

  ~connection() {
    if (!closed_) {
      server_->closed(this, counted_);
      if (!counted_) server_->overflow().fetch_sub(1, std::memory_order_acq_rel);
    }
    release_work();
  }

  void start() {
    server_->opened(this);
    beast::error_code ec;
    const auto remote = layer().remote_endpoint(ec);
    if (ec) {
      close();
      return;
    }
    layer().set_option(tcp::no_delay(true), ec);
    if constexpr (!is_tls) layer().non_blocking(true, ec);  // write_response() writes what fits at once
    const auto addr = http_detail::parse_ip(remote.address().to_string());
    peer_ = addr.value_or(http_detail::ip_address{});
    peer_text_ = http_detail::format_ip(peer_);
    peer_port_ = remote.port();
    const auto& resolver = server_->resolver();
    per_request_identity_ = resolver.trusts_anyone() && resolver.trusted(peer_);
    default_key_ = resolver.key_of(peer_);
    launch(&connection::serve);
  }

  /// Over max_connections: say so and go.
  void turn_away() {
    server_->opened(this);
    beast::error_code ec;
    if constexpr (!is_tls) layer().non_blocking(true, ec);
    close_after_ = true;
    launch(&connection::refuse);
  }

  void stop_soon() override {
    // Counted as the context's work until the connection has looked: stop() drains before it
    // ends the event loop, so an idle keep-alive connection is closed then, not left open until
    // the context is destroyed.
    server_->ctx().work_started();
    asio::dispatch(socket_.get_executor(), [self = self()] {
      if (!self->closed_) {
        self->close_after_ = true;
        if (self->phase_ == phase::handshake || self->phase_ == phase::idle || self->phase_ == phase::reading ||
            self->phase_ == phase::lingering)
          self->close();
      }
      self->server_->ctx().work_finished();
    });
  }

 private:
  // What the connection is doing: tells the watchdog what a passed deadline means, and
  // stop_soon() whether a request is being answered.
  enum class phase : std::uint8_t { handshake, idle, reading, running, writing, lingering };

  std::shared_ptr<connection> self() { return std::static_pointer_cast<connection>(shared_from_this()); }
  auto& layer() noexcept { return socket_.lowest_layer(); }
  enum class read_end : std::uint8_t { request, refused, closed };

  // co_await an operation directly (no frame of its own to start it), its outcome as a tuple.
  static constexpr auto use_tuple = asio::as_tuple(asio::deferred);

  // The connection's coroutine and its watchdog, on the connection's executor (its strand).
  void launch(asio::awaitable<void> (connection::*body)(std::shared_ptr<connection>)) {
    auto executor = socket_.get_executor();
    asio::co_spawn(executor, watchdog(self()), asio::detached);
    asio::co_spawn(executor, (this->*body)(self()), asio::detached);
  }

  // ---- the connection, from first byte to close ----
  asio::awaitable<void> serve([[maybe_unused]] std::shared_ptr<connection> self) {
    try {
      if constexpr (is_tls) {
        if (!co_await handshake()) {
          close();
          co_return;
        }
      }
      while (!closed_) {
        response_parts& r = response_;  // reused: its buffers keep their capacity
        r.reset();
        const read_end got = co_await read_request(r);
        if (got == read_end::closed) {
          if constexpr (is_tls)
            if (timed_out_ && !closed_) co_await tls_shutdown();  // idle: say goodbye
          break;
        }
        // A pipeline answer() starts elsewhere is awaited; its client may go away meanwhile.
        if (got == read_end::request && answer(r) && !co_await await_pipeline(r)) break;
        // Most responses go out whole in start_response(): no coroutine frame for the rest.
        if (!start_response(r) || (written_ < out_.size() && !co_await write_response())) break;
        release_work();
        if (close_after_) {
          co_await linger();
          break;
        }
      }
    } catch (...) {  // out of memory and the like: the connection goes, the thread stays
    }
    close();
  }

  asio::awaitable<void> refuse([[maybe_unused]] std::shared_ptr<connection> self) {
    try {
      response_parts r = http_detail::error_response(503, "service_unavailable", "too many connections");
      r.headers.emplace_back("Retry-After", "1");
      bool ready = true;
      if constexpr (is_tls) ready = co_await handshake();
      if (ready && start_response(r) && co_await write_response()) co_await linger();
    } catch (...) {
    }
    close();
  }

  // ---- TLS ----
  // The handshake, within read_timeout: false when it failed or did not finish in time. TLS only.
  asio::awaitable<bool> handshake() {
    phase_ = phase::handshake;
    set_deadline(steady::now() + server_->options().read_timeout);
    auto [ec] = co_await socket_.async_handshake(asio::ssl::stream_base::server, use_tuple);
    co_return !ec && !timed_out_ && !closed_;
  }

  // close_notify both ways, within the linger time; the socket closes after it either way.
  asio::awaitable<void> tls_shutdown() {
    if constexpr (is_tls) {
      phase_ = phase::lingering;
      set_deadline(steady::now() + std::min<steady::duration>(linger_time, server_->options().read_timeout));
      (void)co_await socket_.async_shutdown(use_tuple);
    }
    co_return;
  }

  // ---- reading a request ----
  // Reads until a request is complete (request), a response refuses it (refused: `r` says
  // what, and the connection closes after it) or the connection ends (closed).
  asio::awaitable<read_end> read_request(response_parts& r) {
    for (;;) {
      if (closed_) co_return read_end::closed;
      if (in_.size() > 0) {
        const bool was_started = reader_.started();
        http_detail::request_refusal why;
        const auto got = reader_.parse(in_, why);
        if (!was_started && reader_.started()) begin_request();
        if (got == http_detail::request_reader::result::request) co_return read_end::request;
        if (got == http_detail::request_reader::result::refused) {
          r = refusal(why.status, why.code, why.message);
          co_return read_end::refused;
        }
      }
      if (!reader_.started()) {
        if (close_after_) co_return read_end::closed;  // the server is stopping
        phase_ = phase::idle;
        if (in_.capacity() > watch_limit) in_.shrink_to_fit();
        // Empty lines alone do not start a request, nor put the idle deadline off.
        if (reader_.blank_bytes() == 0) set_deadline(steady::now() + server_->options().idle_timeout);
        if (in_.size() == 0 && server_->shared_threads()) {
          // Between requests, nothing buffered: the client has most likely not sent its next
          // request yet (it waited for this response). Reading now would mostly find nothing (a
          // system call for EAGAIN, then the wait); letting the other connections' ready work
          // run first gives the request time to arrive, and one read then takes it. (Asio reads
          // before it waits, whatever the last read found.) With a thread per connection there
          // is nothing to run in between, and the yield would only add a turn of the event loop.
          // No I/O is pending meanwhile, so a stop or a timeout in the gap is looked at here.
          co_await asio::post(socket_.get_executor(), asio::deferred);
          if (closed_ || close_after_ || timed_out_) co_return read_end::closed;
        }
      } else if (!co_await maybe_continue()) {
        co_return read_end::closed;
      }
      auto [ec, n] = co_await socket_.async_read_some(in_.prepare(read_chunk), use_tuple);
      if (closed_) co_return read_end::closed;
      if (timed_out_) {
        if (!reader_.started()) co_return read_end::closed;  // idle keep-alive connection
        // A request started and did not finish in time: 408, however slowly it trickled in.
        r = refusal(408, "request_timeout", "the request was not received in time");
        co_return read_end::refused;
      }
      if (ec) co_return read_end::closed;
      in_.commit(n);
    }
  }

  // A request's first byte: its read timeout starts.
  void begin_request() {
    continue_sent_ = false;
    phase_ = phase::reading;
    set_deadline(steady::now() + server_->options().read_timeout);
  }

  asio::awaitable<bool> maybe_continue() {
    if (!reader_.started() || continue_sent_) co_return true;
    const auto& parser = reader_.current();
    if (!parser.is_header_done() || parser.is_done()) co_return true;
    if (!http_detail::iequals(parser.expect(), "100-continue")) co_return true;
    continue_sent_ = true;
    static constexpr std::string_view interim = "HTTP/1.1 100 Continue\r\n\r\n";
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(interim), use_tuple);
    co_return !ec && !closed_;
  }

  // A response after which the connection cannot go on: it closes.
  response_parts refusal(int status, std::string_view code, std::string_view message) {
    reader_.reset();
    head_ = false;  // the request's method is not to be trusted either: the body goes out
    close_after_ = true;
    return http_detail::error_response(status, code, message);
  }

  // ---- answering a request ----
  // Answers at once (`r` filled; false), or starts the pipeline elsewhere (true: await it).
  bool answer(response_parts& r) {
    phase_ = phase::running;
    hold_work();
    try {
      return start_request(r);
    } catch (...) {  // out of memory and the like: answer rather than take the thread down
      close_after_ = true;
      r = http_detail::error_response(500, code_string(errc::step_failed), "Internal Server Error");
      return false;
    }
  }

  // Waits for the pipeline started by answer() and fills `r`; false when the client went away
  // meanwhile (nothing is to be written then). A read stays outstanding: that is how a
  // departure is noticed. finish() and the watchdog interrupt it.
  asio::awaitable<bool> await_pipeline(response_parts& r) {
    for (;;) {
      if (closed_) co_return false;
      if (result_) break;
      if (timed_out_) {  // response_timeout: answer now (the watchdog let the gates know)
        close_after_ = true;
        r = http_detail::error_response(503, code_string(errc::timed_out), "the response was not ready in time");
        co_return true;
      }
      if (in_.size() < watch_limit) {
        auto [ec, n] = co_await socket_.async_read_some(in_.prepare(read_chunk), use_tuple);
        if (!ec) {
          in_.commit(n);  // pipelined: kept for the next request
          continue;
        }
        if (ec == asio::error::operation_aborted) continue;  // woken: look again
        gone_ = true;                                        // EOF or reset: the client went away
        if (abort_) abort_->fire();
        co_return false;
      }
      (void)co_await wake_.async_wait(use_tuple);
    }
    try {
      http_detail::response_for(result_->result, result_->ex, r);
    } catch (...) {  // a body that cannot be written: the client learns nothing more than that
      r = http_detail::error_response(500, code_string(errc::step_failed), "Internal Server Error");
    }
    result_.reset();
    co_return true;
  }

  // Answers at once (r filled; false), or starts the pipeline (true).
  bool start_request(response_parts& r) {
    http_detail::parsed_request req = reader_.take();
    keep_alive_ = req.keep_alive;
    http10_ = req.version < 11;
    head_ = req.method == bhttp::verb::head;

    const std::string_view target = req.target;
    const auto qmark = target.find('?');
    const std::string_view path = target.substr(0, qmark);
    const std::string_view method = req.method_text;
    const bool tracing = bus_.listening(http_request_completed);
    if (tracing) {
      trace_method_ = std::string(method);
      trace_path_ = std::string(path);
      trace_route_.clear();
      trace_client_ = per_request_identity_ ? std::string() : default_key_;
      trace_started_ = steady::now();
    }

    if (server_->stopping()) {
      close_after_ = true;
      r = http_detail::error_response(503, "service_unavailable", "the server is shutting down");
      return false;
    }
    http_headers params;
    const route_match m = server_->match(method, path, params);
    if (m.special) {
      r = server_->builtin_response(*m.special, method);
      return false;
    }
    if (!m.route) {
      if (m.path_found) {
        r = http_detail::error_response(405, "method_not_allowed", fmt::format("{} is not allowed here", method));
        r.headers.emplace_back("Allow", m.allow);
      } else {
        r = http_detail::error_response(404, "not_found", "no route serves this path");
      }
      return false;
    }
    route_runtime& rt = *m.route;
    if (tracing) trace_route_ = rt.id();
    if (rt.intake().fired()) {
      close_after_ = true;
      r = http_detail::error_response(503, "service_unavailable", "the route is shutting down");
      return false;
    }

    // The body is made in place in the exchange. The reader's strings and field list move in as
    // they are; `method`, `target` and `path` view them, so they are copied out first.
    exchange ex;
    http_request& body = ex.raw_body().emplace<http_request>();
    body.path = std::string(path);
    if (qmark != std::string_view::npos) body.query = std::string(target.substr(qmark + 1));
    body.method = std::move(req.method_text);
    body.target = std::move(req.target);
    body.params = std::move(params);
    body.headers = std::move(req.fields);
    body.body = std::move(req.body);
    if (!body.body.empty()) {
      const std::string* ct = body.header("Content-Type");
      if (ct && http_detail::is_json_content_type(*ct)) {
        auto parsed = nlohmann::json::parse(body.body, nullptr, false);
        if (parsed.is_discarded()) {
          r = http_detail::error_response(400, code_string(errc::validation), "the request body is not valid JSON");
          return false;
        }
        body.json = std::move(parsed);
      }
    }
    body.peer = peer_text_;
    body.peer_port = peer_port_;
    if (per_request_identity_) {
      auto who = server_->resolver().resolve(peer_, body.headers);
      body.client = std::move(who.address);
      body.client_key = std::move(who.key);
      if (tracing) trace_client_ = body.client_key;
    } else {
      body.client = peer_text_;
      body.client_key = default_key_;
    }

    set_deadline(m.response_timeout ? steady::now() + *m.response_timeout : steady::time_point::max());
    rt.adopt(ex);
    ex.headers() = std::exchange(spare_headers_, header_map());
    ex.headers().set_string(client_header, body.client_key);
    if (const auto* corr = body.header("X-Correlation-Id"); corr && !corr->empty() && corr->size() <= 128)
      ex.set_correlation_id(*corr);
    if (m.response_timeout) ex.set_deadline(rt.now() + *m.response_timeout);

    if (rt.all_synchronous()) {  // inline, on this strand: no coroutine of the engine's at all
      // Nothing can see the client go, nor the watchdog fire, before the run ends (both happen on
      // this strand): there is nobody to abort, so no abort signal to make and tear down.
      run_result done = rt.process_now(std::move(ex));
      try {
        http_detail::response_for(done.result, done.ex, r);
      } catch (...) {
        r = http_detail::error_response(500, code_string(errc::step_failed), "Internal Server Error");
      }
      if (header_map& h = done.ex.headers(); h.size() == 1 && h.begin()->first == client_header)
        spare_headers_ = std::move(h);
      return false;
    }
    abort_.emplace(server_->ctx().clock());
    ex.set_abort_signal(&*abort_);
    pipeline_running_ = true;
    rc::spawn(rt.frames(), [self = self(), route = &rt, ex = std::move(ex)]() mutable {
      return run_exchange(std::move(self), route, std::move(ex));
    });
    return true;
  }

  static task<void> run_exchange(std::shared_ptr<connection> self, route_runtime* rt, exchange ex) {
    run_result r = co_await rt->process(std::move(ex));
    auto executor = self->socket_.get_executor();
    asio::dispatch(executor, [self = std::move(self), r = std::move(r)]() mutable { self->finish(std::move(r)); });
  }

  // On the strand, when an exchange run elsewhere is over.
  void finish(run_result r) {
    // Its abort signal can go now (it must not outlive the context's clock).
    pipeline_running_ = false;
    abort_.reset();
    if (closed_ || gone_ || phase_ != phase::running || timed_out_) return;  // nobody waits for it
    result_.emplace(std::move(r));
    wake();
  }

  // Interrupts whatever the connection's coroutine waits for; it looks at its state again.
  void wake() {
    beast::error_code ec;
    layer().cancel(ec);
    wake_.cancel();
  }

  // ---- writing a response ----
  // Serialises `r` and writes what the socket takes at once: all of it for most responses, which
  // then need no wait at all. False when the connection is done for.
  bool start_response(const response_parts& r) {
    const bool keep = keep_alive_ && !close_after_ && !server_->stopping();
    if (!keep) close_after_ = true;
    if (!trace_method_.empty()) trace(r.status);
    server_->count_response(r.status);
    out_.clear();  // its capacity is reused from one response to the next
    http_detail::serialize_response(out_, r, head_, keep, http10_);
    phase_ = phase::writing;
    written_ = 0;
    if constexpr (is_tls) {
      return true;  // all of it through write_response()
    } else {
      beast::error_code ec;
      written_ = socket_.write_some(asio::buffer(out_), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        ec = {};
        written_ = 0;
      }
      return !ec || write_failed();
    }
  }

  // The rest of the response, within write_timeout. False when it could not be written.
  asio::awaitable<bool> write_response() {
    if (written_ == out_.size()) co_return true;
    set_deadline(steady::now() + server_->options().write_timeout);
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(out_) + written_, use_tuple);
    if (ec || timed_out_ || closed_) co_return write_failed();
    co_return true;
  }

  // The client does not read what we write, or is gone.
  bool write_failed() {
    if (pipeline_running_ && abort_) abort_->fire();
    return false;
  }

  void trace(int status) {
    bus_.emit(http_request_completed, [&] {
      nlohmann::json j = {
          {"method", trace_method_},
          {"path", trace_path_},
          {"status", status},
          {"client", trace_client_},
          {"duration", std::chrono::duration<double, std::milli>(steady::now() - trace_started_).count()}};
      if (!trace_route_.empty()) j["routeId"] = trace_route_;
      return j;
    });
    trace_method_.clear();
  }

  // ---- closing ----
  // After an error response the client may still be sending: closing at once would reset the
  // connection and could destroy the response before it is read. Stop sending, read and discard
  // for a moment, then close.
  asio::awaitable<void> linger() {
    if constexpr (is_tls) {
      co_await tls_shutdown();
      co_return;
    }
    beast::error_code ec;
    layer().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) co_return;
    phase_ = phase::lingering;
    set_deadline(steady::now() + std::min<steady::duration>(linger_time, server_->options().read_timeout));
    for (;;) {
      in_.consume(in_.size());
      auto [rec, n] = co_await socket_.async_read_some(in_.prepare(read_chunk), use_tuple);
      if (rec || timed_out_ || closed_) co_return;
    }
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    layer().close(ec);
    timer_.cancel();
    wake_.cancel();
    server_->closed(this, counted_);
    if (!counted_) server_->overflow().fetch_sub(1, std::memory_order_acq_rel);
    if (!pipeline_running_) abort_.reset();
    release_work();
  }

  void hold_work() {
    if (work_held_) return;
    work_held_ = true;
    server_->ctx().work_started();
  }
  void release_work() {
    if (!work_held_) return;
    work_held_ = false;
    server_->ctx().work_finished();
  }

  // ---- the watchdog: deadlines, apart from the I/O ----
  // One deadline at a time, for the phase the connection is in. Moving it later costs nothing
  // (the watchdog finds out when it wakes); moving it earlier wakes the watchdog to re-arm.
  void set_deadline(steady::time_point t) {
    deadline_ = t;
    timed_out_ = false;
    if (t < timer_at_) timer_.cancel();
  }

  asio::awaitable<void> watchdog([[maybe_unused]] std::shared_ptr<connection> self) {
    while (!closed_) {
      timer_at_ = deadline_;
      timer_.expires_at(deadline_);
      (void)co_await timer_.async_wait(use_tuple);
      timer_at_ = steady::time_point::max();
      if (closed_) break;
      if (steady::now() < deadline_) continue;  // moved, or re-armed earlier
      // Passed: cancel what the connection waits for; it sees timed_out_ and knows what it means
      // where it is (handshake, idle: close; reading: 408; running: 503; writing, lingering: close).
      deadline_ = steady::time_point::max();
      timed_out_ = true;
      if (phase_ == phase::running && abort_) abort_->fire();  // the gates let the exchange go
      wake();
    }
  }

  std::shared_ptr<server> server_;
  Stream socket_;             // tcp::socket, or asio::ssl::stream<tcp::socket>
  asio::steady_timer timer_;  // the watchdog's
  asio::steady_timer wake_;   // never expires: a wait on it ends when someone calls wake()
  bool counted_;
  event_bus& bus_;
  beast::flat_buffer in_;
  http_detail::request_reader reader_;
  std::string out_;
  std::size_t written_ = 0;  // bytes of out_ the socket has taken
  response_parts response_;  // the response being answered, reused from request to request
  std::optional<cancel_signal> abort_;
  std::optional<run_result> result_;  // an exchange run elsewhere, handed back by finish()
  // The header list of the last exchange answered here when it held only the client key: the
  // next request's exchange takes it, list and strings, and sets the key in place.
  header_map spare_headers_;

  http_detail::ip_address peer_;
  std::string peer_text_;
  std::uint16_t peer_port_ = 0;
  std::string default_key_;
  bool per_request_identity_ = false;

  steady::time_point deadline_ = steady::time_point::max();
  steady::time_point timer_at_ = steady::time_point::max();
  phase phase_ = phase::idle;
  bool timed_out_ = false;  // the watchdog found deadline_ passed

  std::string trace_method_, trace_path_, trace_route_, trace_client_;
  steady::time_point trace_started_{};

  bool continue_sent_ = false;
  bool close_after_ = false;  // no request after this one (an error, HTTP/1.0, a stopping server)
  bool gone_ = false;
  bool closed_ = false;
  bool keep_alive_ = true;
  bool http10_ = false;
  bool head_ = false;
  bool work_held_ = false;
  bool pipeline_running_ = false;  // an exchange holds a pointer to abort_
};

void server::accept() {
  // One thread: the io_context is the strand. Several: each connection gets its own.
  const auto executor = ctx_.threads() > 1 ? asio::any_io_executor(asio::make_strand(ctx_.io()))
                                           : asio::any_io_executor(ctx_.io().get_executor());
  acceptor_.async_accept(executor, [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || self->stopping()) return;
    if (ec) {  // out of file descriptors and the like: breathe, then go on accepting
      self->retry_timer_.expires_after(std::chrono::milliseconds(50));
      self->retry_timer_.async_wait([self](beast::error_code e) {
        if (!e && !self->stopping()) self->accept();
      });
      return;
    }
    if (self->tls_)
      self->admit_connection(asio::ssl::stream<tcp::socket>(std::move(s), *self->tls_));
    else
      self->admit_connection(std::move(s));
    self->accept();
  });
}

template <class Stream>
void server::admit_connection(Stream stream) {
  if (admit()) {
    std::make_shared<connection<Stream>>(shared_from_this(), std::move(stream), true)->start();
  } else {
    open_.fetch_sub(1, std::memory_order_acq_rel);
    if (overflow_.fetch_add(1, std::memory_order_acq_rel) < overflow_limit) {
      std::make_shared<connection<Stream>>(shared_from_this(), std::move(stream), false)->turn_away();
    } else {
      overflow_.fetch_sub(1, std::memory_order_acq_rel);
      beast::error_code ignored;
      stream.lowest_layer().close(ignored);
    }
  }
}

void server::shutdown() {
  stopping_.store(true, std::memory_order_release);
  asio::dispatch(acceptor_.get_executor(), [self = shared_from_this()] {
    beast::error_code ec;
    self->acceptor_.close(ec);
    self->retry_timer_.cancel();
  });
  std::vector<std::shared_ptr<connection_base>> open;
  {
    std::lock_guard lock(mutex_);
    for (auto* c : live_)
      if (auto sp = c->weak_from_this().lock()) open.push_back(std::move(sp));
  }
  for (auto& c : open) c->stop_soon();
}

// ---- the registry: one server per (host, port) and context ---------------------------------------

class http_server_registry {
 public:
  explicit http_server_registry(context& ctx) : ctx_(ctx) {}

  std::shared_ptr<server> attach(const http_source_options& o, route_runtime& rt) {
    // One spelling per address ("[::1]" and "::1", "localhost" and "127.0.0.1" are one server).
    const std::string host =
        o.host == "localhost" ? "127.0.0.1" : http_detail::format_ip(http_detail::parse_ip(o.host).value());
    std::lock_guard lock(mutex_);
    // Port 0 routes of a host share one ephemeral server; a route naming that server's port
    // joins it too.
    // A plain and a TLS port-0 route do not share one.
    const std::string ephemeral_key = o.tls ? host + " tls" : host;
    std::shared_ptr<server> s = o.port == 0 ? find(ephemeral_, ephemeral_key)
                                            : find(servers_, std::pair<std::string, std::uint16_t>{host, o.port});
    if (s) {
      if (o.tls != s->tls_options())
        throw error(errc::misconfigured,
                    fmt::format("http_source: route \"{}\" gives tls settings for {}:{} that differ from those of "
                                "the routes already on it",
                                rt.id(), host, s->port()));
      if (o.server != s->options() && o.server != http_server_options{})
        throw error(errc::misconfigured,
                    fmt::format("http_source: route \"{}\" gives server options for {}:{} that differ from those of "
                                "the routes already on it; set them on one route, or the same on all",
                                rt.id(), host, s->port()));
    } else {
      s = std::make_shared<server>(ctx_, tcp::endpoint(asio::ip::make_address(host), o.port), o.server, o.tls);
      s->start_accepting();
      servers_[{host, s->port()}] = s;
      if (o.port == 0) ephemeral_[ephemeral_key] = s;
    }
    s->add(route_entry{o.method, o.path, path_pattern::parse(o.path), &rt, o.response_timeout}, o);
    return s;
  }

  std::vector<http_detail::listener_snapshot> snapshots() {
    std::lock_guard lock(mutex_);
    std::vector<http_detail::listener_snapshot> out;
    out.reserve(servers_.size());
    for (const auto& [where, s] : servers_) out.push_back(s->snapshot());
    return out;
  }

  void detach(const std::shared_ptr<server>& s, route_runtime& rt) {
    if (!s->remove(&rt)) return;
    {
      std::lock_guard lock(mutex_);
      std::erase_if(servers_, [&](const auto& kv) { return kv.second == s; });
      std::erase_if(ephemeral_, [&](const auto& kv) { return kv.second == s; });
    }
    s->shutdown();
  }

 private:
  template <class Map, class Key>
  static std::shared_ptr<server> find(Map& map, const Key& key) {
    auto it = map.find(key);
    if (it == map.end() || it->second->stopping()) return nullptr;
    return it->second;
  }

  context& ctx_;
  std::mutex mutex_;
  std::map<std::pair<std::string, std::uint16_t>, std::shared_ptr<server>> servers_;
  std::map<std::string, std::shared_ptr<server>> ephemeral_;
};

}  // namespace

std::vector<http_detail::listener_snapshot> http_detail::listener_snapshots(context& ctx) {
  return ctx.service<http_server_registry>().snapshots();
}

// ---- the source ---------------------------------------------------------------------------------

http_source_endpoint::http_source_endpoint(http_source_options options)
    : options_(std::move(options)), state_(std::make_shared<detail::http_source_state>()) {
  options_.validate();
}

task<void> http_source_endpoint::run(source_context& sc) {
  context& ctx = sc.route().ctx();
  route_runtime& rt = sc.route();
  try {
    if (ctx.is_virtual())
      throw error(errc::misconfigured, "http_source needs a real-time context: sockets do not run in rc::virtual_time");
    auto& registry = ctx.service<http_server_registry>();
    auto srv = registry.attach(options_, rt);
    const std::uint16_t port = srv->port();
    {
      std::lock_guard lock(state_->mutex);
      state_->release = [&registry, &rt, srv = std::move(srv)] { registry.detach(srv, rt); };
    }
    state_->ready(port);
  } catch (...) {
    state_->failed(std::current_exception());
    throw;
  }
  // Leave the server the moment intake closes, from the stopping thread: stop() may end the
  // io_context before this coroutine is resumed, and the server must not wait for that (the
  // frame holds nothing that keeps it alive).
  rt.intake().on_fire([state = state_] { state->detach(); });
  (void)co_await sc.sleep_until(time_point::max());  // serve until the route stops taking work
  state_->detach();
}

std::uint16_t http_source_endpoint::port(duration wait) const {
  std::unique_lock lock(state_->mutex);
  state_->cv.wait_for(lock, wait, [&] { return state_->port.has_value() || state_->failure != nullptr; });
  if (state_->failure) std::rethrow_exception(state_->failure);
  if (!state_->port)
    throw error(errc::timed_out, fmt::format("http_source {} {}: not listening after {} (was the context started?)",
                                             options_.method, options_.path, ms_text(wait)));
  return *state_->port;
}

}  // namespace rc
